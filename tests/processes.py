"""Processes seen through /proc, for the tests that kill workers and their parents (test_study_runs, test_study_workers)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def children(pid: int) -> list[int]:
    "The process ids whose parent is `pid`."
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try: stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError: continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid: out.append(int(entry))
    return out


def alive(pid: int) -> bool:
    "Whether `pid` is a process that has not ended (a zombie counts as ended)."
    try: state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError: return False
    return state != "Z"


_HOLD = ("import sys, time\nfrom ctl_explore.run_folders import run_lock\n"
         "with run_lock(sys.argv[1]):\n    print('held', flush=True); time.sleep(120)")


def hold_run_lock(run: Path, env: dict) -> subprocess.Popen:
    "A second Python process that holds `run`'s writer lock for 120 s; returned once it says it holds it (kill it when done)."
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(run)], stdout=subprocess.PIPE, text=True, env=env)
    line = holder.stdout.readline().strip()
    if line != "held":
        holder.kill(); holder.wait()
        raise AssertionError(f"the lock-holding process did not take the lock (it printed {line!r})")
    return holder
