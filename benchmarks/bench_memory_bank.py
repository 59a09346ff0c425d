"""The memory-bank loss step of [WL21]'s protocol: B=128 queries against a 50,000 x 128 bank (issue 4; goal <= 30 ms).

One step = `MemoryBank.loss` (by default lesson 14's one-pass `fast_bank_contrastive_loss` for these two losses), its
backward pass to the queries, and the moving-average update of the queries' rows. Measured for the ordinary loss and the
hard loss (alpha = 0.0819, 4095 negatives kept; on the CPU its threshold comes from lesson 13's compiled selection and
its softmax and gradient run over the kept rows only), with the bank in float32 and in bfloat16, next to the same step
with lesson 06's plain loss (`fast=False`: cross-entropy of q @ bank.T / tau through autograd, torch.topk for the hard
loss) and the bare matrix product q @ bank.T (forward + backward), the floor of the ordinary step. Run: `python benchmarks/bench_memory_bank.py [--rounds N]`.
"""
from __future__ import annotations

import argparse, json, statistics
from pathlib import Path

import torch
import torch.nn.functional as F

from ctl_explore.memory_bank import MemoryBank

from bench_losses import machine, per_call

RESULTS = Path(__file__).parent / "results"


def cases(batch=128, dim=128, size=50_000, tau=0.07, alpha=0.0819):
    g = torch.Generator().manual_seed(0)
    q32 = F.normalize(torch.randn(batch, dim, generator=g), dim=1)
    idx = torch.randperm(size, generator=g)[:batch]
    out = {}
    for dtype in (torch.float32, torch.bfloat16):
        bank = MemoryBank(size, dim, generator=torch.Generator().manual_seed(1), dtype=dtype)
        q0, name = q32.to(dtype), str(dtype).replace("torch.", "")

        def step(loss, bank=bank, q0=q0, fast=True, **params):
            q = q0.clone().requires_grad_()
            bank.loss(q, idx, loss, fast=fast, tau=tau, **params).backward()
            bank.update(idx, q.detach())

        def floor(bank=bank, q0=q0):
            q = q0.clone().requires_grad_()
            (q @ bank.features.T).sum().backward()

        out[f"{name}: contrastive step"] = lambda step=step: step("contrastive")
        out[f"{name}: hard_contrastive step (alpha={alpha})"] = lambda step=step: step("hard_contrastive", alpha=alpha)
        out[f"{name}: contrastive step, plain loss (fast=False)"] = lambda step=step: step("contrastive", fast=False)
        out[f"{name}: hard_contrastive step, plain loss (fast=False)"] = lambda step=step: step("hard_contrastive", fast=False, alpha=alpha)
        if dtype != torch.float32:  # what training does with a low-precision bank: float32 queries from the network
            out[f"{name} bank, float32 queries: contrastive step"] = lambda step=step: step("contrastive", q0=q32)
            out[f"{name} bank, float32 queries: hard_contrastive step"] = lambda step=step: step("hard_contrastive", q0=q32, alpha=alpha)
        out[f"{name}: q @ bank.T forward+backward alone (floor)"] = floor
    return out


def main(rounds: int = 5) -> dict:
    timed = cases()
    ms = {k: [] for k in timed}
    for _ in range(rounds):
        for name, fn in timed.items(): ms[name].append(per_call(fn, 3) * 1e3)
    rows = [dict(case=k, median_ms=round(statistics.median(v), 1)) for k, v in ms.items()]
    print(f"machine: {machine()}")
    print("memory-bank loss step, B=128 queries, 50,000 x 128 bank (goal <= 30 ms)")
    for r in rows: print(f"  {r['case']:<60} {r['median_ms']:>8.1f} ms")
    return dict(machine=machine(), rows=rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()
    result = main(args.rounds)
    if not args.no_save:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "memory_bank.json").write_text(json.dumps(result, indent=2) + "\n")
