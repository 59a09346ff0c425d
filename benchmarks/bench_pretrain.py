"""Issue 5's speed goal: a digits pretraining with the default small ConvNet for 50 epochs, then linear evaluation,
in <= 60 s on 2 CPU cores. Reports wall and CPU time of each stage and the accuracies reached.
Run: `python benchmarks/bench_pretrain.py [--epochs 50] [--threads 2]`."""
from __future__ import annotations

import argparse, json, tempfile, time
from pathlib import Path

import torch

from ctl_explore.linear_eval import linear_eval
from ctl_explore.train import PretrainConfig, pretrain

from bench_losses import machine

RESULTS = Path(__file__).parent / "results"

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    run = Path(tempfile.mkdtemp()) / "digits"
    t0, c0 = time.perf_counter(), time.process_time()
    last = pretrain(PretrainConfig(epochs=args.epochs), run, quiet=True)
    t1, c1 = time.perf_counter(), time.process_time()
    probe = linear_eval(run)
    t2, c2 = time.perf_counter(), time.process_time()
    result = dict(machine=machine(), epochs=args.epochs, threads=args.threads,
                  pretrain_wall_s=round(t1 - t0, 1), pretrain_cpu_s=round(c1 - c0, 1),
                  linear_eval_wall_s=round(t2 - t1, 1), linear_eval_cpu_s=round(c2 - c1, 1),
                  total_wall_s=round(t2 - t0, 1), goal_s=60, knn_accuracy=round(last["knn_accuracy"], 4),
                  linear_top1=round(probe["top1"], 4))
    print(json.dumps(result, indent=2))
    if not args.no_save:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "pretrain.json").write_text(json.dumps(result, indent=2) + "\n")
