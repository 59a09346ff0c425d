"""Recompute data/study-digits-calibration.json (calibrate: false alarms at every edge) and data/study-digits-power.json
(seeds_to_decide and drawn_decisions: power for whole findings) from the shipped digits study (appendix 25, lesson 09).
Usage: python scripts/make_study_power.py [power] [calibration]"""
import json, os, subprocess, time, sys
from ctl_explore.study.calibration import calibrate, drawn_decisions, seeds_to_decide
from ctl_explore.study.rows import load_results
rows = load_results("data/study-digits/results.json")
commit = subprocess.run(["git", "log", "-1", "--format=%h"], capture_output=True, text=True).stdout.strip()
def made(command, t0, c0, load0):
    return dict(command=command, seconds=round(time.time() - t0, 1), cpu_seconds=round(time.process_time() - c0, 1),
                load_before=[round(x, 2) for x in load0], load_after=[round(x, 2) for x in os.getloadavg()],
                machine="2 vCPUs, AMD EPYC (family 26), shared with other sessions", commit=f"{commit} (accuracy margins in log-odds)")
def rounded(x):
    "Shares to four decimals (1 - 0.99 is 0.010000000000000009 in floating point)."
    if isinstance(x, dict): return {k: rounded(v) for k, v in x.items()}
    return round(x, 4) if isinstance(x, float) else x

which = sys.argv[1:] or ["power", "calibration"]
if "power" in which:
    t0, c0, l0 = time.time(), time.process_time(), os.getloadavg()
    need = seeds_to_decide(rows, "digits", candidates=(3, 5, 10, 20), n_tables=100)
    at = {s: drawn_decisions(rows, "digits", s, 100) for s in (3, 5, 10)}
    out = dict(seeds=need["seeds"], decided=rounded(need["decided"]), target=need["target"],
               same=rounded({s: o["same"] for s, o in at.items()}), verdicts=rounded({s: o["verdicts"] for s, o in at.items()}), n_tables=100, n_test=359,
               made=made("seeds_to_decide(rows, 'digits', candidates=(3, 5, 10, 20), n_tables=100); drawn_decisions(rows, 'digits', s, 100) for s in (3, 5, 10)", t0, c0, l0))
    open("data/study-digits-power.json", "w").write(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print("power written")
if "calibration" in which:
    t0, c0, l0 = time.time(), time.process_time(), os.getloadavg()
    out = rounded(calibrate(rows, n_tables=200))
    out["made"] = made("calibrate(load_results('data/study-digits/results.json'), n_tables=200)", t0, c0, l0)
    out["made"]["spreads"] = "each usable cell's own seed sd in data/study-digits/results.json, drawn as Student t with 3 degrees of freedom"
    open("data/study-digits-calibration.json", "w").write(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print("calibration written")
