"""A fake study run for tests/test_study_workers.py: as cheap as a function call (it imports nothing heavy), and told by
its plan what each of its tries does: finish, end its process (os._exit or SIGKILL), or hit a fake CUDA error that
poisons its worker, as a real one does (every later run in that process fails too)."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

_poisoned = False  # set by a fake CUDA error: from then on every run in this process fails


def run(key, log: str, plan: list[str], pause: float) -> tuple[str, bool]:
    "(value, replace), as the study's `_work` answers; `plan[t]` says what try t + 1 of this run does."
    global _poisoned
    with open(log, "a") as f: f.write(f"{key} {os.getpid()}\n")
    tries = sum(line.split()[0] == str(key) for line in Path(log).read_text().splitlines())
    time.sleep(pause)
    act = plan[tries - 1] if tries <= len(plan) else "ok"
    if act == "exit": os._exit(3)
    if act == "sigkill": os.kill(os.getpid(), signal.SIGKILL)
    if act == "poison": _poisoned = True
    if _poisoned: return f"failed {key}: CUDA error: an illegal memory access was encountered", True
    return f"ok {key}", False


def env(name: str) -> tuple[str | None, bool]:
    "(this worker's value of the environment variable `name`, False)."
    return os.environ.get(name), False


def patient(key, flag: str, wait_s: float) -> tuple[str, bool]:
    "A run that takes `wait_s` seconds unless SIGTERM arrives: then, as pretrain does, it saves (writes `flag`) and stops."
    def saved(signum, frame):
        Path(flag).write_text(f"saved {key}")
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, saved)
    time.sleep(wait_s)
    return f"ok {key}", False
