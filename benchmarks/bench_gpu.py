"""Images per second of `pretrain`'s training step on GPUs, beside the published anchors (issue 15, part 2; issue 16).

It times the step function of `pretrain` itself (`ctl_explore.train.training_step`, fed as `pretrain` feeds it: the
global batch's augmentation numbers drawn by `view_draws`, the value checks off): the augmentation on the device, the
forward pass of ResNet18 with the 3x3 stem in channels-last under bf16 autocast, the loss in float32, the backward
pass, the SGD update, and with the memory bank its moving-average update. Two ways to take negatives are timed:

* `bank`, [WL21]'s protocol: one augmented view per image against a 50,000-row memory bank;
* `batch`, SimCLR's: two views per image, each against the other views of the batch. This is the like-for-like
  comparison with the published SimCLR anchors, which run the network on two views of every image.

The default set fits the first hour on a GPU (about 10 minutes on one, at most two graphs compiled): both ways of
taking negatives at [WL21]'s batch of 128, the step eager and as a CUDA graph, the ordinary loss, 3 timings each. `--full`
runs the whole grid (32 cases, 24 compiled from scratch: 30 to 60 minutes): each at batch 128 ([WL21]) and 512, with torch.compile off, of the encoder (`compile=True`) and of the whole step
(`compile="step"`: one graph, `ctl_explore.train.compile_step`, the learning rate a tensor as `pretrain` passes it), for
the ordinary contrastive loss and the hard one (`--loss`). `graph` (a default on CUDA) replays that one graph as a CUDA graph
(torch.compile's mode="reduce-overhead"; the row says when inductor skipped the CUDA graph, and stderr says why). The data are random uint8 images of CIFAR10's shape (3 x 32 x 32, 50,000 rows), made on the device:
nothing is downloaded. cudnn.benchmark is on, as `pretrain` sets it on CUDA. Each case is timed `--repeats` times
after its warm-up; the table gives the median images/s and the range over the repeats, and each case's line (images/s,
TFLOP/s and, where the GPU's peak is known, MFU) is printed as soon as it is measured.

The page is rewritten (atomically: a temporary file, then a rename) after every case, so a crash or a kill keeps the
rows already measured. A case that fails (out of memory, a compiler error) becomes a row that says why in a sentence,
and the others go on; the exit status is 1 if any failed.

One GPU: `python benchmarks/bench_gpu.py`. N GPUs: `torchrun --standalone --nproc_per_node=N benchmarks/bench_gpu.py`;
the script sees WORLD_SIZE, each process takes the GPU of its LOCAL_RANK (as `pretrain` does), the batch is the global
batch split over the processes (memory bank only: `pretrain` takes the batch's negatives in one process only), batch
norm over the global batch with `pretrain`'s GlobalBatchNorm, torch.compile off (`pretrain` refuses it under torchrun),
and process 0 writes the table. The page is `benchmarks/results/gpu.md` (one GPU) or `gpu-<N>gpus.md`, with the machine's
name (GPU model, driver, CUDA and torch versions). Without CUDA, or with `--toy`, it runs a toy size on the CPU in
seconds (the test suite does, so that the script keeps working) and writes a file only when given `--out`; but where the
machine has an NVIDIA GPU that torch cannot use (a driver too old for the wheel), it stops with the sentence that says so
instead of timing the toy.
`--device cpu --tiny` is the same toy size, named for what it is.
"""
from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

from ctl_explore.checks import value_checks
from ctl_explore.data import TwoViewAugment
from ctl_explore.gpu import device_summary
from ctl_explore.memory_bank import MemoryBank
from ctl_explore.distributed import _distributed, _init_distributed, distributed_net, cuda_problem, resolve_device, unusable_gpu
from ctl_explore.train import (PretrainConfig, TrainState, _make_momentum_buffers, _set_lr, build_model, compile_step, mark_static,
                               negatives_seen, training_step, view_draws)  # mark_static: what pretrain's compile="graph" marks too

RESULTS = Path(__file__).parent / "results"
COMPILES = ("off", "encoder", "step")  # torch.compile of nothing, of the encoder (compile=True), of the whole step (one graph)
GRAPH = "graph"  # --compile graph: the one-graph step as a CUDA graph (mode="reduce-overhead"); a default on CUDA
LOSSES = ("contrastive", "hard_contrastive")  # the ordinary loss and the hard one (top-k of each row's negatives)

# published anchors (issue 16): the numbers a GPU owner compares with
ANCHORS = (
    ("lightly, SimCLR on CIFAR10 (benchmark table)", "ResNet18, batch 128, 200 epochs in 97.7 min on one A6000, the whole run",
     50_000 * 200 / (97.7 * 60)),
    ("dkobak/simclr-cifar10", "ResNet18, batch 512, one A100", 8_400.0),
    ("goal of this project (issue 16)", "ResNet18 CIFAR-shape training on one H200", 25_000.0),
)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Images/s of pretrain's training step (ResNet18, CIFAR10-shaped data), bf16, "
                                            "with and without torch.compile, on one GPU or under torchrun on N; writes a markdown table.")
    p.add_argument("--full", action="store_true", help="the whole grid: batch 128 and 512, compile off, encoder, step and graph, "
                   "both losses, 5 repeats (32 cases, 30 to 60 minutes on one GPU); the default set (batch 128, compile off and "
                   "graph, the ordinary loss, 3 repeats: 4 cases) fits in about 10 minutes")
    p.add_argument("--toy", "--tiny", dest="toy", action="store_true",
                   help="a toy size on the CPU, in seconds (automatic when CUDA is not available)")
    p.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda if available, else cpu; under torchrun: "
                                                  "each process's cuda:LOCAL_RANK)")
    p.add_argument("--batch", type=int, nargs="+", default=None, help="global batch sizes (default 128; --full: 128 512; toy: 8 16)")
    p.add_argument("--rows", type=int, default=None, help="training images (default 50000; toy: 128)")
    p.add_argument("--steps", type=int, default=None, help="timed steps per case (default 100; toy: 2)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps first, compilation included (default 15; toy: 1)")
    p.add_argument("--repeats", type=int, default=None, help="timings of --steps steps per case, for the median and range (default 3; --full: 5; toy: 1)")
    p.add_argument("--loss", choices=LOSSES, nargs="+", default=None, help="losses to time (default: contrastive; --full: both)")
    p.add_argument("--compile", choices=COMPILES + (GRAPH,), nargs="+", default=None,
                   help="torch.compile settings to time: off, encoder, step, graph (the step as a CUDA graph) (default on CUDA: "
                        "off, graph; --full: off, encoder, step, graph; toy and torchrun: off)")
    p.add_argument("--negatives", choices=("bank", "batch"), nargs="+", default=None,
                   help="bank, batch (default: both; under torchrun: bank, the only one pretrain runs on several processes)")
    p.add_argument("--peak-tflops", type=float, default=None, help="the GPU's dense bf16 peak in TFLOP/s for the MFU column "
                   "(default: from a table of NVIDIA's data sheets by the GPU's name; none on the CPU)")
    p.add_argument("--out", type=Path, default=None, help="markdown file to write (default on CUDA: benchmarks/results/gpu.md, "
                   "or gpu-<N>gpus.md under torchrun; the toy writes none unless given)")
    args = p.parse_args(argv)
    args.world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if args.device is None and not args.toy and not torch.cuda.is_available() and unusable_gpu() is not None:
        p.error(f"no --device given, and {unusable_gpu()}; give --toy (or --device cpu) for the CPU toy size")  # not the toy, quietly
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        p.error(f"--device {args.device} asked for, but CUDA is not available: {cuda_problem()} (--toy runs the CPU toy size)")
    args.toy = args.toy or not args.device.startswith("cuda")
    defaults = dict(batch=[8, 16], rows=128, steps=2, warmup=1, compile=["off"], repeats=1, loss=["contrastive"]) if args.toy else \
               dict(batch=[128, 512], rows=50_000, steps=100, warmup=15, compile=[*COMPILES, GRAPH], repeats=5, loss=list(LOSSES)) if args.full else \
               dict(batch=[128], rows=50_000, steps=100, warmup=15, compile=["off", GRAPH], repeats=3, loss=["contrastive"])  # ~10 min
    defaults["negatives"] = ["bank"] if args.world > 1 else ["bank", "batch"]
    if args.world > 1: defaults["compile"] = ["off"]
    for name, value in defaults.items():
        if getattr(args, name) is None: setattr(args, name, value)
    for name in ("rows", "steps", "repeats"):
        if getattr(args, name) < 1: p.error(f"--{name} must be an integer >= 1, got {getattr(args, name)}")
    if args.warmup < 0: p.error(f"--warmup must be an integer >= 0, got {args.warmup}")
    if any(b < 2 for b in args.batch): p.error(f"--batch sizes must be at least 2, got {args.batch}")
    if max(args.batch) > args.rows: p.error(f"--batch {max(args.batch)} is larger than --rows {args.rows}")
    if args.world > 1:
        if "batch" in args.negatives: p.error("--negatives batch runs in one process only (as in pretrain); use bank under torchrun")
        if any(b % args.world for b in args.batch): p.error(f"--batch sizes must be divisible by the {args.world} processes, got {args.batch}")
        if args.compile != ["off"]: p.error("--compile encoder/step is not run under torchrun: pretrain refuses torch.compile with several processes")
    if args.out is None and not args.toy: args.out = RESULTS / ("gpu.md" if args.world == 1 else f"gpu-{args.world}gpus.md")
    return args


# Dense bf16 tensor-core peaks from NVIDIA's data sheets, TFLOP/s, for the MFU column; the most specific name first.
PEAK_BF16_TFLOPS = (("H100 PCIe", 756.0), ("H200", 989.4), ("H100", 989.4), ("GH200", 989.4), ("A100", 312.0), ("L40S", 362.1),
                    ("A6000", 154.8), ("L4", 121.0))


def peak_tflops(device: torch.device, given: float | None = None) -> float | None:
    "The device's dense bf16 peak in TFLOP/s: `given` (--peak-tflops), else from the table by the GPU's name; None on the CPU or an unknown GPU."
    if given is not None: return given
    if device.type != "cuda": return None
    name = torch.cuda.get_device_name(device)
    return next((v for key, v in PEAK_BF16_TFLOPS if key in name), None)


def step_flops(one) -> float:
    "Floating-point operations of one training step of this process (forward and backward; torch's FLOP counter, matrix products and convolutions)."
    from torch.utils.flop_counter import FlopCounterMode
    with FlopCounterMode(display=False) as counter: one()
    return float(counter.get_total_flops())


def time_case(images: torch.Tensor, batch: int, negatives: str, compile: str, steps: int, warmup: int, device: torch.device,
              loss: str = "contrastive", repeats: int = 1) -> dict:
    "Images/s of `repeats` timings of `steps` training steps (after `warmup` untimed ones) for one setting; a fresh model, optimiser and bank each time."
    rank, world = _distributed()
    config = PretrainConfig(dataset="cifar10", backbone="resnet18", batch_size=batch, precision="bf16", negatives=negatives,
                            loss=loss, compile={"off": False, "encoder": True, "step": "step", GRAPH: "step"}[compile])
    model = build_model(config, images.shape[1], device)
    net = distributed_net(model, device)  # as pretrain does it: GlobalBatchNorm and DDP under torchrun, the model alone otherwise
    if compile == "encoder": net = torch.compile(net)
    whole = compile in ("step", GRAPH)  # the whole step compiled, as pretrain's compile="step" does it
    step = compile_step(training_step, **({"mode": "reduce-overhead"} if compile == GRAPH else {})) if whole else training_step
    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay)
    _set_lr(optimizer, config.lr, as_tensor=whole)  # as pretrain passes it: a tensor for the compiled step
    if whole: _make_momentum_buffers(optimizer)  # as pretrain does: the first step compiles the graph the others run
    augment = TwoViewAugment("cifar10", size=images.shape[-1])
    bank = MemoryBank(len(images), config.out_dim, config.bank_momentum, generator=torch.Generator().manual_seed(1)).to(device) \
        if negatives == "bank" else None
    params = config.loss_params(negatives_seen(config, len(images)))
    generator = torch.Generator(device=device).manual_seed(0)
    order = torch.randperm(len(images), generator=generator, device=device)
    per_pass, local, views = len(images) // batch, batch // world, 1 if negatives == "bank" else 2
    part = slice(rank * local, (rank + 1) * local)
    state = TrainState(config, model, optimizer, bank, generator, params, net=net)  # what pretrain's steps are given
    if compile == GRAPH: mark_static(optimizer, bank)

    def one(k: int) -> None:
        idx = order[(k % per_pass) * batch:(k % per_pass + 1) * batch]
        x = images[idx]
        aug, draws = view_draws(augment, x, generator, views)
        training_step_used(state, x, idx, aug, draws, part)

    training_step_used = step if whole else training_step  # looked up now: a test may wrap the module's name

    def sync() -> None:
        if device.type == "cuda": torch.cuda.synchronize(device)
        if world > 1: dist.barrier()

    if device.type == "cuda": torch.cuda.reset_peak_memory_stats(device)
    with value_checks(False):  # counted on the eager step (the same arithmetic as the compiled ones), before any timing
        eager, training_step_used = training_step_used, training_step
        flops = step_flops(lambda: one(0))
        training_step_used = eager
    rates, skips_before = [], cudagraph_skips()
    try:
        with value_checks(False):  # as in pretrain: the indices are a permutation's, checked by construction
            sync()
            start = time.perf_counter()
            for k in range(warmup): one(k)
            sync()
            warm_s = time.perf_counter() - start
            for r in range(repeats):
                start = time.perf_counter()
                for k in range(warmup + r * steps, warmup + (r + 1) * steps): one(k)
                sync()
                rates.append(steps * batch / (time.perf_counter() - start))
    finally:
        if compile != "off": torch._dynamo.reset()  # the next case compiles its own model from scratch
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else float("nan")
    median = statistics.median(rates)
    shown = compile if compile != GRAPH else f"{GRAPH} (CUDA graph skipped: see stderr)" if cudagraph_skips() > skips_before else GRAPH
    return dict(negatives=negatives, batch=batch, compile=shown, gpus=world, loss=loss, images_per_s=median,
                images_per_s_min=min(rates), images_per_s_max=max(rates), repeats=repeats, ms_per_step=1e3 * batch / median,
                warmup_s=warm_s, peak_gib=peak, flops_per_step=flops, tflops=flops * median / batch / 1e12, error=None)


def cudagraph_skips() -> int:
    "How often inductor has declined to run a graph as a CUDA graph in this process (it logs the reason as a warning)."
    from torch._dynamo.utils import counters
    return counters["inductor"]["cudagraph_skips"]


def case_line(r: dict, peak: float | None) -> str:
    "The printed line of a measured case: its setting, images/s (median and range), ms per step, TFLOP/s and, given the GPU's peak, MFU."
    mfu = f"  MFU {r['tflops'] / peak:.1%}" if peak else "  MFU unknown (give --peak-tflops)"
    return (f"  negatives {r['negatives']:<5} batch {r['batch']:>4} GPUs {r['gpus']} compile {r['compile']:<7} loss {r['loss']:<16} "
            f"{r['images_per_s']:>9,.0f} images/s (range {r['images_per_s_min']:,.0f}–{r['images_per_s_max']:,.0f})  "
            f"{r['ms_per_step']:7.1f} ms/step  {r['tflops']:.3g} TFLOP/s{mfu}")


def failed_row(e: BaseException, batch: int, negatives: str, compile: str, loss: str, world: int) -> dict:
    "The row of a case that failed: its setting and the error in one sentence."
    first = (str(e).strip().splitlines() or [""])[0][:300]
    return dict(negatives=negatives, batch=batch, compile=compile, gpus=world, loss=loss, error=f"{type(e).__name__}: {first}".rstrip(": "))


def versions(device: torch.device) -> dict:
    "torch, the CUDA it was built with, and cuDNN (on CUDA): what a reader needs to compare numbers across machines."
    out = {"torch": torch.__version__, "CUDA (torch built with)": torch.version.cuda or "none (CPU build)"}
    if device.type == "cuda": out["cuDNN"] = torch.backends.cudnn.version()
    return out


def markdown(rows: list[dict], machine: dict, args: argparse.Namespace, command: str, planned: int | None = None) -> str:
    "The results as a markdown page: the machine, the table, the anchors and how to read them."
    size = "toy size on the CPU: the numbers only show that the script works" if args.toy else "the full size"
    processes = f"{args.world} processes under torchrun, one per GPU" if args.world > 1 else "one process"
    done = "" if planned is None or len(rows) >= planned else f" In progress: {len(rows)} of {planned} cases written so far."
    lines = [
        "# GPU benchmark: pretrain's training step, ResNet18 on CIFAR10-shaped data", "",
        f"Written by `benchmarks/bench_gpu.py` on {datetime.date.today().isoformat()} ({size}; {processes}). Command: `{command}`.{done}", "",
        "Machine: " + ", ".join(f"{k} {v}" for k, v in machine.items()) + (f" (× {args.world})" if args.world > 1 else "") + ".", "",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in args.versions.items()) + ".", "",
        f"Data: {args.rows:,} random uint8 images of {args.image_shape}, on the device. The step: `ctl_explore.train.training_step`, "
        f"bf16 autocast for the encoder, the augmentation and the loss in float32, the value checks off (as in pretrain). "
        f"Timed: {args.repeats} × {args.steps} steps after {args.warmup} untimed ones (compilation happens there); images/s is "
        f"the median over the {args.repeats} timings, with their range. cudnn.benchmark: on "
        f"(as pretrain sets it on CUDA). The batch is the global batch; images/s count all processes together.", "",
        "| negatives | batch | GPUs | torch.compile | loss | images/s (median) | range over repeats | ms per step | warm-up s | peak GPU memory GiB (per GPU) | TFLOP/s per GPU | MFU |",
        "|---|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if r.get("error"):
            lines.append(f"| {r['negatives']} | {r['batch']} | {r['gpus']} | {r['compile']} | {r['loss']} | failed: {r['error'].replace('|', '/')} | | | | | | |")
            continue
        peak = "" if r["peak_gib"] != r["peak_gib"] else f"{r['peak_gib']:.1f}"
        tflops = r.get("tflops")
        peak_tf = getattr(args, "peak_tflops", None)
        mfu = f"{tflops / peak_tf:.1%}" if tflops is not None and peak_tf else ""
        lines.append(f"| {r['negatives']} | {r['batch']} | {r['gpus']} | {r['compile']} | {r['loss']} | {r['images_per_s']:,.0f} | "
                     f"{r['images_per_s_min']:,.0f}–{r['images_per_s_max']:,.0f} | {r['ms_per_step']:.1f} | {r['warmup_s']:.1f} | {peak} | "
                     f"{'' if tflops is None else format(tflops, '.3g')} | {mfu} |")
    lines += ["", "## Published anchors", "", "| source | setting | images/s |", "|---|---|---:|"]
    lines += [f"| {source} | {setting} | {ips:,.0f} |" for source, setting, ips in ANCHORS]
    lines += ["",
              "How to compare: the SimCLR anchors run the network on two views of every image, as the `batch` rows do; the "
              "`bank` rows follow [WL21] (one view per image against the memory bank), so per image they do about half the "
              "network's work. lightly's figure is a whole run's wall time (with its evaluations and data loading), "
              "50,000 × 200 images / 97.7 min; dkobak's is a training throughput. Several GPUs: "
              "`torchrun --standalone --nproc_per_node=N benchmarks/bench_gpu.py` writes its own page beside this one. "
              + ("The `graph` rows replay the one-graph step as a CUDA graph (torch.compile's mode=\"reduce-overhead\"). "
                 if GRAPH in getattr(args, "compile", ()) else
                 "CUDA graphs are not used in these cases: `--compile graph` adds the one-graph step replayed as a CUDA graph "
                 "(torch.compile's mode=\"reduce-overhead\"). ") +
              "TFLOP/s: the FLOPs of one eager step of one process (torch's FLOP counter: matrix products "
              "and convolutions, forward and backward) times its steps per second; MFU: that over the GPU's dense bf16 peak ("
              + (f"{args.peak_tflops:g} TFLOP/s" if getattr(args, "peak_tflops", None) else "unknown here: give --peak-tflops") + ").", ""]
    return "\n".join(lines)


def write_atomic(path: Path, text: str) -> None:
    "Write `text` to `path` through a temporary file of this writer's own and a rename: a reader finds the old page or the new one."
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f: f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def main(argv=None) -> list[dict]:
    args = parse_args(argv)
    device = resolve_device(args.device) if args.device.startswith("cuda") else torch.device(args.device)
    started = _init_distributed(device)  # under torchrun: this process's GPU made current, then the group joined
    try:
        rank, _ = _distributed()
        if device.type == "cuda":
            torch.cuda.set_device(device)
            torch.backends.cudnn.benchmark = True
        side = 16 if args.toy else 32
        args.image_shape = f"3 × {side} × {side}"
        images = torch.randint(0, 256, (args.rows, 3, side, side), dtype=torch.uint8,
                               generator=torch.Generator().manual_seed(0)).to(device)
        machine, args.versions = device_summary(device), versions(device)
        args.peak_tflops = peak_tflops(device, args.peak_tflops)
        say = print if rank == 0 else (lambda *a, **k: None)
        say("machine: " + ", ".join(f"{k} {v}" for k, v in machine.items()) + (f", {args.world} processes" if args.world > 1 else ""))
        given = sys.argv[1:] if argv is None else argv
        launcher = f"torchrun --standalone --nproc_per_node={args.world} " if args.world > 1 else "python "
        command = launcher + "benchmarks/bench_gpu.py" + ("" if not given else " " + " ".join(given))
        cases = [(n, b, c, l) for n in args.negatives for b in args.batch for c in args.compile for l in args.loss]
        rows = []
        for negatives, batch, compile, loss in cases:
            try:
                r = time_case(images, batch, negatives, compile, args.steps, args.warmup, device, loss, args.repeats)
                say(case_line(r, args.peak_tflops), flush=True)  # as it goes: a long grid shows its numbers case by case
            except Exception as e:  # this case's failure is its row; the others go on (under torchrun: the rows so far are kept)
                r = failed_row(e, batch, negatives, compile, loss, args.world)
                say(f"  negatives {negatives:<5} batch {batch:>4} GPUs {args.world} compile {compile:<7} loss {loss:<16} failed: {r['error']}", flush=True)
                if device.type == "cuda": torch.cuda.empty_cache()
                if args.world > 1:
                    rows.append(r)
                    if args.out is not None and rank == 0: write_atomic(args.out, markdown(rows, machine, args, command, len(cases)))
                    raise
            rows.append(r)
            if args.out is not None and rank == 0: write_atomic(args.out, markdown(rows, machine, args, command, len(cases)))
        if args.out is not None and rank == 0: say(f"wrote {args.out}")
        return rows
    finally:
        if started: dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(1 if any(r.get("error") for r in main()) else 0)
