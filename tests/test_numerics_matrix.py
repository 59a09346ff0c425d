"""scripts/numerics_matrix.py: the table it keeps, what it calls a change of outcome, and its refusals (issue 39).

The matrix itself runs every lesson under five settings (minutes); CI runs three lessons under one of them (.ci/run).
These tests check the script's judgement on fabricated records, in-process."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("numerics_matrix", ROOT / "scripts" / "numerics_matrix.py")
nm = importlib.util.module_from_spec(spec)
spec.loader.exec_module(nm)


def record(outcomes: dict[str, dict[str, bool]], tests: dict[str, dict[str, str]] | None = None) -> dict:
    "A matrix record with these notebook outcomes ({setting: {notebook: passed}}) and test outcomes."
    settings = {}
    for s, nbs in outcomes.items():
        settings[s] = {"info": {"cpu_capability": "X"}, "wall_s": 1,
                       "notebooks": {n: {"passed": ok, "seconds": 1.0, "error": "" if ok else "AssertionError: x < 0.01"} for n, ok in nbs.items()}}
    for s, ts in (tests or {}).items():
        settings.setdefault(s, {"info": {}, "wall_s": 1})["tests"] = {t: {"outcome": o, "seconds": 0.1, "error": ""} for t, o in ts.items()}
    return {"machine": {"cpu": "test CPU", "cores": 2, "torch": "0"}, "date": "today", "command": "x", "settings": settings}


def test_a_check_that_fails_under_one_setting_only_is_reported_with_its_error():
    r = record({"native": {"07.ipynb": True, "90.ipynb": True}, "mkl-compatible": {"07.ipynb": True, "90.ipynb": False}})
    assert nm.changed(r, "notebooks") == {"90.ipynb": {"native": "passed", "mkl-compatible": "failed"}}
    md = nm.markdown(r)
    assert "| 90.ipynb | pass (1 s) | **FAIL** (1 s) |" in md and "x < 0.01" in md and "07.ipynb: " not in md.split("changed outcome")[-1]


def test_a_check_that_fails_everywhere_counts_too_and_all_passing_says_so():
    assert nm.changed(record({"native": {"a": False}, "avx2": {"a": False}}), "notebooks") == {"a": {"native": "failed", "avx2": "failed"}}
    clean = record({"native": {"a": True}, "avx2": {"a": True}}, {"native": {"t::x": "passed"}, "avx2": {"t::x": "passed"}})
    assert nm.changed(clean, "notebooks") == {} and nm.changed(clean, "tests") == {}
    assert "None: every check passed under every setting." in nm.markdown(clean)
    flaky = record({}, {"native": {"t::x": "passed"}, "default": {"t::x": "failed"}})
    assert nm.changed(flaky, "tests") == {"t::x": {"native": "passed", "default": "failed"}}


def test_every_setting_names_only_kernel_and_thread_variables():
    assert {"native", "avx2", "default", "mkl-compatible", "threads2"} <= set(nm.SETTINGS)
    assert nm.SETTINGS["native"] == {} and nm.SETTINGS["default"]["ATEN_CPU_CAPABILITY"] == "default"
    assert all(set(env) <= set(nm.KERNEL_VARS) for env in nm.SETTINGS.values())
    assert all((ROOT / t).is_file() for t in nm.NUMERIC_TESTS)


@pytest.mark.parametrize("argv, says", [(["--settings", "avx9"], "unknown setting(s) avx9"),
                                        (["--notebooks", "nbs/nope.ipynb"], "no such notebook")])
def test_bad_options_get_one_sentence(argv, says, capsys):
    with pytest.raises(SystemExit) as e:
        nm.main(argv)
    assert e.value.code == 2 and says in capsys.readouterr().err
