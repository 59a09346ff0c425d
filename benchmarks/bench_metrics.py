"""Time and peak memory of each embedding metric on 50,000 x 128 random unit features.

Each metric runs in a fresh Python subprocess, so that its peak resident memory (`ru_maxrss`, which also sees
torch's allocations, unlike `tracemalloc`) is its own. The subprocess imports torch, builds the data, notes its
peak RSS so far (the baseline), runs the metric `--repeats` times and reports wall time, CPU time and the
increase of the peak RSS over the baseline: the memory the metric itself needed at its worst moment.

Data (seeded): `z` 50,000 x 128 unit rows; `z_pos` noisy views of them; labels in 10 classes; for kNN a further
10,000 x 128 test rows. A reference row, "floor", times the bare block-by-block `z @ z.T` over the full matrix,
the arithmetic no all-pairs metric can avoid.

Run: `python benchmarks/bench_metrics.py [--n 50000] [--repeats 1] [--no-save]`; writes benchmarks/results/metrics.md.
"""
from __future__ import annotations

import argparse, datetime, json, os, platform, resource, statistics, subprocess, sys, time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
METRICS = ("floor", "uniformity", "alignment", "tolerance", "similarity_profile", "knn_accuracy")


def machine() -> dict:
    import torch
    fields = {}
    for line in open("/proc/cpuinfo"):
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())  # the first processor's entries
    cpu = fields.get("model name", platform.processor())
    if "cpu family" in fields:  # a VM may report only a generic name such as "AMD EPYC"
        cpu += f" (family {fields['cpu family']}, model {fields.get('model', '?')})"
    mem_kb = next((int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemTotal")), 0)
    return dict(cpu=cpu, cores=os.cpu_count(), torch_threads=torch.get_num_threads(), ram_gb=round(mem_kb / 2**20, 1),
                torch=torch.__version__, python=platform.python_version(), date=datetime.datetime.now().isoformat(timespec="minutes"))


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def worker(metric: str, n: int, d: int, n_test: int, repeats: int) -> dict:
    "Runs in the subprocess: build the data, then time `metric`."
    import math
    import torch
    import torch.nn.functional as F
    from ctl_explore import metrics as M

    g = torch.Generator().manual_seed(0)
    z = F.normalize(torch.randn(n, d, generator=g), dim=1)
    data = {}
    if metric == "alignment" or metric == "similarity_profile":
        data["z_pos"] = F.normalize(z + 0.5 * torch.randn(n, d, generator=g) / math.sqrt(d), dim=1)
    if metric in ("tolerance", "knn_accuracy"):
        data["y"] = torch.randint(0, 10, (n,), generator=g)
    if metric == "knn_accuracy":
        data["test_z"] = F.normalize(torch.randn(n_test, d, generator=g), dim=1)
        data["test_y"] = torch.randint(0, 10, (n_test,), generator=g)
    rows = M._rows_per_block(n, n, None)

    def floor():
        buffer = M._block_buffer(rows, n, z)
        for start in range(0, n, rows): M._sims_into(buffer, z[start:start + rows], z)
        return None

    run = {"floor": floor,
           "uniformity": lambda: M.uniformity(z),
           "alignment": lambda: M.alignment(z, data["z_pos"]),
           "tolerance": lambda: M.tolerance(z, data["y"]),
           "similarity_profile": lambda: M.similarity_profile(z, data["z_pos"]).positive,
           "knn_accuracy": lambda: M.knn_accuracy(z, data["y"], data["test_z"], data["test_y"])}[metric]
    baseline = _peak_mb()
    walls, cpus, value = [], [], None
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), _cpu_s()
        value = run()
        walls.append(time.perf_counter() - wall); cpus.append(_cpu_s() - cpu)
    return dict(metric=metric, wall_s=min(walls), wall_median_s=statistics.median(walls), cpu_s=min(cpus),
                baseline_mb=baseline, peak_mb=_peak_mb(), extra_mb=_peak_mb() - baseline, value=value)


def measure(metric: str, n: int, d: int, n_test: int, repeats: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--worker", metric, "--n", str(n), "--d", str(d),
                          "--n-test", str(n_test), "--repeats", str(repeats)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


DESCRIPTION = {
    "floor": "reference: z @ z.T in the default blocks (one reused buffer), full N x N, no reduction",
    "uniformity": "uniformity(z), t=2 (upper triangle only)",
    "alignment": "alignment(z, z_pos), alpha=2",
    "tolerance": "tolerance(z, labels), 10 classes (closed form)",
    "similarity_profile": "similarity_profile(z, z_pos), k=10",
    "knn_accuracy": "knn_accuracy(train 50k, test 10k), k=200, t=0.07",
}


def report(results: list[dict], info: dict, args) -> str:
    lines = [f"# Metrics benchmark: {args.n:,} x {args.d} unit features", "",
             f"Machine: {info['cpu']}, {info['cores']} cores ({info['torch_threads']} torch threads), {info['ram_gb']} GB RAM; "
             f"torch {info['torch']}, Python {info['python']}; {info['date']}.",
             f"Load average before / after the run: {info['load_before']} / {info['load_after']} "
             "(the machine may be shared: compare CPU time with wall time).", "",
             f"Each metric in a fresh subprocess; best of {args.repeats} run(s). *Extra peak* is the rise of the process's "
             "peak RSS (`ru_maxrss`) over its value after imports and data, i.e. the metric's own working memory. "
             f"The default block holds 2^25 similarities (128 MiB in float32). A full {args.n:,} x {args.n:,} float32 "
             f"similarity matrix would need {4 * args.n ** 2 / 2 ** 30:.1f} GiB.", "",
             "| metric | wall (s) | CPU (s) | extra peak (MiB) | process peak (MiB) | value |",
             "|---|---:|---:|---:|---:|---|"]
    for r in results:
        value = "" if r["value"] is None else f"{r['value']:.4f}"
        lines.append(f"| {DESCRIPTION[r['metric']]} | {r['wall_s']:.2f} | {r['cpu_s']:.2f} | {r['extra_mb']:.0f} | "
                     f"{r['peak_mb']:.0f} | {value} |")
    lines += ["", "The process peak includes about 0.7 GB for importing torch (its CPU+CUDA build) and the data; "
              "*extra peak* is what to compare with the few-hundred-MB budget.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50_000, help="rows of the features (default 50,000)")
    parser.add_argument("--d", type=int, default=128, help="feature dimension (default 128)")
    parser.add_argument("--n-test", type=int, default=10_000, help="test rows for knn_accuracy (default 10,000)")
    parser.add_argument("--repeats", type=int, default=1, help="runs per metric; the best is reported (default 1)")
    parser.add_argument("--metrics", nargs="+", default=list(METRICS), choices=METRICS)
    parser.add_argument("--no-save", action="store_true", help="print only; do not write benchmarks/results/metrics.md")
    parser.add_argument("--worker", choices=METRICS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.n, args.d, args.n_test, args.repeats)))
        sys.exit()
    info = machine()
    info["load_before"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
    results = []
    for metric in args.metrics:
        results.append(measure(metric, args.n, args.d, args.n_test, args.repeats))
        r = results[-1]
        print(f"{metric:<20} wall {r['wall_s']:7.2f} s  cpu {r['cpu_s']:7.2f} s  extra peak {r['extra_mb']:6.0f} MiB"
              f"  (process peak {r['peak_mb']:.0f} MiB)  value {r['value']}", flush=True)
    info["load_after"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
    text = report(results, info, args)
    if not args.no_save:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "metrics.md").write_text(text)
        print(f"written to {RESULTS / 'metrics.md'}")
