"""Where CI's time goes (`bash .ci/run`: install, `nbdev-test`, `pytest -n 2 --dist loadfile tests`), in CPU seconds,
which a machine shared with other jobs does not inflate the way it inflates wall time.

* (from the repository root) `python benchmarks/ci_time.py notebooks [NB ...]`: runs `nbdev-test NB` once per notebook (every notebook nbdev-test
  runs when none is named), each in a fresh process, and prints its wall and CPU seconds (the process and its
  children: kernels, check processes), slowest first.
* `python benchmarks/ci_time.py tests FILE`: sums what a pytest run with `CTL_TEST_CPU=FILE` recorded (see
  tests/conftest.py: one line per test in FILE.<worker>) per test file and per xdist worker.

Results and the commands that made them: benchmarks/results/ci_time.md."""
from __future__ import annotations

import argparse, collections, glob, resource, subprocess, sys, time
from pathlib import Path

ROOT = Path.cwd()  # run from the repository root


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def notebooks(paths: list[str]) -> None:
    if not paths:
        from nbdev.doclinks import nbglob
        paths = sorted(str(p) for p in nbglob(ROOT / "nbs", as_path=True))
    bin_dir = Path(sys.executable).parent
    rows = []
    for p in paths:
        c0, w0 = _children_cpu(), time.monotonic()
        done = subprocess.run([str(bin_dir / "nbdev-test"), p], cwd=ROOT, capture_output=True, text=True)
        rows.append((time.monotonic() - w0, _children_cpu() - c0, Path(p).relative_to(ROOT / "nbs") if Path(p).is_absolute() else p,
                     "ok" if done.returncode == 0 else "FAILED"))
        print(f"{rows[-1][0]:7.1f} s wall {rows[-1][1]:7.1f} s CPU  {rows[-1][2]} {rows[-1][3]}", flush=True)
    print(f"\n{'wall s':>8} {'CPU s':>8}  notebook")
    for wall, cpu, p, ok in sorted(rows, key=lambda r: -r[1]):
        print(f"{wall:8.1f} {cpu:8.1f}  {p} {'' if ok == 'ok' else ok}")
    print(f"{sum(r[0] for r in rows):8.1f} {sum(r[1] for r in rows):8.1f}  all {len(rows)} notebooks, one at a time")


def tests(prefix: str) -> None:
    per_file, per_worker = collections.defaultdict(lambda: [0.0, 0.0, 0.0, 0, set()]), collections.defaultdict(lambda: [0.0, 0.0, 0.0, 0, 1e18, 0.0])
    for path in sorted(glob.glob(prefix + ".*")):
        worker = path.rsplit(".", 1)[1]
        for line in Path(path).read_text().splitlines():
            nodeid, wall, cpu, children, start = line.split("\t")[:5]
            wall, cpu, children, start = float(wall), float(cpu), float(children), float(start)
            f = per_file[nodeid.split("::")[0]]
            f[0] += wall; f[1] += cpu; f[2] += children; f[3] += 1; f[4].add(worker)
            w = per_worker[worker]
            w[0] += wall; w[1] += cpu; w[2] += children; w[3] += 1; w[4] = min(w[4], start); w[5] = max(w[5], start + wall)
    print(f"{'wall s':>8} {'CPU s':>8} {'child s':>8} {'tests':>6}  file (worker)")
    for name, (wall, cpu, children, n, workers) in sorted(per_file.items(), key=lambda kv: -(kv[1][1] + kv[1][2])):
        print(f"{wall:8.1f} {cpu:8.1f} {children:8.1f} {n:6d}  {name} ({','.join(sorted(workers))})")
    tot = [sum(v[i] for v in per_file.values()) for i in range(4)]
    print(f"{tot[0]:8.1f} {tot[1]:8.1f} {tot[2]:8.1f} {tot[3]:6d}  all files")
    print(f"\n{'wall s':>8} {'CPU s':>8} {'child s':>8} {'tests':>6} {'span s':>7}  worker")
    for worker, (wall, cpu, children, n, first, last) in sorted(per_worker.items()):
        print(f"{wall:8.1f} {cpu:8.1f} {children:8.1f} {n:6d} {last - first:7.1f}  {worker}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    sub.add_parser("notebooks").add_argument("paths", nargs="*")
    sub.add_parser("tests").add_argument("prefix")
    args = ap.parse_args()
    notebooks(args.paths) if args.what == "notebooks" else tests(args.prefix)
