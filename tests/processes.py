"""Processes seen through /proc, for the tests that kill workers and their parents (test_study_runs, test_study_workers)."""
from __future__ import annotations

import os
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
