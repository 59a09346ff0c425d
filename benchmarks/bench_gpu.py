"""Images per second of one pretraining step on a GPU, beside the published anchors (issue 15, part 2; issue 16).

One step is what `pretrain` does for a batch, built from the library's own pieces: the batched augmentation on the
device (`TwoViewAugment`), the encoder's forward pass under bf16 autocast (`build_model`: ResNet18 with the 3x3 stem,
channels-last), the loss in float32, the backward pass, the SGD update, and with the memory bank its moving-average
update. Two ways to take negatives are timed:

* `bank`, [WL21]'s protocol: one augmented view per image against a 50,000-row memory bank (`MemoryBank.loss`);
* `batch`, SimCLR's: two views per image, each against the other views of the batch (`batch_loss`). This is the
  like-for-like comparison with the published SimCLR anchors, which run the network on two views of every image.

Each at batch 128 ([WL21]) and 512, with and without `torch.compile` of the encoder. The data are random uint8
images of CIFAR10's shape (3 x 32 x 32, 50,000 rows), made on the device: nothing is downloaded.

Run it on a CUDA machine with `python benchmarks/bench_gpu.py`; it writes `benchmarks/results/gpu.md` with the
machine's name (GPU model, driver, CUDA and torch versions). Without CUDA, or with `--toy`, it runs a toy size on the
CPU in seconds (the test suite does, so that the script keeps working) and writes a file only when given `--out`.
"""
from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

import torch

from ctl_explore.data import TwoViewAugment
from ctl_explore.gpu import device_summary
from ctl_explore.memory_bank import MemoryBank, batch_loss
from ctl_explore.train import PretrainConfig, build_model

RESULTS = Path(__file__).parent / "results"

# published anchors (issue 16): the numbers a GPU owner compares with
ANCHORS = (
    ("lightly, SimCLR on CIFAR10 (benchmark table)", "ResNet18, batch 128, 200 epochs in 97.7 min on one A6000, the whole run",
     50_000 * 200 / (97.7 * 60)),
    ("dkobak/simclr-cifar10", "ResNet18, batch 512, one A100", 8_400.0),
    ("goal of this project (issue 16)", "ResNet18 CIFAR-shape training on one H200", 25_000.0),
)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Images/s of the pretraining step (ResNet18, CIFAR10-shaped data), bf16, "
                                            "with and without torch.compile; writes a markdown table.")
    p.add_argument("--toy", action="store_true", help="a toy size on the CPU, in seconds (automatic when CUDA is not available)")
    p.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda if available, else cpu)")
    p.add_argument("--batch", type=int, nargs="+", default=None, help="batch sizes (default 128 512; toy: 8 16)")
    p.add_argument("--rows", type=int, default=None, help="training images (default 50000; toy: 128)")
    p.add_argument("--steps", type=int, default=None, help="timed steps per case (default 100; toy: 2)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps first, compilation included (default 15; toy: 1)")
    p.add_argument("--compile", choices=("both", "on", "off"), default=None,
                   help="torch.compile the encoder: both (default on CUDA), on, off (default for the toy)")
    p.add_argument("--negatives", choices=("bank", "batch"), nargs="+", default=["bank", "batch"])
    p.add_argument("--cudnn-benchmark", action="store_true", help="set torch.backends.cudnn.benchmark (pretrain leaves it unset)")
    p.add_argument("--out", type=Path, default=None,
                   help="markdown file to write (default on CUDA: benchmarks/results/gpu.md; the toy writes none unless given)")
    args = p.parse_args(argv)
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        p.error(f"--device {args.device} asked for, but CUDA is not available (leave --device out for the CPU toy size)")
    args.toy = args.toy or not args.device.startswith("cuda")
    defaults = dict(batch=[8, 16], rows=128, steps=2, warmup=1, compile="off") if args.toy else \
               dict(batch=[128, 512], rows=50_000, steps=100, warmup=15, compile="both")
    for name, value in defaults.items():
        if getattr(args, name) is None: setattr(args, name, value)
    for name in ("rows", "steps"):
        if getattr(args, name) < 1: p.error(f"--{name} must be an integer >= 1, got {getattr(args, name)}")
    if args.warmup < 0: p.error(f"--warmup must be an integer >= 0, got {args.warmup}")
    if any(b < 2 for b in args.batch): p.error(f"--batch sizes must be at least 2, got {args.batch}")
    if max(args.batch) > args.rows: p.error(f"--batch {max(args.batch)} is larger than --rows {args.rows}")
    if args.out is None and not args.toy: args.out = RESULTS / "gpu.md"
    return args


def time_case(images: torch.Tensor, batch: int, negatives: str, compiled: bool, steps: int, warmup: int, device: torch.device) -> dict:
    "Images/s of `steps` training steps (after `warmup` untimed ones) for one setting; a fresh model, optimiser and bank each time."
    config = PretrainConfig(dataset="cifar10", backbone="resnet18", batch_size=batch, precision="bf16", negatives=negatives,
                            device=str(device), compile=compiled)
    torch.manual_seed(0)
    model = build_model(config, images.shape[1], device)
    net = torch.compile(model) if compiled else model
    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay)
    augment = TwoViewAugment("cifar10", size=images.shape[-1])
    bank = MemoryBank(len(images), config.out_dim, config.bank_momentum, generator=torch.Generator().manual_seed(1)).to(device)
    generator = torch.Generator(device=device).manual_seed(0)
    order = torch.randperm(len(images), generator=generator, device=device)
    per_pass = len(images) // batch
    autocast = dict(device_type=device.type, dtype=torch.bfloat16)

    def step(k: int) -> None:
        idx = order[(k % per_pass) * batch:(k % per_pass + 1) * batch]
        x = images[idx]
        if negatives == "bank":
            with torch.autocast(**autocast): z = net(augment.view(x, generator)).float()
            loss = bank.loss(z, idx, "contrastive", tau=config.tau)
        else:
            v1, v2 = augment(x, generator)
            with torch.autocast(**autocast): z = net(torch.cat([v1, v2])).float()
            loss = batch_loss(z[:batch], z[batch:], "contrastive", tau=config.tau)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if negatives == "bank": bank.update(idx, z.detach())

    def sync() -> None:
        if device.type == "cuda": torch.cuda.synchronize(device)

    if device.type == "cuda": torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    for k in range(warmup): step(k)
    sync()
    warm_s = time.perf_counter() - start
    start = time.perf_counter()
    for k in range(warmup, warmup + steps): step(k)
    sync()
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else float("nan")
    if compiled: torch._dynamo.reset()  # the next case compiles its own model from scratch
    return dict(negatives=negatives, batch=batch, compile=compiled, images_per_s=steps * batch / seconds,
                ms_per_step=1e3 * seconds / steps, warmup_s=warm_s, peak_gib=peak)


def markdown(rows: list[dict], machine: dict, args: argparse.Namespace, command: str) -> str:
    "The results as a markdown page: the machine, the table, the anchors and how to read them."
    size = "toy size on the CPU: the numbers only show that the script works" if args.toy else "the full size"
    lines = [
        "# GPU benchmark: one pretraining step, ResNet18 on CIFAR10-shaped data", "",
        f"Written by `benchmarks/bench_gpu.py` on {datetime.date.today().isoformat()} ({size}). Command: `{command}`.", "",
        "Machine: " + ", ".join(f"{k} {v}" for k, v in machine.items()) + ".", "",
        f"Data: {args.rows:,} random uint8 images of {args.image_shape}, on the device. Precision: bf16 autocast for the encoder, "
        f"the loss in float32. Timed: {args.steps} steps after {args.warmup} untimed ones (compilation happens there). "
        f"cudnn.benchmark: {'on' if args.cudnn_benchmark else 'off (as pretrain leaves it)'}.", "",
        "| negatives | batch | torch.compile | images/s | ms per step | warm-up s | peak GPU memory GiB |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        peak = "" if r["peak_gib"] != r["peak_gib"] else f"{r['peak_gib']:.1f}"
        lines.append(f"| {r['negatives']} | {r['batch']} | {'on' if r['compile'] else 'off'} | {r['images_per_s']:,.0f} | "
                     f"{r['ms_per_step']:.1f} | {r['warmup_s']:.1f} | {peak} |")
    lines += ["", "## Published anchors", "", "| source | setting | images/s |", "|---|---|---:|"]
    lines += [f"| {source} | {setting} | {ips:,.0f} |" for source, setting, ips in ANCHORS]
    lines += ["",
              "How to compare: the SimCLR anchors run the network on two views of every image, as the `batch` rows do; the "
              "`bank` rows follow [WL21] (one view per image against the memory bank), so per image they do about half the "
              "network's work. lightly's figure is a whole run's wall time (with its evaluations and data loading), "
              "50,000 × 200 images / 97.7 min; dkobak's is a training throughput. One GPU only: several GPUs under "
              "`torchrun` are not measured here (issue 16).", ""]
    return "\n".join(lines)


def main(argv=None) -> list[dict]:
    args = parse_args(argv)
    device = torch.device(args.device)
    if args.cudnn_benchmark: torch.backends.cudnn.benchmark = True
    side = 16 if args.toy else 32
    args.image_shape = f"3 × {side} × {side}"
    images = torch.randint(0, 256, (args.rows, 3, side, side), dtype=torch.uint8,
                           generator=torch.Generator().manual_seed(0)).to(device)
    compiles = {"both": (False, True), "on": (True,), "off": (False,)}[args.compile]
    machine = device_summary(device)
    print("machine: " + ", ".join(f"{k} {v}" for k, v in machine.items()))
    rows = []
    for negatives in args.negatives:
        for batch in args.batch:
            for compiled in compiles:
                r = time_case(images, batch, negatives, compiled, args.steps, args.warmup, device)
                print(f"  negatives {negatives:<5} batch {batch:>4} compile {'on ' if compiled else 'off'}  "
                      f"{r['images_per_s']:>9,.0f} images/s  {r['ms_per_step']:7.1f} ms/step", flush=True)
                rows.append(r)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        command = "python benchmarks/bench_gpu.py" + ("" if argv is None and len(sys.argv) == 1 else
                                                      " " + " ".join(sys.argv[1:] if argv is None else argv))
        args.out.write_text(markdown(rows, machine, args, command))
        print(f"wrote {args.out}")
    return rows


if __name__ == "__main__":
    main()
