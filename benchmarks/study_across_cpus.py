"""The same study on other CPUs: how far its rows move, and whether its verdicts stay.

A study's runs are deterministic only on one kind of CPU with one torch build: another instruction set (or the same
command under `ATEN_CPU_CAPABILITY` / `ONEDNN_MAX_CPU_ISA` / `MKL_CBWR`, which imitate one) rounds differently, and a
hundred epochs carry the difference into every number. This script compares two or more finished study folders (or
results.json files) of the same preset, the first taken as the reference:

    ctl-explore study --out /tmp/s-default          # under, e.g., ATEN_CPU_CAPABILITY=default ONEDNN_MAX_CPU_ISA=SSE41 MKL_CBWR=COMPATIBLE
    python benchmarks/study_across_cpus.py data/study-digits /tmp/s-default [more folders] [--md OUT.md]

It prints, for each other study: how many rows equal the reference's (every measure and the per-image record), the
largest difference of each measure, the runs whose length (stretching) differs, and each finding's verdict beside the
reference's; then the verdicts' agreement over all of them (the study's cross-machine stability).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ctl_explore.study.rows import COMPARED as MEASURES, compare_studies


def load_rows(where: str | Path) -> list[dict]:
    "A study's rows from its folder (results.json inside) or from a results.json file."
    p = Path(where)
    p = p / "results.json" if p.is_dir() else p
    if not p.is_file(): raise SystemExit(f"study_across_cpus: no results.json at {p}")
    return json.loads(p.read_text())


def verdicts(rows: list[dict]) -> dict[int, str]:
    "Each finding's verdict from the package's judge, against the digits preset's plan."
    from ctl_explore.study.findings import findings
    from ctl_explore.study.judge import planned_cells
    from ctl_explore.study.plan import get_preset
    return {f.number: f.verdict for f in findings(rows, plan=planned_cells(get_preset("digits")))}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("studies", nargs="+", help="study folders or results.json files; the first is the reference")
    p.add_argument("--names", default=None, help="comma-separated labels for the studies (default: their paths)")
    p.add_argument("--md", type=Path, default=None, help="also write the tables as Markdown here")
    a = p.parse_args(argv)
    if len(a.studies) < 2: p.error("give at least two studies: the reference and one to compare with it")
    names = a.names.split(",") if a.names else a.studies
    if len(names) != len(a.studies): p.error(f"--names: {len(names)} labels for {len(a.studies)} studies")
    rows = [load_rows(s) for s in a.studies]
    found = [verdicts(r) for r in rows]
    out = [f"| study | rows equal to {names[0]}'s | largest difference: " + ", ".join(MEASURES) +
           " | most test images classified differently (of a run's 359) | runs of another length |", "|---|---:|---|---:|---|"]
    for name, r in zip(names[1:], rows[1:]):
        c = compare_studies(rows[0], r)
        lengths = [(k, x, y) for k, (x, y) in c["lengths"].items()]
        out.append(f"| {name} | {c['equal']} of {c['runs']} | " + ", ".join(f"{c['largest'][m]:.3f}" for m in MEASURES) +
                   f" | {c['images']} | {len(lengths)}: " + ", ".join(f"{k} {x}→{y}" for k, x, y in lengths[:6]) +
                   (" …" if len(lengths) > 6 else "") + " |")
    numbers = sorted(found[0])
    out += ["", "| finding | " + " | ".join(names) + " | agree |", "|---|" + "---|" * len(names) + "---|"]
    agree = 0
    for n in numbers:
        vs = [f.get(n, "—") for f in found]
        same = len(set(vs)) == 1
        agree += same
        out.append(f"| {n} | " + " | ".join(vs) + f" | {'yes' if same else '**no**'} |")
    out += ["", f"Verdicts the same in every study: {agree} of {len(numbers)} findings."]
    text = "\n".join(out) + "\n"
    print(text)
    if a.md: a.md.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
