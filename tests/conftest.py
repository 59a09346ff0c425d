"""Shared pytest configuration: Hypothesis profiles, and the suite's size.

README's test command runs the suite on two pytest-xdist workers (`-n 2 --dist loadfile`, see below). The tests
marked `slow` (a browser, a site build, several processes, compiled kernels, whole training runs: each over 3.5 s) are
most of its time, so `pytest -n 2 -m "not slow"` is the quick inner loop. Where the time goes, in CPU seconds per file
(`CTL_TEST_CPU`, below): benchmarks/results/ci_time.md.

Pick a profile with the environment variable ``HYPOTHESIS_PROFILE``:

* ``dev`` (the default): 50 examples per property, no deadline (torch's first calls are slow);
* ``ci`` (the default when ``CI`` is set): the same, but derandomised so that a CI failure reproduces;
* ``thorough``: 1000 examples per property, for a one-off deep run.
"""
from __future__ import annotations

import os
import sys

import pytest
import torch
from hypothesis import HealthCheck, settings

# The tests only build tiny tensors: intra-op threads buy nothing there, and on a small machine shared with other
# jobs (benchmarks, notebooks) their spin-waits made single ops ~100x slower. One thread keeps the suite fast.
torch.set_num_threads(1)

# nbformat (imported by the notebook and site tests, and under plotly.io) imports jsonschema, which imports
# rfc3987-syntax for its optional check of the `iri` format: that package builds three Earley parsers on import, about
# 3 CPU-s in each pytest process. No test validates that format, so the import is made to fail and jsonschema goes on
# without it (ctl_explore.site does the same in the processes of a site build).
if "jsonschema" not in sys.modules: sys.modules.setdefault("rfc3987_syntax", None)

_common = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=50, **_common)
settings.register_profile("ci", max_examples=50, derandomize=True, print_blob=True, **_common)
settings.register_profile("thorough", max_examples=1000, **_common)

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev")
settings.load_profile(PROFILE)


def pytest_report_header(config):
    return (f"hypothesis profile: {PROFILE} (max_examples={settings.default.max_examples}); "
            f"torch threads: {torch.get_num_threads()}")


# README's test command runs the suite on two pytest-xdist workers with `--dist loadfile`: a work unit is a test
# file, so that a file's module fixtures (a browser, a kernel, a JupyterLab) are made once, on one worker.
# (`--dist loadgroup`, used before, groups by `xdist_group` marks through a test id that pytest 9 no longer lets xdist
# 3.8 change: every test became a unit of its own, spread over both workers, and each worker made every module fixture
# again, the site's build included.) The units go out heaviest first (HEAVY, by the wall seconds of the CI run measured in
# benchmarks/results/ci_time.md; every other file after them, in collection order), so that no long file starts last
# while the other worker idles. The site's three test files share one build of the site, which the controller starts
# in the background as soon as the workers have collected them (tests/browser_setup.py).
HEAVY = ("test_study.py", "test_grader.py", "test_train_distributed.py", "test_site_browser.py", "test_explorer_browser.py",
         "test_study_runs.py", "test_site_screens.py", "test_pretrain.py", "test_bench_gpu.py", "test_explorables.py",
         "test_cli.py", "test_run_folders.py", "test_compile_graph.py", "test_suppression.py", "test_train_compile.py",
         "test_gpu_ready.py", "test_losses.py", "test_checkpoint_cadence.py", "test_fast.py", "test_exercises_core.py",
         "test_hostile.py", "test_global_batchnorm.py", "test_study_workers.py", "test_gradients.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(HEAVY)}
    items.sort(key=lambda item: rank.get(item.path.name, len(HEAVY)))  # stable: each file's tests keep their order


def pytest_configure(config):
    # xdist would put the units in order of their number of tests; keep the order above (heaviest first)
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    "In the controller: once a worker has collected the site's tests, start building the site in the background."
    from browser_setup import SITE_FILES, start_site_build
    config = node.config
    if getattr(config, "_ctl_site_build_started", False):
        return
    if any(nodeid.split("::")[0].rsplit("/", 1)[-1] in SITE_FILES for nodeid in ids):
        config._ctl_site_build_started = True
        start_site_build(config._tmp_path_factory.getbasetemp())


# The suite leaves the checkout as it found it: tests write only to temporary folders, and benchmark results are
# written by the benchmark scripts when run on purpose. The controller (not an xdist worker) compares
# `git status --porcelain` before and after the session and fails the run, naming the paths, when it changed.
# CTL_ALLOW_DIRTY=1 turns the check off (e.g. while editing files during a run).
def _git_status(root) -> set[str] | None:
    import subprocess
    try:
        out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=root, capture_output=True,
                             text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return set(out.stdout.splitlines()) if out.returncode == 0 else None


def _is_controller(config) -> bool:
    return not hasattr(config, "workerinput")


def pytest_sessionstart(session):
    if _is_controller(session.config) and not os.environ.get("CTL_ALLOW_DIRTY"):
        session.config._ctl_git_before = _git_status(session.config.rootpath)


def pytest_sessionfinish(session, exitstatus):
    if getattr(session.config, "_ctl_site_build_started", False):
        from browser_setup import stop_site_build
        stop_site_build()
    before = getattr(session.config, "_ctl_git_before", None)
    if before is None: return
    after = _git_status(session.config.rootpath)
    if after is None: return
    dirtied = sorted(after - before)
    if dirtied:
        session.config._ctl_dirtied = dirtied
        if session.exitstatus == 0: session.exitstatus = 1


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    dirtied = getattr(config, "_ctl_dirtied", None)
    if dirtied:
        terminalreporter.write_line("The test run changed the checkout (tests must write only to temporary folders; "
                                    "set CTL_ALLOW_DIRTY=1 to skip this check): " + "; ".join(dirtied), red=True)


# CTL_TEST_CPU=FILE: each process (controller or xdist worker) appends one line per test to FILE.<worker> --
# nodeid, wall seconds, CPU seconds of the test's process and of the child processes it waited for, its start, and
# ok/failed (setup and teardown included, so a module fixture counts in its module's first or last test). On a machine shared with other
# jobs wall times swell; CPU seconds do not, and they are what benchmarks/results/ci_time.md compares.
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    target = os.environ.get("CTL_TEST_CPU")
    if not target:
        yield
        return
    import resource
    import time
    def cpu(who):
        r = resource.getrusage(who)
        return r.ru_utime + r.ru_stime
    w0, s0, c0 = time.monotonic(), cpu(resource.RUSAGE_SELF), cpu(resource.RUSAGE_CHILDREN)
    yield
    w1, s1, c1 = time.monotonic(), cpu(resource.RUSAGE_SELF), cpu(resource.RUSAGE_CHILDREN)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(f"{target}.{worker}", "a") as f:
        f.write(f"{item.nodeid}\t{w1 - w0:.3f}\t{s1 - s0:.3f}\t{c1 - c0:.3f}\t{w0:.3f}\t"
                f"{'failed' if item.nodeid in _FAILED else 'ok'}\n")


_FAILED: set = set()


def pytest_runtest_logreport(report):
    if report.failed and os.environ.get("CTL_TEST_CPU"):
        _FAILED.add(report.nodeid)
