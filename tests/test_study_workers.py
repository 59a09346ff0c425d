"""A study's worker processes (appendix 27): one broken worker is one bad run. A worker that dies (os._exit, SIGKILL) or
whose run hits a CUDA error is replaced and that run tried once more, then recorded as failed; every other run finishes.
Run on the CPU with a fake run function (tests/study_fakes.py) so that each test takes a few seconds. Also: workers whose
parent is killed while they start die at once, and a failed run's message reaches the terminal without escape codes."""
from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import torch

import ctl_explore.study.workers as study_workers
from ctl_explore.study.workers import cuda_error, printable, WorkerPool

HERE = Path(__file__).parent
FAKE = "study_fakes:run"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(HERE.parent), str(HERE), os.environ.get("PYTHONPATH", "")])}


@pytest.fixture(autouse=True)
def _fakes_importable(monkeypatch):
    "Spawned workers get this process's sys.path: the fake run's module must be on it."
    monkeypatch.syspath_prepend(str(HERE))


def _run(pool: WorkerPool, plans: dict, tmp_path: Path, pauses: dict | None = None) -> tuple[dict, Counter]:
    log = tmp_path / "tries.log"
    log.touch()
    tasks = {k: (k, str(log), plan, (pauses or {}).get(k, 0.01)) for k, plan in plans.items()}
    out = {}
    try:
        for key, outcome in pool.run(tasks):
            assert key not in out, f"run {key} reported twice"
            out[key] = outcome
    finally:
        pool.close()
    tries = Counter(int(line.split()[0]) for line in log.read_text().splitlines())
    return out, tries


def test_a_dead_or_poisoned_worker_is_replaced_its_run_tried_once_more_and_no_other_run_fails(tmp_path):
    plans = {k: ["ok"] for k in range(12)}
    plans |= {2: ["exit", "ok"], 4: ["sigkill", "ok"], 5: ["sigkill", "sigkill"], 7: ["poison", "ok"], 9: ["poison", "poison"]}
    pool = WorkerPool(3, FAKE)
    out, tries = _run(pool, plans, tmp_path)
    assert sorted(out) == list(range(12))
    assert out[5] == ("lost", "its worker process ended abruptly (killed by SIGKILL), 2 time(s) running it")
    assert out[9] == ("done", "failed 9: CUDA error: an illegal memory access was encountered")  # recorded after its second try
    for k in set(range(12)) - {5, 9}: assert out[k] == ("done", f"ok {k}"), (k, out[k])  # the poisoned workers were replaced
    assert {k: n for k, n in tries.items() if n > 1} == {2: 2, 4: 2, 5: 2, 7: 2, 9: 2}  # each broken run tried once more, no other
    # Seven tries end their worker (2, 4, 5 twice, 7, 9 twice). A replacement is started only when a run is waiting for
    # that slot, so when the last of those tries comes with nothing left to run, no replacement follows: between 3 + 4 and
    # 3 + 7 starts, by the order the runs happen to finish in (8, 9 and 10 were each seen). The exact account comes from
    # the tries' log: each started worker ran at least one try, and each try that ended its worker was that worker's last.
    tried = [tuple(map(int, line.split())) for line in (tmp_path / "tries.log").read_text().splitlines()]  # (run, pid)
    runs_of = {}
    for key, pid in tried: runs_of.setdefault(pid, []).append(key)
    assert len(runs_of) == pool.started, (pool.started, runs_of)  # no worker started without running a try
    broken = [(2, 1), (4, 1), (5, 1), (5, 2), (7, 1), (9, 1), (9, 2)]  # (run, try) that exit, are killed or poison
    seen, ended = Counter(), []
    for key, pid in tried:
        seen[key] += 1
        if (key, seen[key]) in broken:
            assert runs_of[pid][-1] == key and runs_of[pid].count(key) == 1, (key, pid, runs_of[pid])  # its worker's last
            ended.append(pid)
    assert len(set(ended)) == 7  # each on a worker of its own
    assert 3 + 7 - 3 <= pool.started <= 3 + 7  # at most the three slots' last tries go unreplaced
    assert pool.pids() == []


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_workers_killed_and_poisoned_at_random_moments_fail_only_their_runs(tmp_path, seed):
    rng = random.Random(seed)
    kinds = [["ok"]] * 5 + [["exit", "ok"], ["poison", "ok"], ["exit", "exit"], ["poison", "poison"], ["sigkill", "ok"]]
    plans = {k: rng.choice(kinds) for k in range(12)}
    pauses = {k: rng.uniform(0, 0.05) for k in plans}
    pool = WorkerPool(3, FAKE)
    kills, stop = [], threading.Event()

    def killer():  # SIGKILL from outside, at random moments, to whichever worker is running then
        while not stop.wait(rng.uniform(0.2, 0.5)) and len(kills) < 2:
            pids = pool.pids()
            if pids:
                pid = rng.choice(pids)
                with contextlib.suppress(ProcessLookupError): os.kill(pid, signal.SIGKILL); kills.append(pid)
    t = threading.Thread(target=killer)
    t.start()
    try: out, tries = _run(pool, plans, tmp_path, pauses)
    finally:
        stop.set(); t.join()
    assert sorted(out) == sorted(plans)  # every run answered, once
    for k, (kind, value) in out.items():
        if plans[k] == ["exit", "exit"]: assert kind == "lost", (k, out[k])
        elif kind == "done" and plans[k] != ["poison", "poison"]: assert value == f"ok {k}", (k, out[k], plans[k])  # never failed by another
        elif kind == "done": assert value in (f"ok {k}", f"failed {k}: CUDA error: an illegal memory access was encountered")
        else: assert kind == "lost", (k, out[k])
    lost_to_outsider = [k for k, (kind, _) in out.items() if kind == "lost" and plans[k] != ["exit", "exit"]]
    assert len(lost_to_outsider) <= len(kills)  # a run is lost only if it died on each of its tries
    assert all(tries[k] <= 2 for k in plans)  # a run is tried at most twice


def test_a_run_that_raises_in_its_worker_is_that_run_only(tmp_path):
    pool = WorkerPool(2, "study_fakes:no_such_function")
    out, _ = _run(pool, {0: ["ok"], 1: ["ok"]}, tmp_path)
    assert set(out) == {0, 1} and all(kind == "lost" for kind, _ in out.values())  # a worker that cannot start fails each try
    pool = WorkerPool(1, "os.path:join")  # join(0, log, ...) raises TypeError in the worker
    out, _ = _run(pool, {0: ["ok"], 1: ["ok"]}, tmp_path)
    assert [kind for kind, _ in out.values()] == ["error", "error"] and "TypeError" in out[0][1]


def test_the_pool_refuses_bad_sizes():
    with pytest.raises(ValueError, match="n must be an integer >= 1, got 0"): WorkerPool(0, FAKE)
    with pytest.raises(ValueError, match="tries must be an integer >= 1, got True"): WorkerPool(1, FAKE, tries=True)


def test_a_cuda_error_in_a_run_asks_for_a_new_worker(tmp_path, monkeypatch):
    "The real `_work`: a run that hits a CUDA error becomes a failed row, and the worker says it must be replaced."
    from ctl_explore.train import PretrainConfig
    def broken(config, run_dir, threads, stretch):
        try: raise RuntimeError("CUDA error: an illegal memory access was encountered")
        except RuntimeError as e: raise ValueError("the step failed") from e
    monkeypatch.setattr(study_workers, "_train", broken)
    monkeypatch.setattr(study_workers, "_cuda_failed", False)
    before = torch.get_num_threads()
    try:
        config = PretrainConfig(width=4, epochs=1, device="cpu")
        (row, refusal), replace = study_workers._work(config.to_dict(), str(tmp_path / "run"), {})
    finally: torch.set_num_threads(before)
    assert replace and refusal is None and row["failed"] == "ValueError: the step failed"
    monkeypatch.setattr(study_workers, "_train", lambda *a: (_ for _ in ()).throw(ValueError("diverged")))
    monkeypatch.setattr(study_workers, "_cuda_failed", False)
    try: (row, _), replace = study_workers._work(config.to_dict(), str(tmp_path / "run2"), {})
    finally: torch.set_num_threads(before)
    assert not replace and row["failed"] == "ValueError: diverged"


@pytest.mark.parametrize("error, is_cuda", [
    (RuntimeError("CUDA error: device-side assert triggered"), True),
    (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), True),
    (RuntimeError("cuDNN error: CUDNN_STATUS_INTERNAL_ERROR"), True),
    (RuntimeError("NCCL error in: ProcessGroupNCCL.cpp"), True),
    (ValueError("training diverged at epoch 3"), False),
    (RuntimeError("DefaultCPUAllocator: can't allocate memory"), False),
    (OSError(28, "No space left on device"), False),
])
def test_cuda_errors_are_told_apart(error, is_cuda):
    assert cuda_error(error) is is_cuda
    wrapped = KeyError("x")
    wrapped.__cause__ = error
    assert cuda_error(wrapped) is is_cuda  # raised from a CUDA error
    if hasattr(torch, "AcceleratorError"): assert cuda_error(torch.AcceleratorError("anything"))


def test_a_failed_runs_message_reaches_the_terminal_without_escape_codes(tmp_path, monkeypatch, capsys):
    hostile = "\x1b[2J\x1b]0;owned\x07bad\rrun\nsecond line\u202eevil\x9b31m"
    shown = printable(hostile)
    assert shown.isprintable() and "\\x1b[2J" in shown and "\\u202e" in shown and "\\r" in shown
    assert printable("plain τ=0.2 sentence") == "plain τ=0.2 sentence"
    from ctl_explore.train import PretrainConfig
    monkeypatch.setattr(study_workers, "_train", lambda *a: (_ for _ in ()).throw(ValueError(hostile.replace("\n", " "))))
    row, _ = study_workers._attempt(PretrainConfig(width=4, epochs=1, device="cpu"), tmp_path / "run", {}, None, (0, None))
    assert row["failed"].isprintable() and "\\x1b" in row["failed"]
    from ctl_explore.cli import _failures
    line = _failures([{"run": "a\x1b[31m", "failed": hostile}, {"run": "b"}])  # a row read back from a hacked result.json
    assert line.isprintable() and "1 of 2 runs failed" in line


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the process tree from /proc")
def test_workers_whose_parent_is_killed_while_they_start_exit_at_once(tmp_path):
    "Killed while its workers import torch (seconds), the parent leaves none of them running a moment later."
    code = textwrap.dedent("""
        from ctl_explore.study.workers import WorkerPool
        pool = WorkerPool(2, "ctl_explore.study.workers:_work")
        print("ready", flush=True)
        list(pool.run({0: ({}, "x", {}), 1: ({}, "y", {})}))
    """)
    parent = subprocess.Popen([sys.executable, "-c", code], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert parent.stdout.readline().strip() == "ready", parent.stderr.read()[-2000:]
    deadline, workers = time.time() + 30, []
    while len(workers) < 2 and time.time() < deadline:
        workers = [p for p in _children(parent.pid) if "spawn_main" in _cmdline(p)]
        time.sleep(0.02)
    assert len(workers) == 2
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    gone_by = time.time() + 1.0  # importing torch takes longer than this
    while any(_alive(p) for p in workers) and time.time() < gone_by: time.sleep(0.02)
    left = [p for p in workers if _alive(p)]
    for p in left: os.kill(p, signal.SIGKILL)
    assert left == [], "workers outlived their parent by a second"


def _cmdline(pid: int) -> str:
    try: return Path(f"/proc/{pid}/cmdline").read_text()
    except OSError: return ""


from processes import alive as _alive, children as _children  # tests/processes.py


def test_each_worker_runs_on_its_own_listed_gpu(tmp_path, monkeypatch):
    "A worker's CUDA_VISIBLE_DEVICES is its slot's entry, and a replacement worker takes the same one."
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    pool = WorkerPool(2, "study_fakes:env", devices=["GPU-aa11", "5"])
    try:
        seen = {v for _, (kind, v) in pool.run({k: ("CUDA_VISIBLE_DEVICES",) for k in range(4)})}
    finally: pool.close()
    assert seen == {"GPU-aa11", "5"}


def test_sigterm_gives_busy_workers_time_to_save(tmp_path):
    "A study stopped by SIGTERM passes it on to its workers and waits for them to save, instead of killing them."
    pool = WorkerPool(2, "study_fakes:patient")
    runs = pool.run({0: (0, str(tmp_path / "flag0"), 0.0), 1: (1, str(tmp_path / "flag1"), 60.0)})
    assert next(runs) == (0, ("done", "ok 0"))
    time.sleep(0.3)  # run 1 is under way in the other worker
    start = time.monotonic()
    pool.close(term_s=20)
    assert (tmp_path / "flag1").read_text() == "saved 1" and time.monotonic() - start < 15 and pool.pids() == []


# ---------------------------------------------------------------- issue 40 item 7: a per-run timeout for a hung worker
def test_a_run_past_the_timeout_has_its_worker_killed_and_is_reported_once(tmp_path):
    "A run that never answers (a hung GPU) is killed after timeout_s, reported as ('timeout', one sentence), not tried again; the other runs finish."
    pool = WorkerPool(2, "study_fakes:patient", timeout_s=3)
    start, out = time.monotonic(), {}
    try:
        for key, outcome in pool.run({0: (0, str(tmp_path / "flag0"), 0.0), 1: (1, str(tmp_path / "flag1"), 120.0),
                                      2: (2, str(tmp_path / "flag2"), 0.0)}):
            assert key not in out
            out[key] = outcome
        assert time.monotonic() - start < 30  # long before run 1 would have ended by itself
    finally: pool.close()
    assert out[0] == ("done", "ok 0") and out[2] == ("done", "ok 2")
    kind, sentence = out[1]
    assert kind == "timeout" and sentence.startswith("it ran longer than the limit of 3 s per run, so its worker was killed")
    assert sentence.count(". ") == 0 and "\n" not in sentence
    assert not (tmp_path / "flag1").exists()  # killed outright: a hung process answers no SIGTERM


def test_timeout_s_is_checked():
    for bad in (0, -1, float("inf"), float("nan"), True, "60"):
        with pytest.raises(ValueError, match=r"timeout_s must be a number of seconds > 0, or None for no limit, got"):
            WorkerPool(1, FAKE, timeout_s=bad)


def test_default_run_timeout_none_on_the_cpu_generous_on_cuda():
    "No limit on the CPU; on CUDA the plan's longest schedule and its probe at 500 images/s, at least an hour."
    from ctl_explore.study.plan import get_preset
    from ctl_explore.study.workers import RUN_FLOOR_IMAGES_PER_S, RUN_TIMEOUT_MIN_S, default_run_timeout
    assert default_run_timeout(get_preset("digits"), 1437) is None
    paper = get_preset("cifar10-paper")
    assert default_run_timeout(paper, 50_000) == (max(paper.base.epochs, paper.max_epochs or 0) + paper.linear_epochs) * 50_000 / RUN_FLOOR_IMAGES_PER_S
    assert default_run_timeout(paper, 50_000) >= 8 * 3600  # [WL21]'s 200 epochs take minutes on an H100: hours more than a healthy run
    assert default_run_timeout(paper, 10) == RUN_TIMEOUT_MIN_S
    assert default_run_timeout(get_preset("smoke").with_base(device="cuda"), 64) == RUN_TIMEOUT_MIN_S


def test_run_study_passes_its_timeout_to_the_pool(tmp_path, monkeypatch):
    "run_study gives the pool the default rule's timeout, the one asked, or none for 0; a bad value is one sentence."
    import ctl_explore.study.runner as runner
    seen = []
    class Pool:
        def __init__(self, n, target, devices=None, timeout_s=None): seen.append(timeout_s)
        def run(self, tasks): raise KeyboardInterrupt  # stop at once: only the pool's settings are looked at
        def close(self, **kw): pass
    monkeypatch.setattr(runner, "WorkerPool", Pool)
    monkeypatch.setattr(runner, "default_run_timeout", lambda p, n_train: 1234.0)
    monkeypatch.setattr(runner, "_capped_workers", lambda p, asked, pending: 2)  # a pool even on a one-core machine
    for asked, expected in ((None, 1234.0), (60, 60), (0, None)):
        with pytest.raises(KeyboardInterrupt):
            runner.run_study("smoke", tmp_path / f"s{asked}", quiet=True, workers=2, run_timeout_s=asked)
    assert seen == [1234.0, 60, None]
    with pytest.raises(ValueError, match=r"^run_timeout_s must be a number of seconds >= 0 \(0: no limit\) or None \(the default rule\), got -5$"):
        runner.run_study("smoke", tmp_path / "bad", run_timeout_s=-5)


def test_the_study_command_takes_a_run_timeout():
    from ctl_explore.cli import build_parser
    assert build_parser().parse_args(["study", "--preset", "smoke", "--run-timeout", "90"]).run_timeout == 90.0
    assert build_parser().parse_args(["study", "--preset", "smoke"]).run_timeout is None  # the default rule
