"""The mnist preset's pilot (lesson 09's second dataset): a few regimes of the 5,000 MNIST digits, each trained at the cells
findings 2-4 compare, timed, and scored by the share of studies drawn from it (appendix 25) that decide each finding.

The rule, written before any pilot run: a regime qualifies when every pilot run is usable (converged by the study's label-free
criteria, none collapsed) and the whole study it implies (the digits' six τ, two τ-losses and the two Simple losses, 14 cells,
at the seeds chosen) fits 30 minutes on 2 cores (its CPU-seconds a run × runs / 2 < 1800 s); among those, the one whose weakest
of findings 2-4 is decided in the largest share of drawn studies at the seeds that fit, ties to the fewer CPU-seconds. The
verdicts of the pilot are neither printed nor stored: only how often each finding is decided (any verdict but undecided).
Added after the first two runs of the first regime (one of them had not settled at 60 epochs), before any share decided or
any verdict was computed: if no regime has every run usable, the regimes with the most usable runs qualify. The third regime
planned (14 px, width 16, 50 epochs) was dropped then for time: the shared machine gave the pilot about half a core. For the
same reason, when the first regime's six ordinary-loss runs had all been stretched to 60 epochs, the second regime was moved
from 28 px (more CPU per run) to 8 px (the digits' side, less), before it started and before any share decided was computed,
and measured every 2 epochs: at 30 epochs measured every 5, the criteria's window (epochs 18-24) holds one measured epoch, too
few to settle, so the first regime's runs are all stretched, to 60 epochs at most: in effect a 60-epoch regime.
Added while the second regime trained, after the first regime's shares decided were printed (none of findings 2-4 decided,
at 12 of 16 runs usable) and before the second's: the study's seeds are the smaller of 3 and 5 at which each of findings 2-4 is
decided in at least 80 % of drawn studies; if neither, 5 when it fits the 30 minutes (more seeds only add power), else 3.

    python scripts/mnist_pilot.py OUT          # trains what is missing under OUT/<regime>/, writes data/study-mnist/pilot.json
                                               # (pilot-rerun.json when the recorded pilot is there)
"""
import json, os, resource, sys, time
from pathlib import Path

from ctl_explore.study.plan import StudyPreset
from ctl_explore.study.runner import run_study
from ctl_explore.study.calibration import drawn_decisions
from ctl_explore.study.findings import judge_study

PILOT_TAUS = (0.05, 0.2, 0.3, 1.0)   # the ordinary loss at the smallest, the best two and the largest τ of the study's grid
HARD_TAUS = (0.05, 1.0)              # the hard loss at the largest τ, and the smallest (finding 3 also compares the range of uniformity)
PARTS = {"a": dict(losses=("contrastive", "simple", "hard_simple"), taus=PILOT_TAUS), "b": dict(losses=("hard_contrastive",), taus=HARD_TAUS)}
REGIMES = {
    "14px-w8-30ep": dict(image_size=14, width=8, epochs=30, warmup_epochs=3, extend_epochs=10, max_epochs=60),
    "8px-w8-30ep": dict(image_size=8, width=8, epochs=30, warmup_epochs=3, extend_epochs=10, max_epochs=60, eval_every=2),
}
SEEDS = (100, 101)            # the pilot's seeds; the study's are 0, 1, 2...
STUDY_CELLS = 2 * 6 + 2      # the study: both τ-losses at six τ, Simple, HardSimple
FINDINGS = (2, 3, 4)

def pilot_presets(name: str, regime: dict) -> dict:
    regime = {"eval_every": 5, **regime}
    return {k: StudyPreset.make(f"mnist-pilot-{name}-{k}", dataset="mnist5k", seeds=SEEDS, **regime, **part)
            for k, part in PARTS.items()}

def score(rows: list[dict]) -> dict:
    """How often studies drawn from the pilot's `rows` decide findings 2-4 (any verdict but undecided), judged against the pilot's
    own cells, {(loss, τ): seeds} (a plan read from the rows would plan the hard loss at every τ of the ordinary loss, and
    finding 3 would be undecided by construction: the first scoring did that and was redone before the choice); and the test
    images 80 % power needs (Finding.images_needed). No verdict is returned."""
    plan = {c: len(SEEDS) for c in {(r["loss"], r["tau"] if r["loss"] in ("contrastive", "hard_contrastive") else None) for r in rows}}
    found = judge_study(rows, plan).findings
    share = lambda seeds, n_tables, n_test: {k: round(v, 2) for k, v in drawn_decisions(rows, plan, seeds, n_tables, n_test, 0)["decided"].items()
                                             if k in FINDINGS}
    return dict(plan=sorted(f"{l}" + ("" if t is None else f" τ={t:g}") for l, t in plan),
                images_needed={f.number: f.images_needed for f in found if f.number in FINDINGS},
                decided={s: share(s, 100, None) for s in (3, 5, 10)},
                decided_at_5_seeds_by_test_images={n: share(5, 50, n) for n in (1000, 5000, 20000)})

def main(out: Path):
    record = {"rule": __doc__.split("\n\n")[1], "seeds": SEEDS, "taus": PILOT_TAUS, "regimes": {}}
    for name, regime in REGIMES.items():
        before = len(list((out / name).glob("*/runs/*/result.json")))  # runs finished by an earlier, interrupted call
        load = os.getloadavg(); c0 = resource.getrusage(resource.RUSAGE_CHILDREN); s0 = resource.getrusage(resource.RUSAGE_SELF)
        w0 = time.perf_counter()
        rows = [r for k, p in pilot_presets(name, regime).items() for r in run_study(p, out / name / k, quiet=True, workers=2)]
        wall = time.perf_counter() - w0
        c1 = resource.getrusage(resource.RUSAGE_CHILDREN); s1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime) + (s1.ru_utime + s1.ru_stime - s0.ru_utime - s0.ru_stime)
        rows = [r for r in rows if "failed" not in r]
        per_run = sum(r["wall_time_s"] for r in rows) / len(rows)
        usable = sum(bool(r["converged"]) and not r["collapsed"] for r in rows)
        epochs = [r["config"]["epochs"] for r in rows]
        entry = dict(regime=regime, runs=len(rows), usable=usable, epochs_trained=epochs, wall_s=round(wall, 1), cpu_s=round(cpu, 1),
                     load_before=[round(x, 2) for x in load], load_after=[round(x, 2) for x in os.getloadavg()],
                     run_wall_s_mean=round(per_run, 1), linear_top1_mean=round(sum(r["linear_top1"] for r in rows) / len(rows), 4))
        entry["runs_finished_before"] = before
        entry["cpu_s_per_run"] = round(cpu / max(1, len(rows) - before), 1)  # this call's processes over the runs it trained
        entry["scored"] = score(rows)
        entry["study_minutes_2_cores"] = {s: round(STUDY_CELLS * s * entry["cpu_s_per_run"] / 2 / 60, 1) for s in (3, 5)}
        record["regimes"][name] = entry
        print(name, json.dumps(entry), flush=True)
        Path("data/study-mnist/pilot-progress.json").write_text(json.dumps(record, indent=1))
    return record

if __name__ == "__main__":
    record = main(Path(sys.argv[1]))
    recorded = Path("data/study-mnist/pilot.json")  # the pilot recorded before the study, with its choice: never overwritten
    (recorded.with_name("pilot-rerun.json") if recorded.exists() else recorded).write_text(json.dumps(record, indent=1) + "\n")
