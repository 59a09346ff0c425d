"""Two-view augmentation: ctl_explore.data's batched tensors vs torchvision's per-image `transforms.v2` (issue 4; goal >= 10x on CPU).

Both pipelines make two views of the same N random uint8 CIFAR-shaped images [N, 3, 32, 32], in the same process:

* torchvision, per image: RandomResizedCrop(32) (scale 0.08-1, antialias), RandomHorizontalFlip(),
  RandomApply([ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8), RandomGrayscale(0.2), applied twice to every image
  in a Python loop, on uint8 tensors (its output stays uint8: it does less work than ours);
* ours: `TwoViewAugment` with the same operations and parameters on the whole batch, producing normalised float32.

Rounds are interleaved (torchvision, ours, torchvision, ...) so that load from other processes hits both alike; the
speed-up is the median of the per-round ratios. This is repeated with 1 torch thread and with the default number of
threads. Then, to check that training stays bound by the model: our presets' images/second and, next to them, one
training step (augmenting both views, forward + backward of both) of the course's encoder for that data (batch 32 on
a CPU, where a ResNet step on [WL21]'s batch of 128 takes many seconds; 128 on a GPU).

Run: `python benchmarks/bench_augment.py [--n 2048] [--rounds 5] [--device cpu|cuda] [--no-save]`;
writes benchmarks/results/augment.md (CPU) or augment_<device>.md.
"""
from __future__ import annotations

import argparse, datetime, os, platform, statistics, time
from pathlib import Path

import torch
import torchvision.transforms.v2 as T

from ctl_explore.data import AugmentParams, TwoViewAugment, augment_params
from ctl_explore.models import build_encoder

RESULTS = Path(__file__).parent / "results"


def machine(device: torch.device) -> dict:
    fields = {}
    for line in open("/proc/cpuinfo"):
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    cpu = fields.get("model name", platform.processor())
    if "cpu family" in fields: cpu += f" (family {fields['cpu family']}, model {fields.get('model', '?')})"
    info = dict(cpu=cpu, cores=os.cpu_count(), torch=torch.__version__, python=platform.python_version(),
                date=datetime.datetime.now().isoformat(timespec="minutes"), load=" ".join(f"{x:.1f}" for x in os.getloadavg()))
    if device.type == "cuda": info["gpu"] = torch.cuda.get_device_name(device)
    return info


def sync(device: torch.device) -> None:
    if device.type == "cuda": torch.cuda.synchronize(device)


def torchvision_pipeline() -> T.Compose:
    return T.Compose([T.RandomResizedCrop(32, antialias=True), T.RandomHorizontalFlip(),
                      T.RandomApply([T.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8), T.RandomGrayscale(0.2)])


# the same recipe as torchvision_pipeline, batched (RandomResizedCrop's default scale is 0.08-1)
MATCHED = AugmentParams(crop_scale=(0.08, 1.0), jitter_p=0.8, hue=0.1, grayscale_p=0.2, flip_p=0.5)


def seconds(fn, device) -> float:
    sync(device); start = time.perf_counter(); fn(); sync(device)
    return time.perf_counter() - start


def compare(n: int, rounds: int, threads: int) -> dict:
    "Interleaved rounds on the CPU with `threads` torch threads: images/second of each pipeline (two views per image)."
    torch.set_num_threads(threads)
    cpu = torch.device("cpu")
    images = torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    tv, ours = torchvision_pipeline(), TwoViewAugment(MATCHED)
    g = torch.Generator().manual_seed(1)

    def run_tv():
        for im in images: tv(im), tv(im)

    run_tv_warm = lambda: [tv(im) for im in images[:64]]
    run_tv_warm(); ours(images[:256], g)
    tv_rate, our_rate, ratios = [], [], []
    for _ in range(rounds):
        a = seconds(run_tv, cpu)
        b = seconds(lambda: ours(images, g), cpu)
        tv_rate.append(n / a); our_rate.append(n / b); ratios.append(a / b)
    return dict(threads=threads, torchvision=statistics.median(tv_rate), ours=statistics.median(our_rate),
                ratio=statistics.median(ratios), ratio_min=min(ratios), ratio_max=max(ratios))


def presets(n: int, rounds: int, device: torch.device, step_batch: int) -> list[dict]:
    "Images/second (two views each) of our presets on `device`, and one training step of the matching encoder."
    cases = [("digits", 1, 16, "convnet"), ("cifar10", 3, 32, "resnet18"), ("imagenet100", 3, 64, "resnet50")]
    g = torch.Generator(device=device).manual_seed(0)
    rows = []
    for name, c, size, backbone in cases:
        images = torch.randint(0, 256, (n, c, size, size), dtype=torch.uint8, device=device)
        aug = TwoViewAugment(augment_params(name))
        aug(images[:128], g)
        rate = statistics.median(n / seconds(lambda: aug(images, g), device) for _ in range(rounds))
        batch = images[:step_batch]
        encoder = build_encoder(backbone, in_channels=c).to(device)
        opt = torch.optim.SGD(encoder.parameters(), lr=0.03, momentum=0.9)

        def step():
            v1, v2 = aug(batch, g)
            loss = -(encoder(v1) * encoder(v2)).sum(1).mean()  # any loss: only the cost of the step matters here
            opt.zero_grad(); loss.backward(); opt.step()

        step()
        step_s = statistics.median(seconds(step, device) for _ in range(2 if device.type == "cpu" else 5))
        aug_s = statistics.median(seconds(lambda: aug(batch, g), device) for _ in range(5))
        rows.append(dict(preset=name, shape=f"{c}x{size}x{size}", images_per_s=rate, backbone=backbone,
                         step_ms=step_s * 1e3, augment_ms=aug_s * 1e3, share=aug_s / step_s))
    return rows


def report(info: dict, comparisons: list[dict], preset_rows: list[dict], n: int, rounds: int, device: torch.device,
           step_batch: int, preset_threads: int) -> str:
    lines = [f"# Two-view augmentation benchmark ({device.type})", "",
             f"Machine: {info['cpu']}, {info['cores']} cores" + (f", GPU {info['gpu']}" if "gpu" in info else "") +
             f"; torch {info['torch']}, Python {info['python']}; {info['date']}; load average at the end: {info['load']}.",
             "", "The load average shows what else ran on the machine. When it exceeds the number of cores, several torch "
             "threads mostly wait for each other (torchvision's many small per-image calls suffer most), so the 1-thread "
             "row is the steadier comparison.", ""]
    if comparisons:
        lines += [f"## Batched vs torchvision per image (CPU, N = {n} images, {rounds} interleaved rounds)", "",
                  "Images per second, each image giving two views. torchvision: `transforms.v2` RandomResizedCrop(32), "
                  "RandomHorizontalFlip, RandomApply([ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8), RandomGrayscale(0.2) on one "
                  "uint8 image at a time (uint8 out); ours: `TwoViewAugment` with the same recipe on the batch (normalised "
                  "float32 out). Speed-up: median of the per-round ratios (min-max in brackets). Goal: >= 10x.", "",
                  "| torch threads | torchvision (img/s) | ours (img/s) | speed-up |", "|---:|---:|---:|---:|"]
        for r in comparisons:
            lines.append(f"| {r['threads']} | {r['torchvision']:,.0f} | {r['ours']:,.0f} | "
                         f"**{r['ratio']:.1f}x** ({r['ratio_min']:.1f}-{r['ratio_max']:.1f}) |")
        lines.append("")
    lines += [f"## Presets on {device.type}, and one training step next to them", "",
              f"{preset_threads} torch thread(s). Images per second (two views each, N = {n}, median of {rounds}); then, for a batch of {step_batch} images, the time of one training "
              "step of the course's encoder for that data (augmenting both views, forward and backward of both, SGD step) "
              "and the share of it spent augmenting.", "",
              "| preset | images | ours (img/s) | encoder | training step (ms) | augmentation (ms) | share |",
              "|---|---|---:|---|---:|---:|---:|"]
    for r in preset_rows:
        lines.append(f"| {r['preset']} | {r['shape']} | {r['images_per_s']:,.0f} | {r['backbone']} | {r['step_ms']:,.1f} | "
                     f"{r['augment_ms']:.1f} | {r['share']:.1%} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2048, help="images per round (default 2048)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--device", default="cpu", help="device for the presets' rows (the comparison always runs on the CPU)")
    parser.add_argument("--step-batch", type=int, default=None, help="batch of the training step (default 32 on CPU, 128 on GPU)")
    parser.add_argument("--preset-threads", type=int, default=1,
                        help="torch threads for the presets' rows (default 1: on a busy CPU more threads make timings erratic; 0 = torch's default)")
    parser.add_argument("--skip-compare", action="store_true", help="only the presets' rows")
    parser.add_argument("--no-save", action="store_true", help="print only; do not write benchmarks/results/")
    args = parser.parse_args()
    device = torch.device(args.device)
    default_threads = torch.get_num_threads()
    comparisons = [] if args.skip_compare else [compare(args.n, args.rounds, t) for t in sorted({1, default_threads})]
    torch.set_num_threads(args.preset_threads or default_threads)
    step_batch = args.step_batch or (32 if device.type == "cpu" else 128)
    rows = presets(args.n, args.rounds, device, step_batch)
    text = report(machine(device), comparisons, rows, args.n, args.rounds, device, step_batch, torch.get_num_threads())
    print(text)
    if not args.no_save:
        RESULTS.mkdir(exist_ok=True)
        path = RESULTS / ("augment.md" if device.type == "cpu" else f"augment_{device.type}.md")
        path.write_text(text)
        print(f"written to {path}")


if __name__ == "__main__":
    main()
