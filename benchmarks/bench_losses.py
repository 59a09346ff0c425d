"""Speed of the loss core against a plain baseline run in the same process.

Cases (issue 2; since issue 14 the lessons' losses are the plain torch versions, and only the memory-bank loss has a
fast version, lesson 14's `fast_bank_contrastive_loss`, which `MemoryBank.loss` trains with):
* forward + backward of lesson 00's `contrastive_loss(*pair_similarities(z1, z2), tau)` (log_softmax, autograd) at
  B=256 pairs, d=128, as a ratio to `F.cross_entropy` over the full 2B x 2B similarity matrix with the diagonal masked
  (issue 2's goal was <= 1.1x);
* the same for `hard_contrastive_loss(..., alpha=0.1)` (torch.topk threshold; issue 2's goal was <= 1.5x);
* the bank case, B=128 queries against a 50,000 x 128 bank (goal < 30 ms): lesson 06's plain `bank_contrastive_loss`
  (cross-entropy of q @ bank.T / tau, autograd; topk for the hard loss), its two-step form `bank_similarities` +
  `contrastive_loss`, and lesson 14's one-pass `fast_bank_contrastive_loss`, forward and forward + backward, with the
  bank in float32 and bfloat16, next to the bare matrix products.

Timings are interleaved (baseline, candidate, baseline, ...) so that load from other processes hits both alike;
ratios are medians of per-round ratios. Run: `python benchmarks/bench_losses.py [--rounds N]`.
"""
from __future__ import annotations

import argparse, datetime, json, os, platform, statistics, time
from pathlib import Path

import torch
import torch.nn.functional as F

from ctl_explore.fast import fast_bank_contrastive_loss
from ctl_explore.losses import contrastive_loss, hard_contrastive_loss, pair_similarities
from ctl_explore.memory_bank import bank_contrastive_loss, bank_similarities

RESULTS = Path(__file__).parent / "results"


def machine() -> dict:
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
    return dict(cpu=cpu, threads=torch.get_num_threads(), torch=torch.__version__, python=platform.python_version(),
                date=datetime.date.today().isoformat(), load_average_1min=round(os.getloadavg()[0], 2))


def per_call(fn, calls: int) -> float:
    "Seconds per call of `fn`, over `calls` calls after one warm-up call."
    fn()
    start = time.perf_counter()
    for _ in range(calls): fn()
    return (time.perf_counter() - start) / calls


def pair_cases(batch=256, dim=128, tau=0.1, alpha=0.1):
    g = torch.Generator().manual_seed(0)
    z1 = F.normalize(torch.randn(batch, dim, generator=g), dim=1)
    z2 = F.normalize(z1 + 0.5 * torch.randn(batch, dim, generator=g), dim=1)
    targets = torch.cat([torch.arange(batch, 2 * batch), torch.arange(batch)])
    self_mask = torch.eye(2 * batch, dtype=torch.bool)

    def leaves(): return z1.clone().requires_grad_(), z2.clone().requires_grad_()

    def baseline():
        a, b = leaves()
        z = torch.cat([a, b])
        F.cross_entropy((z @ z.T).masked_fill(self_mask, float("-inf")) / tau, targets).backward()

    def ours():
        a, b = leaves()
        contrastive_loss(*pair_similarities(a, b), tau).backward()

    def hard():
        a, b = leaves()
        hard_contrastive_loss(*pair_similarities(a, b), tau, alpha).backward()

    return baseline, {"contrastive_loss(pair_similarities)": ours, f"hard_contrastive_loss(alpha={alpha})": hard}


def bank_cases(batch=128, dim=128, size=50_000, tau=0.07):
    g = torch.Generator().manual_seed(0)
    bank32 = F.normalize(torch.randn(size, dim, generator=g), dim=1)
    q32 = F.normalize(torch.randn(batch, dim, generator=g), dim=1)
    idx = torch.randperm(size, generator=g)[:batch]
    cases = {}
    for dtype in (torch.float32, torch.bfloat16):
        bank, q0 = bank32.to(dtype), q32.to(dtype)
        name = str(dtype).replace("torch.", "")

        def forward(bank=bank, q0=q0):
            with torch.no_grad(): contrastive_loss(*bank_similarities(q0, bank, idx), tau)

        def forward_backward(bank=bank, q0=q0):
            q = q0.clone().requires_grad_()
            contrastive_loss(*bank_similarities(q, bank, idx), tau).backward()

        def matmul_floor(bank=bank, q0=q0):
            q = q0.clone().requires_grad_()
            (q @ bank.T).sum().backward()

        def one_pass(bank=bank, alpha=None, loss_fn=fast_bank_contrastive_loss):
            q = q32.clone().requires_grad_()  # float32 queries, as a network gives them
            loss_fn(q, bank, idx, tau, alpha).backward()

        cases[f"bank {name}: two-step forward"] = forward
        cases[f"bank {name}: two-step forward+backward"] = forward_backward
        cases[f"bank {name}: plain bank_contrastive_loss forward+backward"] = lambda one_pass=one_pass: one_pass(loss_fn=bank_contrastive_loss)
        cases[f"bank {name}: plain bank_contrastive_loss hard (alpha=0.0819) forward+backward"] = (
            lambda one_pass=one_pass: one_pass(alpha=0.0819, loss_fn=bank_contrastive_loss))
        cases[f"bank {name}: fast_bank_contrastive_loss forward+backward"] = one_pass
        cases[f"bank {name}: fast_bank_contrastive_loss hard (alpha=0.0819) forward+backward"] = lambda one_pass=one_pass: one_pass(alpha=0.0819)
        cases[f"bank {name}: q@bank.T forward+backward alone (floor)"] = matmul_floor
    return cases


def main(rounds: int = 30) -> dict:
    baseline, candidates = pair_cases()
    ratios = {k: [] for k in candidates}
    base_ms = []
    for _ in range(rounds):
        for name, fn in candidates.items():
            b = per_call(baseline, 10)
            c = per_call(fn, 10)
            base_ms.append(b * 1e3)
            ratios[name].append(c / b)
    rows = [dict(case=name, median_ratio=round(statistics.median(r), 3), goal=goal)
            for (name, r), goal in zip(ratios.items(), ("<= 1.1", "<= 1.5"))]
    cases = bank_cases()
    bank_ms = {k: [] for k in cases}
    for _ in range(max(3, rounds // 5)):
        for name, fn in cases.items(): bank_ms[name].append(per_call(fn, 3) * 1e3)
    bank_rows = [dict(case=name, median_ms=round(statistics.median(v), 2)) for name, v in bank_ms.items()]
    result = dict(machine=machine(), baseline_ms=round(statistics.median(base_ms), 3), pair=rows, bank=bank_rows)
    print(f"machine: {result['machine']}")
    print(f"baseline (F.cross_entropy over the masked 2Bx2B matrix, fwd+bwd, B=256, d=128): {result['baseline_ms']} ms")
    for r in rows: print(f"  {r['case']:<45} {r['median_ratio']:>6.3f} x baseline   (goal {r['goal']})")
    print("bank: B=128 queries, 50,000 x 128 bank (goal < 30 ms)")
    for r in bank_rows: print(f"  {r['case']:<82} {r['median_ms']:>8.2f} ms")
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30, help="interleaved rounds (default 30)")
    parser.add_argument("--no-save", action="store_true", help="print only; do not write benchmarks/results/losses.json")
    args = parser.parse_args()
    result = main(args.rounds)
    if not args.no_save:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "losses.json").write_text(json.dumps(result, indent=2) + "\n")
        print(f"written to {RESULTS / 'losses.json'}")
