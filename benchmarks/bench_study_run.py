"""Issue 28 item 5: where one run of the default `digits` study spends its time, and what appendix 14's fast epoch saves.

One run exactly as `ctl-explore study` trains and measures it (`workers._train_and_measure`: train to the first lr
drop, the stretch decision, the rest of the schedule, then `measure_run` with its linear probe), in one thread, lesson
07's plain epoch loop and the fast one in turn in this process. Each phase is timed in CPU seconds (`time.process_time`,
which a busy machine inflates less than wall time) and wall seconds: start-up (imports, in a child process, its CPU
from `getrusage(RUSAGE_CHILDREN)`), data, the training steps (draws, augmentation, forward, loss, backward, update),
the every-5-epoch measurements, the checkpoints, the stretch decision, the measurement and its probe, and the report
written once at the end of a study. A short torch.profiler pass says how much of a step is the convolution, matrix
and batch-norm kernels, which no change that keeps the numbers can shorten. The two runs' rows must be equal.

Run: `python benchmarks/bench_study_run.py [--repeats 2] [--loss contrastive --tau 0.2 --seed 0] [--no-save]`
(about 2 × repeats × 35 CPU-s). Writes results/study_run.json and results/study_run.md.

`--regimes` instead times the same run under the 200-epoch regime of the study's first five runs (`plan._DIGITS_200`) and
the `digits` preset's 100-epoch one, interleaved in this process (fast epochs both), and adds their CPU ratio to the saved
results: the per-run halving issue 28 asks for (about 2 × repeats × 55 CPU-s).
"""
from __future__ import annotations

import argparse, collections, contextlib, functools, json, os, resource, subprocess, sys, tempfile, time
from pathlib import Path

import torch

from ctl_explore import fast, train
from ctl_explore.study import measure, plan as study_plan, report, rows as study_rows, workers

from bench_losses import machine

RESULTS = Path(__file__).parent / "results"
ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "data" / "study-digits"
# the quiet 2-core study this estimate scales (benchmarks/results/study.md and issue 28): 42 runs, 2 workers
QUIET_STUDY = dict(wall_s=727, cpu_s=1387, runs=42, machine="2-core machine, quiet (issue 28's figure)")
PHASES = ("data", "setup", "steps", "eval_every_5", "checkpoints", "stretch_decision", "measure_without_probe", "probe")
_TIMED = [(train, "_load_data", "data"), (train, "new_state", "setup"), (train, "_resume", "setup"),
          (train, "_train_epoch", "steps"), (train, "evaluate", "eval_every_5"), (train, "_save_epoch", "checkpoints"),
          (workers, "_settled", "stretch_decision"), (workers, "_current", "stretch_decision"),
          (workers, "stretch_run", "stretch_decision"), (workers, "_measure", "measure"), (measure, "linear_eval", "probe")]


def lscpu() -> dict:
    try: out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError): return {}
    info = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    return {k: info[k].strip() for k in ("Model name", "CPU(s)", "Thread(s) per core") if k in info}


class PhaseClock:
    "CPU and wall seconds spent inside each wrapped function, by phase (a phase's time includes only its outermost call)."
    def __init__(self):
        self.cpu, self.wall, self._depth, self._saved = collections.Counter(), collections.Counter(), collections.Counter(), []

    def __enter__(self):
        for module, name, phase in _TIMED:
            original = getattr(module, name)
            self._saved.append((module, name, original))
            setattr(module, name, self._wrap(original, phase))
        return self

    def __exit__(self, *exc):
        for module, name, original in reversed(self._saved): setattr(module, name, original)

    def _wrap(self, f, phase):
        @functools.wraps(f)
        def timed(*a, **k):
            self._depth[phase] += 1
            c, w = time.process_time(), time.perf_counter()
            try: return f(*a, **k)
            finally:
                self._depth[phase] -= 1
                if not self._depth[phase]:
                    self.cpu[phase] += time.process_time() - c
                    self.wall[phase] += time.perf_counter() - w
        return timed


def one_run(config, probe: dict, stretch, plain: bool) -> tuple[dict, dict, dict]:
    "The run's row, its phases' CPU and wall seconds (with 'total' and 'other'), and its record."
    out = Path(tempfile.mkdtemp(prefix="bench_study_run_")) / study_plan.run_name(config)
    with PhaseClock() as clock:
        c, w = time.process_time(), time.perf_counter()
        if plain:
            with fast.plain_epochs(): row = workers._train_and_measure(config, out, probe, threads=1, stretch=stretch)
        else: row = workers._train_and_measure(config, out, probe, threads=1, stretch=stretch)
        total_cpu, total_wall = time.process_time() - c, time.perf_counter() - w
    cpu, wall = dict(clock.cpu), dict(clock.wall)
    for d, total in ((cpu, total_cpu), (wall, total_wall)):
        d["measure_without_probe"] = d.pop("measure", 0.0) - d.get("probe", 0.0)
        d["other"] = total - sum(d.values())
        d["total"] = total
    return row, {k: round(v, 3) for k, v in cpu.items()}, {k: round(v, 3) for k, v in wall.items()}


def startup() -> dict:
    "CPU and wall seconds of a fresh process importing what a study worker imports."
    before, w = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run([sys.executable, "-c", "import ctl_explore.study.runner, ctl_explore.linear_eval"],
                   check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return dict(cpu_s=round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2),
                wall_s=round(time.perf_counter() - w, 2))


def report_cost() -> dict | None:
    "CPU and wall seconds of the report a study writes once at its end, on the shipped rows."
    path = SHIPPED / "results.json"
    if not path.exists(): return None
    rows = study_rows.load_results(path)
    c, w = time.process_time(), time.perf_counter()
    report.write_report(rows, Path(tempfile.mkdtemp(prefix="bench_report_")), study_plan.get_preset("digits"))
    return dict(cpu_s=round(time.process_time() - c, 2), wall_s=round(time.perf_counter() - w, 2))


def kernel_share(config, epochs: int = 3) -> dict:
    "Share of a training step's CPU time in the convolution, matrix and batch-norm kernels (torch.profiler, fast epochs)."
    from torch.profiler import ProfilerActivity, profile
    from tqdm.auto import tqdm
    torch.set_num_threads(1)
    dev = torch.device("cpu")
    data, _ = train._load_data(config, dev, True)
    state = train.new_state(config, data, dev)
    state.model.train()
    steps = len(data) // config.batch_size
    train._train_epoch(state, data, tqdm(range(steps), disable=True))  # warm-up
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(epochs): train._train_epoch(state, data, tqdm(range(steps), disable=True))
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    kernels = ("aten::convolution_backward", "aten::mkldnn_convolution", "aten::mm", "aten::addmm", "aten::native_batch_norm",
               "aten::native_batch_norm_backward", "aten::max_pool2d_with_indices", "aten::max_pool2d_with_indices_backward")
    by = {k: sum(e.self_cpu_time_total for e in events if e.key == k) / total for k in kernels}
    return dict(share=round(sum(by.values()), 3), by_kernel={k: round(v, 3) for k, v in by.items()},
                step_ms=round(total / 1000 / (epochs * steps), 2))


def epoch_loop(config, reps: int = 6, epochs: int = 4) -> dict:
    "CPU seconds per epoch of the training steps alone, lesson 07's loop and the fast one interleaved `reps` times (a steadier ratio on a busy machine than whole runs)."
    from tqdm.auto import tqdm
    torch.set_num_threads(1)
    dev = torch.device("cpu")
    data, _ = train._load_data(config, dev, True)
    steps = len(data) // config.batch_size
    per_epoch = {"plain": [], "fast": []}
    for _ in range(reps):
        for way in ("plain", "fast"):
            state = train.new_state(config, data, dev)
            state.model.train()
            bar = tqdm(range(steps), disable=True)
            with (fast.plain_epochs() if way == "plain" else contextlib.nullcontext()):
                train._train_epoch(state, data, bar)  # the first epoch, not timed
                c = time.process_time()
                for _ in range(epochs): train._train_epoch(state, data, bar)
            per_epoch[way].append((time.process_time() - c) / epochs)
    best = {k: min(v) for k, v in per_epoch.items()}
    median = {k: sorted(v)[len(v) // 2] for k, v in per_epoch.items()}
    return dict(reps=reps, epochs_each=epochs, steps_per_epoch=steps, cpu_s_per_epoch_best={k: round(v, 4) for k, v in best.items()},
                cpu_s_per_epoch_median={k: round(v, 4) for k, v in median.items()},
                ratio_best=round(best["plain"] / best["fast"], 3), ratio_median=round(median["plain"] / median["fast"], 3))


def regimes(config, probe: dict, repeats: int) -> dict:
    "The run under the 200-epoch regime and under the digits preset's, interleaved `repeats` times: best CPU and wall seconds by phase, and the ratio."
    import dataclasses
    old_preset = study_plan.StudyPreset.make("digits", **study_plan._DIGITS_200)
    new_preset = study_plan.get_preset("digits")
    ways = {f"{p.base.epochs} epochs": (p, dataclasses.replace(config, epochs=p.base.epochs, warmup_epochs=p.base.warmup_epochs))
            for p in (old_preset, new_preset)}
    runs = {k: [] for k in ways}
    for r in range(repeats):
        for way, (p, c) in ways.items():
            row, cpu, wall = one_run(c, probe, p.stretch, plain=False)
            runs[way].append(dict(cpu_s=cpu, wall_s=wall, epochs_trained=row["config"]["epochs"], linear_top1=row["linear_top1"],
                                  uniformity=row["uniformity"], converged=row["converged"]))
            print(f"{way}: {cpu['total']:.1f} CPU-s, {wall['total']:.1f} s wall, trained {row['config']['epochs']} epochs", flush=True)
    best = {way: min(rs, key=lambda x: x["cpu_s"]["total"]) for way, rs in runs.items()}
    old, new = best.values()
    return dict(ways=list(ways), best=best, all_runs=runs, repeats=repeats, load_average=[round(x, 2) for x in os.getloadavg()],
                cpu_ratio_old_over_new=round(old["cpu_s"]["total"] / new["cpu_s"]["total"], 3),
                steps_ratio_old_over_new=round(old["cpu_s"]["steps"] / new["cpu_s"]["steps"], 3))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2, help="plain/fast pairs, interleaved (the minimum of each is kept)")
    parser.add_argument("--loss", default="contrastive")
    parser.add_argument("--tau", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-save", action="store_true")
    parser.add_argument("--epochs-only", action="store_true",
                        help="time the epoch loops alone and add them to the saved results/study_run.json (no whole runs)")
    parser.add_argument("--regimes", action="store_true",
                        help="time the run under the 200-epoch regime and the digits preset's, add them to the saved results/study_run.json")
    args = parser.parse_args()
    torch.set_num_threads(1)  # as a study worker
    p = study_plan.get_preset("digits")
    n_train = len(train._load_data(p.base, torch.device("cpu"), True)[0])
    config = study_plan.run_config(p, args.loss, args.tau if study_plan.takes_tau(args.loss) else None, args.seed, n_train)
    probe = dict(linear_epochs=p.linear_epochs, normalize=p.probe_normalize, augment=p.probe_augment)
    if args.regimes:
        saved = json.loads((RESULTS / "study_run.json").read_text())
        saved["regimes"] = {**regimes(config, probe, args.repeats), "machine": {**machine(), **lscpu()}}
        print(json.dumps({k: v for k, v in saved["regimes"].items() if k != "all_runs"}, indent=2))
        if not args.no_save:
            (RESULTS / "study_run.json").write_text(json.dumps(saved, indent=2) + "\n")
            (RESULTS / "study_run.md").write_text(markdown(saved))
        return
    if args.epochs_only:
        saved = json.loads((RESULTS / "study_run.json").read_text())
        saved["epoch_loop"] = {**epoch_loop(config), "load_average": [round(x, 2) for x in os.getloadavg()]}
        print(json.dumps(saved["epoch_loop"], indent=2))
        if not args.no_save:
            (RESULTS / "study_run.json").write_text(json.dumps(saved, indent=2) + "\n")
            (RESULTS / "study_run.md").write_text(markdown(saved))
        return
    load_before = os.getloadavg()
    runs = {"plain": [], "fast": []}
    rows = {}
    for r in range(args.repeats):
        for way in ("plain", "fast"):
            row, cpu, wall = one_run(config, probe, p.stretch, plain=way == "plain")
            runs[way].append(dict(cpu_s=cpu, wall_s=wall))
            rows.setdefault(way, row)
            print(f"{way:5s} run {r + 1}: {cpu['total']:.1f} CPU-s, {wall['total']:.1f} s wall  "
                  + "  ".join(f"{k} {v:.2f}" for k, v in cpu.items() if k != "total"), flush=True)
    skip = ("wall_time_s",)  # the row's own record of how long it took
    same_rows = {k: v for k, v in rows["plain"].items() if k not in skip} == {k: v for k, v in rows["fast"].items() if k not in skip}
    best = {way: min(rs, key=lambda x: x["cpu_s"]["total"]) for way, rs in runs.items()}
    ratio = best["plain"]["cpu_s"]["total"] / best["fast"]["cpu_s"]["total"]
    start, report = startup(), report_cost()
    kernels = kernel_share(config)
    loop = {**epoch_loop(config), "load_average": [round(x, 2) for x in os.getloadavg()]}
    quiet = dict(cpu_s=round(QUIET_STUDY["cpu_s"] / ratio), wall_s=round(QUIET_STUDY["wall_s"] / ratio))
    result = dict(
        machine={**machine(), **lscpu(), "load_average_before": [round(x, 2) for x in load_before],
                 "load_average_after": [round(x, 2) for x in os.getloadavg()]},
        run=study_plan.run_name(config), epochs_trained=rows["fast"]["config"]["epochs"], repeats=args.repeats,
        rows_equal=same_rows, linear_top1=rows["fast"]["linear_top1"], uniformity=rows["fast"]["uniformity"],
        plain=best["plain"], fast=best["fast"], all_runs=runs, cpu_ratio_plain_over_fast=round(ratio, 3),
        worker_startup=start, report_at_the_end=report, step_kernels=kernels, epoch_loop=loop,
        study_estimate=dict(note="an estimate, not a measurement: the quiet 2-core study's measured CPU and wall time divided "
                                 "by this run's plain/fast CPU ratio (the ratio survives a busy machine; absolute times do not)",
                            before=QUIET_STUDY, after=quiet))
    print(json.dumps({k: v for k, v in result.items() if k != "all_runs"}, indent=2))
    if not args.no_save:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "study_run.json").write_text(json.dumps(result, indent=2) + "\n")
        (RESULTS / "study_run.md").write_text(markdown(result))
    if not same_rows: sys.exit("the plain and the fast run gave different rows")


def markdown(r: dict) -> str:
    m, p, f = r["machine"], r["plain"], r["fast"]
    lines = [f"# One run of the default digits study: where its time goes (`bench_study_run.py`)", "",
             f"Run `{r['run']}` ({r['epochs_trained']} epochs), trained and measured as `ctl-explore study` does, one thread; "
             f"lesson 07's plain epoch loop and appendix 14's fast one in turn, best of {r['repeats']} each. "
             f"Machine: {m.get('Model name', m['cpu'])}, {m.get('CPU(s)', '?')} CPUs, torch {m['torch']}, {m['date']}; "
             f"load average {m['load_average_before'][0]} before, {m['load_average_after'][0]} after "
             f"({'busy: other work shared the cores, so read CPU seconds and the ratio, not wall time' if m['load_average_before'][0] > 1.5 else 'quiet'}). "
             f"Rows equal: **{r['rows_equal']}** (linear top-1 {r['linear_top1']:.4f}, uniformity {r['uniformity']:.4f} both ways).", "",
             "| phase | plain CPU-s | fast CPU-s | plain wall s | fast wall s |", "|---|---:|---:|---:|---:|"]
    for k in PHASES + ("other", "total"):
        lines.append(f"| {k.replace('_', ' ')} | {p['cpu_s'].get(k, 0):.2f} | {f['cpu_s'].get(k, 0):.2f} | "
                     f"{p['wall_s'].get(k, 0):.2f} | {f['wall_s'].get(k, 0):.2f} |")
    k = r["step_kernels"]
    e = r["study_estimate"]
    lines += ["", f"CPU ratio plain / fast, whole runs: **{r['cpu_ratio_plain_over_fast']:.2f} ×**.", ""]
    if "epoch_loop" in r:
        el = r["epoch_loop"]
        lines += [f"The training steps alone ({el['reps']} interleaved pairs of {el['epochs_each']} epochs of {el['steps_per_epoch']} steps, "
                  f"load average {el['load_average'][0]}): {el['cpu_s_per_epoch_best']['plain']:.3f} CPU-s per epoch in lesson 07's loop, "
                  f"{el['cpu_s_per_epoch_best']['fast']:.3f} in the fast one (best of each; ratio {el['ratio_best']:.2f} ×, "
                  f"of the medians {el['ratio_median']:.2f} ×).", ""]
    lines += [
              f"Start-up of a worker (imports, once per worker, two per study): {r['worker_startup']['cpu_s']} CPU-s, "
              f"{r['worker_startup']['wall_s']} s wall. "
              + (f"The report written once at the end of a study: {r['report_at_the_end']['cpu_s']} CPU-s. " if r["report_at_the_end"] else ""),
              "",
              f"Under torch.profiler (whose cost per operation inflates the many small operations, so the kernels' true share is "
              f"larger) {k['share'] * 100:.0f} % of a fast step's CPU time is in the convolution, matrix-product, batch-norm and "
              "pooling kernels ("
              + ", ".join(f"{n.replace('aten::', '')} {v * 100:.0f} %" for n, v in k["by_kernel"].items() if v >= 0.005)
              + "), which no change that keeps the numbers can shorten: a cut by half of a run's CPU time would need those "
              "kernels themselves to change (another convolution algorithm, precision or batch shape), and with them every number.", "",
              f"Estimate (not a measurement) for the whole default study on a quiet 2-core machine: {e['before']['cpu_s']} CPU-s and "
              f"{e['before']['wall_s']} s before (measured, issue 28) become about {e['after']['cpu_s']} CPU-s and "
              f"{e['after']['wall_s']} s ({e['after']['wall_s'] / 60:.1f} min), dividing both by the whole runs' ratio."]
    if "epoch_loop" in r:
        share = p["cpu_s"]["steps"] / p["cpu_s"]["total"]
        run_ratio = 1 / (1 - share + share / r["epoch_loop"]["ratio_best"])
        lines[-1] += (f" With the steady steps-alone ratio instead ({r['epoch_loop']['ratio_best']:.2f} × on the steps, which are "
                      f"{share * 100:.0f} % of a run): {run_ratio:.2f} × per run, about {e['before']['cpu_s'] / run_ratio:.0f} CPU-s and "
                      f"{e['before']['wall_s'] / run_ratio:.0f} s ({e['before']['wall_s'] / run_ratio / 60:.1f} min).")
    if "regimes" in r:
        g = r["regimes"]
        old, new = (g["best"][w] for w in g["ways"])
        lines += ["", "## The 200-epoch regime against the `digits` preset's (`--regimes`)", "",
                  f"The same run (`{r['run']}`) under the regime of the study's first five runs and under the `digits` preset's, "
                  f"fast epochs both, interleaved {g['repeats']} times in one process, best of each; load average {g['load_average'][0]} "
                  f"after ({g['machine'].get('Model name', g['machine'].get('cpu'))}, {g['machine']['date']}). Both runs settled unstretched: "
                  f"{old['epochs_trained']} and {new['epochs_trained']} epochs, linear top-1 {old['linear_top1']:.4f} and {new['linear_top1']:.4f}, "
                  f"uniformity {old['uniformity']:.3f} and {new['uniformity']:.3f} (the numbers move: this is a stated change, not a faster copy).", "",
                  f"| phase | {g['ways'][0]} CPU-s | {g['ways'][1]} CPU-s | {g['ways'][0]} wall s | {g['ways'][1]} wall s |", "|---|---:|---:|---:|---:|"]
        for k in PHASES + ("other", "total"):
            lines.append(f"| {k.replace('_', ' ')} | {old['cpu_s'].get(k, 0):.2f} | {new['cpu_s'].get(k, 0):.2f} | "
                         f"{old['wall_s'].get(k, 0):.2f} | {new['wall_s'].get(k, 0):.2f} |")
        lines += ["", f"CPU ratio {g['ways'][0]} / {g['ways'][1]}, whole runs: **{g['cpu_ratio_old_over_new']:.2f} ×** "
                      f"(training steps alone {g['steps_ratio_old_over_new']:.2f} ×).", ""]
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
