"""Write data/study-mnist/made.json from a finished `ctl-explore study --preset mnist` timed by /usr/bin/time -v: how it was made
(command, commit, start and end, wall and CPU seconds, load averages, machine), the verdicts and the test images 80 % power needs as
the judge gives them on the shipped rows, and the share of studies drawn from those rows (appendix 25, 100 studies at the preset's
seeds) that decide each finding and that give its verdict.

    python scripts/make_study_mnist_made.py START_FILE TIME_FILE END_LOAD_FILE
START_FILE: the UTC start and /proc/loadavg before; TIME_FILE: /usr/bin/time -v's output; END_LOAD_FILE: the UTC end and /proc/loadavg after."""
import json, platform, re, subprocess, sys
from pathlib import Path

import torch
from ctl_explore.study.calibration import drawn_decisions
from ctl_explore.study.findings import judge_study
from ctl_explore.study.plan import get_preset
from ctl_explore.study.rows import load_results

start, time_v, end = (Path(a).read_text().split("\n") for a in sys.argv[1:4])
tv = "\n".join(time_v)
field = lambda name: re.search(rf"{re.escape(name)}: (.+)", tv).group(1).strip()
h, m, s = ([0] + field("Elapsed (wall clock) time (h:mm:ss or m:ss)").split(":"))[-3:]
wall = int(h) * 3600 + int(m) * 60 + float(s)
user, system = float(field("User time (seconds)")), float(field("System time (seconds)"))
rows = load_results("data/study-mnist/results.json")
preset = get_preset("mnist")
found = judge_study(rows, preset).findings
drawn = drawn_decisions(rows, preset, len(preset.seeds), 100)
commit = subprocess.run(["git", "log", "-1", "--format=%H"], capture_output=True, text=True).stdout.strip()
lscpu = [l for l in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
         if l.split(":")[0] in ("Architecture", "CPU(s)", "Model name", "Thread(s) per core", "Core(s) per socket")]
made = dict(command="/usr/bin/time -v ctl-explore study --preset mnist --out study-mnist (its two pool workers), then results.json, "
                    "results.csv and report.html copied into data/study-mnist/",
            commit=commit, started_utc=start[0], finished_utc=end[0], seconds=round(wall, 1),
            cpu_seconds_total=round(user + system, 1), cpu_seconds_user=user, cpu_seconds_system=system,
            max_resident_kb=int(field("Maximum resident set size (kbytes)")),
            load_before=[float(x) for x in start[1].split()[:3]], load_after=[float(x) for x in end[1].split()[:3]],
            machine="shared with other sessions (the load averages above); the study's two workers one thread each",
            python=platform.python_version(), torch=torch.__version__, lscpu=lscpu,
            runs=len(rows), usable=sum(bool(r["converged"]) and not r["collapsed"] for r in rows),
            stretched={r["run"]: r["config"]["epochs"] for r in rows if r["config"]["epochs"] != preset.base.epochs},
            verdicts={str(f.number): f.verdict for f in found},
            images_needed={str(f.number): f.images_needed for f in found},
            power={str(f.number): round(f.power, 4) for f in found},
            drawn=dict(studies=100, seeds=len(preset.seeds), n_test=rows[0]["n_test"],
                       decided={str(n): round(v, 2) for n, v in drawn["decided"].items()},
                       same_verdict={str(n): round(v, 2) for n, v in drawn["same"].items()}))
Path("data/study-mnist/made.json").write_text(json.dumps(made, indent=1, ensure_ascii=False) + "\n")
print(json.dumps({k: made[k] for k in ("seconds", "cpu_seconds_total", "usable", "verdicts", "images_needed", "drawn")}, indent=1))
