"""Shared pytest configuration: Hypothesis profiles, and the suite's size.

The whole suite takes about ten minutes on 2 CPU cores (602 s measured with `--durations`); the tests marked `slow`
(a browser, a site build, several processes, compiled kernels, whole training runs: each over 3.5 s there) are most of
it, so `pytest -m "not slow"` is the quick inner loop: 1155 tests in 132 s on the same 2 cores (quiet).

Pick a profile with the environment variable ``HYPOTHESIS_PROFILE``:

* ``dev`` (the default): 50 examples per property, no deadline (torch's first calls are slow);
* ``ci`` (the default when ``CI`` is set): the same, but derandomised so that a CI failure reproduces;
* ``thorough``: 1000 examples per property, for a one-off deep run.
"""
from __future__ import annotations

import os

import torch
from hypothesis import HealthCheck, settings

# The tests only build tiny tensors: intra-op threads buy nothing there, and on a small machine shared with other
# jobs (benchmarks, notebooks) their spin-waits made single ops ~100x slower. One thread keeps the suite fast.
torch.set_num_threads(1)

_common = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=50, **_common)
settings.register_profile("ci", max_examples=50, derandomize=True, print_blob=True, **_common)
settings.register_profile("thorough", max_examples=1000, **_common)

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev")
settings.load_profile(PROFILE)


def pytest_report_header(config):
    return (f"hypothesis profile: {PROFILE} (max_examples={settings.default.max_examples}); "
            f"torch threads: {torch.get_num_threads()}")
