"""Issue 12's busy-machine question: how fast does a digits pretraining run with 1 and with 2 torch threads, on a quiet
machine and with one other process spinning on a core? Each measurement is a fresh process running `pretrain` (digits
defaults, `--epochs` epochs, measured once at the end) with the thread count set by `pretrain(threads=...)`; 2 threads
are also tried with OMP_WAIT_POLICY=PASSIVE (OpenMP's threads sleep instead of spinning while they wait). The load is
`python -c "while True: pass"`, started before the measured process and killed after it. Rounds are interleaved so that
slow drifts of a shared machine touch every setting alike. Reports training images/s (the median epoch) and the wall
time of `pretrain`, with ratios, and writes benchmarks/results/threads.md.
Run: `python benchmarks/bench_threads.py [--epochs 5] [--rounds 2] [--no-save]`."""
from __future__ import annotations

import argparse, datetime, json, os, platform, statistics, subprocess, sys, time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"

# the worker writes its run into a folder it names on stdout, so the parent can read the epochs' images/s
WORKER = """
import json, statistics, sys, tempfile, time
from pathlib import Path
from ctl_explore.train import PretrainConfig, load_checkpoint, pretrain
epochs, threads = int(sys.argv[1]), int(sys.argv[2])
run = Path(tempfile.mkdtemp()) / "run"
start = time.perf_counter()
pretrain(PretrainConfig(epochs=epochs, eval_every=epochs, device="cpu"), run, quiet=True, threads=threads)
wall = time.perf_counter() - start
history = load_checkpoint(run / "checkpoint.pt")["history"]
print(json.dumps(dict(wall_s=wall, images_per_s=statistics.median(r["images_per_s"] for r in history))))
"""

SETTINGS = (("1 thread", 1, {}), ("2 threads", 2, {}), ("2 threads, OMP_WAIT_POLICY=PASSIVE", 2, {"OMP_WAIT_POLICY": "PASSIVE"}))


def measure(epochs: int, threads: int, env: dict, loaded: bool) -> dict:
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if loaded else None
    try:
        out = subprocess.run([sys.executable, "-c", WORKER, str(epochs), str(threads)], capture_output=True, text=True,
                             env={**os.environ, **env})
        if out.returncode: raise SystemExit(f"the measured run failed:\n{out.stderr[-3000:]}")
    finally:
        if spinner is not None: spinner.kill(); spinner.wait()
    return json.loads(out.stdout.splitlines()[-1])


def lscpu() -> str:
    try: return "\n".join(subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()[:15])
    except OSError: return platform.processor()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()
    load_before = os.getloadavg()
    rows = {(name, loaded): [] for name, _, _ in SETTINGS for loaded in (False, True)}
    for r in range(args.rounds):
        for loaded in (False, True):
            for name, threads, env in SETTINGS:
                m = measure(args.epochs, threads, env, loaded)
                rows[(name, loaded)].append(m)
                print(f"round {r + 1}: {name:<36} {'loaded' if loaded else 'quiet ':<6}  {m['images_per_s']:7.0f} img/s  "
                      f"{m['wall_s']:6.1f} s", flush=True)
    load_after = os.getloadavg()
    med = {k: dict(images_per_s=statistics.median(m["images_per_s"] for m in v), wall_s=statistics.median(m["wall_s"] for m in v))
           for k, v in rows.items()}

    import torch
    lines = [
        "# Threads on a busy machine (issue 12) — `python benchmarks/bench_threads.py`", "",
        f"A digits pretraining with the defaults (small ConvNet, width 16, batch 128, memory bank), {args.epochs} epochs, "
        f"measured once at the end (`eval_every={args.epochs}`), on the CPU; each measurement a fresh process; "
        f"{args.rounds} interleaved rounds, medians shown (all rounds below). *Loaded*: one other process spinning on a core "
        "(`python -c \"while True: pass\"`) for the whole measurement. Images/s: the median epoch's training throughput; "
        "wall: the whole `pretrain` call (data, training, measuring, checkpoints).", "",
        f"torch {torch.__version__}, Python {platform.python_version()}, {datetime.datetime.now().isoformat(timespec='minutes')}. "
        f"Load average before: {' '.join(f'{x:.1f}' for x in load_before)}; after: {' '.join(f'{x:.1f}' for x in load_after)}. "
        ("**Other work was running on the machine** (a load average above 1 before the measurement), so even the *quiet* "
         "rows ran beside other processes; read the ratios as rough." if load_before[0] > 1 else
         "Nothing else was running before the measurement (load average below 1); the machine may still be shared with "
         "other virtual machines, so repeat it before trusting small differences."), "",
        "```", lscpu(), "```", "",
        "| setting | quiet: img/s | quiet: wall (s) | loaded: img/s | loaded: wall (s) | loaded / quiet (img/s) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, _, _ in SETTINGS:
        q, l = med[(name, False)], med[(name, True)]
        lines.append(f"| {name} | {q['images_per_s']:,.0f} | {q['wall_s']:.1f} | {l['images_per_s']:,.0f} | {l['wall_s']:.1f} | "
                     f"{l['images_per_s'] / q['images_per_s']:.2f} |")
    one_q, one_l = med[("1 thread", False)], med[("1 thread", True)]
    two_q, two_l = med[("2 threads", False)], med[("2 threads", True)]
    lines += ["", "Ratios (images/s, medians):", "",
              f"* quiet: 2 threads / 1 thread = {two_q['images_per_s'] / one_q['images_per_s']:.2f}",
              f"* loaded: 2 threads / 1 thread = {two_l['images_per_s'] / one_l['images_per_s']:.2f}",
              f"* 1 thread, loaded / quiet = {one_l['images_per_s'] / one_q['images_per_s']:.2f}; "
              f"2 threads, loaded / quiet = {two_l['images_per_s'] / two_q['images_per_s']:.2f}", "",
              "All rounds (images/s, wall s):", ""]
    for (name, loaded), v in rows.items():
        lines.append(f"* {name}, {'loaded' if loaded else 'quiet'}: " + "; ".join(f"{m['images_per_s']:,.0f}, {m['wall_s']:.1f}" for m in v))
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_save:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "threads.md").write_text(text)
