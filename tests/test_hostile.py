"""A hostile user (issue 32, item 7): rows edited and sealed again with `row_checksum`, users' files in an unmarked run
folder, symbolic links inside the site's folder, linear-eval beside a running pretrain or on a checkpoint that is not one,
absurd option values, and a full disk. Each case is one sentence naming what was wrong, or a fix, and nothing outside
the folder changes. Every test here failed on the code before these fixes."""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import pytest
from processes import hold_run_lock
import torch

from ctl_explore import run_folders
from ctl_explore.cli import main
from ctl_explore.run_folders import (RUN_MARKER, CheckpointError, RunBusyError, RunFolderError, run_lock, save_checkpoint,
                                     write_json_atomic)
from ctl_explore.study.plan import get_preset
from ctl_explore.study.rows import STUDY_MARKER, StudyError, load_results, row_checksum, saved_row, seal_row, write_results
from ctl_explore.study.runner import gather
from ctl_explore.train import PretrainConfig, load_checkpoint, pretrain

ROOT = Path(__file__).parents[1]
SHIPPED = json.loads((ROOT / "data" / "study-digits" / "results.json").read_text())
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
TINY = dict(width=4, out_dim=16, knn_k=20, batch_size=64)
TINY_ARGS = ["--width", "4", "--out-dim", "16", "--knn-k", "20", "--batch-size", "64", "--quiet", "--device", "cpu"]


@pytest.fixture(autouse=True)
def one_thread():
    "One CPU thread, as the runs of the course on a CPU use (two threads on two busy cores spin against each other)."
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def run_main(capsys, *args: str) -> tuple[int, str]:
    "`ctl-explore args` in this process: (exit status, stderr)."
    try: code = main(list(args))
    except SystemExit as e: code = e.code
    return code, capsys.readouterr().err


def _reseal(row: dict, **changes) -> dict:
    "A row edited and sealed again: its checksum matches the edit, so only the other checks can catch it."
    edited = {**row, **changes}
    return {**edited, "checksum": row_checksum(edited)}


def _run_folder(tmp_path: Path, row: dict) -> Path:
    "A run folder as a study leaves it for `row` (a shipped one): its sealed result.json beside a stand-in checkpoint it names by sha256."
    run = tmp_path / "runs" / row["run"]
    run.mkdir(parents=True)
    (run / "checkpoint.pt").write_bytes(b"stand-in checkpoint of " + row["run"].encode())
    digest = hashlib.sha256((run / "checkpoint.pt").read_bytes()).hexdigest()
    (run / "result.json").write_text(json.dumps(seal_row(row, dict(epoch=row["config"]["epochs"], sha256=digest))))
    return run


def _served(run: Path, row: dict):
    "(the row saved_row serves or None, the warnings' text)."
    probe = dict(linear_epochs=row["probe"]["epochs"], normalize=row["probe"]["normalize"], augment=row["probe"]["augment"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        served = saved_row(run, PretrainConfig.from_dict(row["config"]), probe=probe)
    return served, " ".join(str(w.message) for w in caught)


# ---------------------------------------------------------------- 1. rows re-sealed with row_checksum

ROW = SHIPPED[0]  # contrastive, τ 0.05, seed 0: a trajectory measured every eval_every epochs, a per-image record, its criteria
_LAST3 = ", ".join(str(p["epoch"]) for p in ROW["trajectory"][-3:])  # the three epochs a cut trajectory loses
RESEALED = {  # name: (the edit, what the sentence names)
    "accuracy beside another per-image record": (dict(linear_top1=0.9986), "linear_top1 is 0.998600, but its per-image record gives"),
    "a record shorter than the test set": (dict(probe_correct=ROW["probe_correct"][:-1]), "holds 358 test images, but n_test is 359"),
    "NaN in alignment_change": (dict(alignment_change=math.nan), "alignment_change must be a finite number, or null, got nan"),
    "NaN in the criteria": (dict(criteria={**ROW["criteria"], "window": math.nan}), "criteria.window is nan"),
    "infinity in a field of its own": (dict(note=math.inf), "note is inf"),
    "a trajectory cut short": (dict(trajectory=ROW["trajectory"][:-3]), f"trajectory lacks the measured epochs {_LAST3}"),
    "a string in the trajectory": (dict(trajectory=[{**p, "alignment": "0.1"} for p in ROW["trajectory"]]), "trajectory must be"),
    "a trajectory point with an extra key": (dict(trajectory=[{**p, "x": 1} for p in ROW["trajectory"]]), "trajectory must be"),
    "epochs out of order": (dict(trajectory=ROW["trajectory"][::-1]), "trajectory must be"),
    "another τ than its configuration": (dict(tau=0.5), "tau is 0.5, but its configuration says 0.05"),
    "a flag its numbers contradict": (dict(converged=not ROW["converged"]), "converged is"),
    "a fitted change its trajectory contradicts": (dict(alignment_change=0.5), "alignment_change is 0.5, but its trajectory and criteria give"),
    "a uniformity its last epoch contradicts": (dict(uniformity=ROW["uniformity"] + 0.5), "uniformity is"),
    "an alignment its positive similarity contradicts": (dict(alignment=ROW["alignment"] + 0.2), "alignment is"),
    "negatives out of order": (dict(top10_negatives=sorted(ROW["top10_negatives"])), "top10_negatives must be listed largest first"),
    "criteria of the wrong shape": (dict(criteria={"window": 0.25}), "criteria must be"),
    "a record of other symbols": (dict(probe_correct="2" * ROW["n_test"]), "probe_correct must be"),
}


@pytest.mark.parametrize("edit", RESEALED)
def test_a_resealed_row_that_disagrees_with_its_records_is_measured_again_never_served(tmp_path, edit):
    change, says = RESEALED[edit]
    run = _run_folder(tmp_path, ROW)
    assert _served(run, ROW)[0] is not None  # as the study sealed it: served
    (run / "result.json").write_text(json.dumps(_reseal(json.loads((run / "result.json").read_text()), **change)))
    served, message = _served(run, ROW)
    assert served is None, f"served: {edit}"
    assert says in message and str(run / "result.json") in message and f"measuring run {ROW['run']} again" in message, message


@pytest.mark.parametrize("edit", RESEALED)
def test_a_results_json_row_that_disagrees_with_its_records_is_refused_naming_run_and_field(tmp_path, edit):
    change, says = RESEALED[edit]
    rows = json.loads(json.dumps(SHIPPED))
    rows[0].update(change)
    (tmp_path / "results.json").write_text(json.dumps(rows))  # no checksum beside it: the rules are the only check
    with pytest.raises(StudyError) as info: load_results(tmp_path / "results.json")
    assert f"its row {ROW['run']} is wrong" in str(info.value) and says in str(info.value), str(info.value)


def test_results_json_never_holds_nan_and_a_failed_write_leaves_the_old_file(tmp_path):
    write_results(SHIPPED[:2], tmp_path)
    before = (tmp_path / "results.json").read_bytes()
    for change, where in ((dict(alignment_change=math.nan), "alignment_change"), (dict(criteria={**ROW["criteria"], "knn_change": math.inf}), "criteria.knn_change")):
        with pytest.raises(StudyError) as info: write_results([{**SHIPPED[0], **change}, SHIPPED[1]], tmp_path)
        assert f"run {ROW['run']!r}" in str(info.value) and where in str(info.value)
        assert (tmp_path / "results.json").read_bytes() == before
    json.loads(before, parse_constant=lambda c: pytest.fail(f"results.json holds {c}"))  # strict JSON, as any other reader takes it
    with pytest.raises(ValueError, match=r"config.json would hold nan at lr_drops\[1\], which JSON cannot hold"):
        write_json_atomic(tmp_path / "config.json", {"lr_drops": [0.8, math.nan]})
    assert not (tmp_path / "config.json").exists()


def test_gather_for_the_report_counts_a_resealed_row_as_missing_instead_of_failing(tmp_path):
    "--report gathers the rows through the same checks: a trajectory cut short (IndexError in the figures) or a string in it (TypeError) is a missing run."
    out = tmp_path / "study"
    for r in SHIPPED: _run_folder(out, r)
    (out / STUDY_MARKER).write_text(json.dumps(dict(written_by="ctl_explore study", format=1, preset="digits")))
    for i, change in ((0, dict(trajectory=SHIPPED[0]["trajectory"][:-1])), (1, dict(trajectory=[{**p, "knn_accuracy": "x"} for p in SHIPPED[1]["trajectory"]]))):
        path = out / "runs" / SHIPPED[i]["run"] / "result.json"
        path.write_text(json.dumps(_reseal(json.loads(path.read_text()), **change)))
    with pytest.warns(UserWarning, match="counting run .* as missing"):
        found, missing = gather(get_preset("digits"), out)
    assert missing == [SHIPPED[0]["run"], SHIPPED[1]["run"]] and len(found) == len(SHIPPED) - 2


# ---------------------------------------------------------------- 2. a user's files in an unmarked --out

USERS_FILES = [".lock", ".soft_lock", "checkpoint.pt.tmp", "config.json.tmp", "metrics.jsonl.123.abc.tmp", "result.json.4000001.x_y.tmp",
               f"{RUN_MARKER}.12.ab.tmp"]


@pytest.mark.parametrize("name", USERS_FILES)
def test_an_unmarked_folder_holding_a_lock_or_temporary_file_is_refused_never_cleaned(tmp_path, capsys, name):
    run = tmp_path / "run"
    run.mkdir()
    (run / name).write_text("the user's own\n")
    code, err = run_main(capsys, "pretrain", "--out", str(run), "--epochs", "1", *TINY_ARGS)
    assert code == 1 and f"{run} holds {name}, which pretrain did not write" in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1
    assert [p.name for p in run.iterdir()] == [name] and (run / name).read_text() == "the user's own\n"


def test_run_lock_neither_overwrites_a_users_lock_file_nor_deletes_temporary_files_in_an_unmarked_folder(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / ".lock").write_text("my notes on locks\n")
    with pytest.raises(RunFolderError, match=r"\.lock is not a lock file of ctl_explore's"):
        with run_lock(mine): pass
    assert (mine / ".lock").read_text() == "my notes on locks\n"
    other = tmp_path / "other"
    other.mkdir()
    (other / "checkpoint.pt.tmp").write_text("mine")  # the name older versions of pretrain wrote, pid-less
    with run_lock(other): pass
    assert (other / "checkpoint.pt.tmp").read_text() == "mine"
    (other / "result.json").write_text("mine")
    with pytest.raises(RunFolderError, match="carries no .ctl_explore_run marker"): run_folders.remove_stale_measurements(other)
    assert (other / "result.json").read_text() == "mine"


# ---------------------------------------------------------------- 3. the site's --out: never through a symbolic link

@pytest.mark.parametrize("link", ["assets", "assets/mathjax", "index.html", "assets/site.css", ".ctl-explore-site"])
def test_a_marked_site_folder_with_a_link_inside_is_refused_and_nothing_outside_changes(tmp_path, link):
    from ctl_explore.site import SiteError, _assets, claim_folder
    outside = tmp_path / "outside"
    (outside / "mathjax").mkdir(parents=True)
    (outside / "mathjax" / "keep.js").write_text("keep")
    (outside / "keep.txt").write_text("keep")
    site = claim_folder(tmp_path / "_site")  # built once: marked
    if link != "assets": (site / "assets").mkdir()
    path = site / link
    if path.exists(): path.unlink()
    path.symlink_to(outside if link in ("assets", "assets/mathjax") else outside / "keep.txt")
    with pytest.raises(SiteError, match="symbolic link"):
        claim_folder(site)
        _assets(site)  # what a build does next, were the folder taken
    assert (outside / "mathjax" / "keep.js").read_text() == "keep" and (outside / "keep.txt").read_text() == "keep"
    assert sorted(p.name for p in outside.rglob("*")) == ["keep.js", "keep.txt", "mathjax"]


def test_site_writes_replace_a_link_made_during_the_build_never_follow_it(tmp_path):
    from ctl_explore.site import SiteError, _write, claim_folder
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    site = claim_folder(tmp_path / "_site")
    (site / "index.html").symlink_to(outside)
    _write(site, site / "index.html", "<html></html>")
    assert outside.read_text() == "keep" and not (site / "index.html").is_symlink()
    (site / "assets").symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(SiteError, match="assets is a symbolic link"): _write(site, site / "assets" / "site.css", "body {}")
    assert not (tmp_path / "site.css").exists()


# ---------------------------------------------------------------- 4. linear-eval

@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    "A finished 1-epoch run, to copy from."
    run = tmp_path_factory.mktemp("finished") / "run"
    pretrain(PretrainConfig(**TINY, epochs=1, device="cpu"), run, quiet=True)
    return run


def _copy(finished: Path, to: Path) -> Path:
    shutil.copytree(finished, to, ignore=shutil.ignore_patterns(".lock"))
    return to


@pytest.mark.slow  # a second Python process that imports torch
def test_linear_eval_refuses_a_run_that_pretrain_is_still_training(finished, tmp_path, capsys):
    run = _copy(finished, tmp_path / "run")
    holder = hold_run_lock(run, ENV)
    try:
        from ctl_explore.linear_eval import LinearEvalConfig, linear_eval
        with pytest.raises(RunBusyError, match=f"is being written by process {holder.pid}.*linear-eval measures a run's final checkpoint"):
            linear_eval(run, LinearEvalConfig(epochs=1))
        code, err = run_main(capsys, "linear-eval", str(run), "--epochs", "1")
        assert code == 1 and f"process {holder.pid}" in err and "Traceback" not in err
        assert not (run / "linear_eval.json").exists()
    finally:
        holder.kill()
        holder.wait()


def test_linear_eval_records_the_checkpoint_it_measured(finished, tmp_path):
    from ctl_explore.linear_eval import LinearEvalConfig, linear_eval
    run = _copy(finished, tmp_path / "run")
    result = linear_eval(run, LinearEvalConfig(epochs=1))
    assert result["checkpoint"] == dict(epoch=1, sha256=hashlib.sha256((run / "checkpoint.pt").read_bytes()).hexdigest())
    assert json.loads((run / "linear_eval.json").read_text())["checkpoint"] == result["checkpoint"] and result["precision"] == "fp32"


def test_linear_eval_of_a_checkpoint_of_another_width_is_one_sentence(finished, tmp_path, capsys):
    run = _copy(finished, tmp_path / "run")
    state = load_checkpoint(run / "checkpoint.pt")
    save_checkpoint(run / "checkpoint.pt", {**state, "config": {**state["config"], "width": 8}})  # passes every check but the weights
    (run / "config.json").write_text(json.dumps({**json.loads((run / "config.json").read_text()), "width": 8}))  # (and the identity check)
    code, err = run_main(capsys, "linear-eval", str(run), "--epochs", "1")
    assert code == 1 and "holds weights that do not fit the configuration saved with it" in err and "size mismatch" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and not (run / "linear_eval.json").exists()


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_linear_eval_on_a_pipe_or_device_named_checkpoint_pt_is_refused_at_once(finished, tmp_path, capsys, kind):
    run = _copy(finished, tmp_path / "run")
    (run / "checkpoint.pt").unlink()
    if kind == "fifo": os.mkfifo(run / "checkpoint.pt")
    else: (run / "checkpoint.pt").symlink_to(os.devnull)  # a device (/dev/zero would be read forever)
    done = {}
    worker = threading.Thread(target=lambda: done.update(result=run_main(capsys, "linear-eval", str(run), "--epochs", "1")), daemon=True)
    worker.start()
    worker.join(20)
    if worker.is_alive() and kind == "fifo":  # today's code waits for a writer: give it one, so that the test ends
        fd = os.open(run / "checkpoint.pt", os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        worker.join(20)
        pytest.fail("linear-eval waited on the named pipe")
    assert "result" in done, "linear-eval did not return"
    code, err = done["result"]
    assert code == 1 and "checkpoint.pt cannot be read" in err and "not a regular file" in err, err


def test_the_probe_under_bf16_autocast_stays_within_its_stated_tolerance():
    """bf16 autocast of the frozen encoder (the probe's default on CUDA) keeps every image's features within AUTOCAST_COSINE
    of float32's and a converged probe's accuracy within AUTOCAST_TOLERANCE; measured here with the CPU's bf16 autocast."""
    import torch.nn.functional as F
    from ctl_explore.data import TwoViewAugment, load_dataset
    from ctl_explore.linear_eval import AUTOCAST_COSINE, AUTOCAST_TOLERANCE, LinearEvalConfig, linear_probe, probe_autocast
    from ctl_explore.train import build_model, embed
    torch.manual_seed(0)
    train, test = load_dataset("digits", train=True), load_dataset("digits", train=False)
    model = build_model(PretrainConfig(width=4, device="cpu"), train.images.shape[1], torch.device("cpu"))
    augment = TwoViewAugment("digits")
    feats = {autocast: [embed(model, d.images, augment, features=True, autocast=autocast).float() for d in (train, test)]
             for autocast in (False, True)}
    assert feats[True][0].dtype == torch.float32 and not torch.equal(feats[True][1], feats[False][1])  # autocast did run in bf16
    assert F.cosine_similarity(feats[True][1], feats[False][1], dim=1).min() >= AUTOCAST_COSINE
    top1 = {a: linear_probe(f[0], train.labels, f[1], test.labels, LinearEvalConfig(epochs=100))["top1"] for a, f in feats.items()}
    assert top1[False] > 0.5 and abs(top1[True] - top1[False]) <= AUTOCAST_TOLERANCE, top1
    assert probe_autocast(LinearEvalConfig(), "cuda") and not probe_autocast(LinearEvalConfig(), "cpu")
    assert probe_autocast(LinearEvalConfig(precision="bf16"), "cpu") and not probe_autocast(LinearEvalConfig(precision="fp32"), "cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_probe_on_cuda_under_autocast_is_within_tolerance_of_float32(finished, tmp_path):
    from ctl_explore.linear_eval import AUTOCAST_TOLERANCE, LinearEvalConfig, linear_eval
    run = _copy(finished, tmp_path / "run")
    results = {p: linear_eval(run, LinearEvalConfig(precision=p), device="cuda", write=False) for p in ("fp32", "auto")}
    assert results["auto"]["precision"] == "bf16"
    assert abs(results["auto"]["top1"] - results["fp32"]["top1"]) <= AUTOCAST_TOLERANCE


# ---------------------------------------------------------------- 5. absurd option values: one sentence naming the option

@pytest.mark.parametrize("command, option, value, says", [
    ("pretrain", "--epochs", str(10**12), "epochs must be an integer in [1, 10000]"),
    ("linear-eval", "--epochs", str(10**15), "epochs must be an integer in [1, 10000]"),
    ("linear-eval", "--lr", "1e300", "lr must lie in (0, 1e+30]"),
    ("linear-eval", "--weight-decay", "1e300", "weight_decay must lie in [0, 1e+30]"),
    ("linear-eval", "--seed", str(10**23), "seed must be an integer in [-9223372036854775808, 9223372036854775806]"),
    ("linear-eval", "--batch-size", str(10**15), "batch_size must be an integer in [1, 1000000]"),
    ("linear-eval", "--precision", "fp16", "precision must be one of"),
])
def test_absurd_values_are_refused_up_front_naming_the_option(tmp_path, capsys, monkeypatch, command, option, value, says):
    import ctl_explore.linear_eval, ctl_explore.train
    def started(*args, **kwargs): raise AssertionError(f"{command} started with {option} {value}: it would run until killed")
    monkeypatch.setattr(ctl_explore.train, "pretrain", started)
    monkeypatch.setattr(ctl_explore.linear_eval, "linear_eval", started)
    run = tmp_path / "run"
    args = ["pretrain", "--out", str(run), *TINY_ARGS] if command == "pretrain" else ["linear-eval", str(run)]
    code, err = run_main(capsys, *args, option, value)
    assert code == 2 and says in err and "Traceback" not in err, err
    assert not run.exists()


# ---------------------------------------------------------------- 6. a full disk names the file

@pytest.fixture
def full_disk(monkeypatch):
    "Every file written through os.fdopen (the atomic writes' temporary files) lands on /dev/full: 'No space left on device'."
    if not os.path.exists("/dev/full"): pytest.skip("no /dev/full here")
    real = os.fdopen
    def fdopen(fd, mode="r", *args, **kwargs):
        if "w" in mode or "a" in mode: return real(os.open("/dev/full", os.O_WRONLY), mode, *args, **kwargs)
        return real(fd, mode, *args, **kwargs)
    monkeypatch.setattr(os, "fdopen", fdopen)


def test_no_space_left_names_the_file_being_written(tmp_path, capsys, full_disk):
    for path, write in ((tmp_path / "config.json", lambda p: write_json_atomic(p, {"tau": 0.2})),
                        (tmp_path / "checkpoint.pt", lambda p: save_checkpoint(p, {"model": {"w": torch.zeros(100_000)}}))):
        with pytest.raises(OSError) as info: write(path)
        assert info.value.errno == errno.ENOSPC and info.value.filename == str(path) and str(path) in str(info.value)
        assert "its disk is full" in str(info.value) and not list(tmp_path.iterdir())
    code, err = run_main(capsys, "pretrain", "--out", str(tmp_path / "run"), "--epochs", "1", *TINY_ARGS)
    assert code == 1 and f"{tmp_path / 'run'}{os.sep}" in err and "No space left on device" in err and "Traceback" not in err, err
    with pytest.raises(OSError) as info: run_folders.append_text(tmp_path / "metrics.jsonl", "{}\n")  # a line of the records
    assert info.value.errno == errno.ENOSPC and str(tmp_path / "metrics.jsonl") in str(info.value)
    from ctl_explore.site import SiteError, _write
    (tmp_path / "_site").mkdir()
    with pytest.raises(SiteError, match=r"cannot write .*_site/index.html \(No space left on device\)"):
        _write(tmp_path / "_site", tmp_path / "_site" / "index.html", "<html></html>")


# ================================================================ issue 43: nothing a user owns is lost, one sentence each
# Every test below failed on the code before issue 43's fixes.

def _one_line(code: int, err: str, status: int = 1) -> None:
    "A refusal as the command line gives it: `status`, one line, no traceback and no usage line."
    assert code == status and len(err.strip().splitlines()) == 1 and "Traceback" not in err and "usage:" not in err, (code, err)


def _empty_notebook(path: Path) -> Path:
    "A notebook that answers no lesson: grading it starts no kernel."
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dict(cells=[], metadata={}, nbformat=4, nbformat_minor=5)))
    return path



def _no_sandbox():
    from ctl_explore.grading import _bwrap_works
    return _bwrap_works()


needs_bwrap = pytest.mark.skipif(_no_sandbox() is not None, reason="`grade` runs submissions only in a bubblewrap sandbox, and none works here")

# ---------------------------------------------------------------- 43.1 every --out is the command's own

@needs_bwrap
def test_grade_out_naming_a_submission_is_refused_and_the_notebook_kept(tmp_path, capsys):
    alice = _empty_notebook(tmp_path / "subs" / "alice" / "a.ipynb")
    before = alice.read_bytes()
    code, err = run_main(capsys, "grade", str(tmp_path / "subs"), "--out", str(alice))
    _one_line(code, err)
    assert "lies inside the submissions" in err and alice.read_bytes() == before
    beside = tmp_path / "subs" / "grades.csv"  # `ctl-explore grade .` in the submissions' folder: a new table there is fine
    assert run_main(capsys, "grade", str(tmp_path / "subs"), "--out", str(beside))[0] == 0 and beside.read_text().startswith("student,")
    assert run_main(capsys, "grade", str(tmp_path / "subs"), "--out", str(beside))[0] == 0  # and so is its own table, again


@needs_bwrap
@pytest.mark.parametrize("kind", ["file", "link"])
def test_grade_out_over_a_users_file_or_link_is_refused_unless_overwrite(tmp_path, capsys, kind):
    _empty_notebook(tmp_path / "subs" / "a.ipynb")
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    out = notes if kind == "file" else tmp_path / "grades.csv"
    if kind == "link": out.symlink_to(notes)
    code, err = run_main(capsys, "grade", str(tmp_path / "subs"), "--out", str(out))
    _one_line(code, err)
    assert ("symbolic link" if kind == "link" else "is not a grades table") in err and "--overwrite" in err
    assert notes.read_text() == "my notes\n"
    assert run_main(capsys, "grade", str(tmp_path / "subs"), "--out", str(out), "--overwrite")[0] == 0
    assert out.read_text().startswith("student,lesson,exercise,") and not out.is_symlink()
    assert notes.read_text() == ("my notes\n" if kind == "link" else out.read_text())  # a link is replaced, its target untouched
    assert run_main(capsys, "grade", str(tmp_path / "subs"), "--out", str(out))[0] == 0  # a table of its own is written again


@pytest.mark.parametrize("kind", ["folder", "link"])
def test_answer_key_out_on_a_users_folder_or_link_is_refused_and_nothing_deleted(tmp_path, capsys, kind):
    mine = tmp_path / "mine"
    (mine / "mathjax").mkdir(parents=True)
    (mine / "mathjax" / "keep.js").write_text("mine")
    (mine / "index.html").write_text("<p>my page</p>")
    out = mine if kind == "folder" else tmp_path / "key"
    if kind == "link": out.symlink_to(mine, target_is_directory=True)
    code, err = run_main(capsys, "answer-key", "--out", str(out), "--no-numbers")
    _one_line(code, err)
    assert ("symbolic link" if kind == "link" else "did not write") in err and "--overwrite" in err
    assert (mine / "mathjax" / "keep.js").read_text() == "mine" and (mine / "index.html").read_text() == "<p>my page</p>"


def test_linear_eval_refuses_an_unmarked_folder_and_keeps_the_users_result(finished, tmp_path, capsys):
    run = _copy(finished, tmp_path / "run")
    (run / RUN_MARKER).unlink()
    (run / "linear_eval.json").write_text('{"mine": true}')
    code, err = run_main(capsys, "linear-eval", str(run), "--epochs", "1")
    _one_line(code, err)
    assert f"carries no {RUN_MARKER} marker" in err
    assert (run / "linear_eval.json").read_text() == '{"mine": true}' and not (run / ".lock").exists()


def _shipped_study(out: Path, rows: list[dict]) -> Path:
    "A study folder of the digits preset holding the shipped `rows` as finished runs."
    for r in rows: _run_folder(out, r)
    (out / STUDY_MARKER).write_text(json.dumps(dict(written_by="ctl_explore study", format=1, preset="digits")))
    return out


def test_a_study_of_another_grid_on_the_same_out_says_whose_results_it_replaced(tmp_path, monkeypatch):
    from ctl_explore.cli import study_preset
    from ctl_explore.study import runner
    monkeypatch.setattr(runner, "write_report", lambda rows, out, p, missing=(): Path(out) / "report.html")  # the figures cost seconds
    first = [r for r in SHIPPED if r["tau"] in (0.05, None)]
    out = _shipped_study(tmp_path / "study", first)
    write_results(first, out)  # the first study's results: τ 0.05 and the Simple losses
    shipped_05 = {r["run"] for r in first}
    other = study_preset("digits", taus=[0.1])
    for r in SHIPPED:
        if r["tau"] == 0.1: _run_folder(out, r)
    with pytest.warns(UserWarning, match=r"held the results of another study \(6 run\(s\) the digits-taus0.1 study does not plan, e\.g\. contrastive-tau0.05-seed0\)"):
        runner.report_study(other, out)
    assert {r["run"] for r in load_results(out / "results.json")} == {r["run"] for r in SHIPPED if r["tau"] in (0.1, None)}
    assert all((out / "runs" / name).is_dir() for name in shipped_05)  # the first study's runs stay, to be reported again


# ---------------------------------------------------------------- 43.2 a run folder's name is its identity's

def test_taus_that_differ_in_the_eighth_digit_get_two_folders_and_shipped_runs_keep_theirs():
    from ctl_explore.cli import study_preset
    from ctl_explore.study.plan import run_name
    base = PretrainConfig.from_dict(SHIPPED[0]["config"])
    names = [run_name(dataclasses.replace(base, tau=t)) for t in (0.1, 0.10000001, 1e-05, 0.30000000000000004)]
    assert len(set(names)) == 4 and names[:2] == ["contrastive-tau0.1-seed0", "contrastive-tau0.10000001-seed0"]
    assert float(names[3].split("tau")[1].split("-seed")[0]) == 0.30000000000000004  # read back, the very value
    assert [run_name(PretrainConfig.from_dict(r["config"])) for r in SHIPPED] == [r["run"] for r in SHIPPED]  # they still resume
    assert study_preset("digits", taus=[0.1, 0.10000001]).name == "digits-taus0.1-0.10000001"


# ---------------------------------------------------------------- 43.4 a refusal leaves no half-done state

def test_a_forged_duplicate_run_is_one_sentence_exit_1_and_nothing_is_rewritten(tmp_path, capsys):
    rows = [r for r in SHIPPED if r["tau"] in (0.05, None)]
    out = _shipped_study(tmp_path / "study", rows)
    write_results(rows, out)
    before = {name: (out / name).read_bytes() for name in ("results.json", "results.csv")}
    seed0, seed1 = rows[0], rows[1]  # contrastive, τ 0.05, seeds 0 and 1
    forged = {**seed0, "run": seed1["run"], "seed": seed1["seed"], "config": seed1["config"]}  # seed 0's measurements as seed 1's
    shutil.rmtree(out / "runs" / seed1["run"])
    _run_folder(out, forged)
    code, err = run_main(capsys, "study", "--preset", "digits", "--taus", "0.05", "--out", str(out), "--report")
    _one_line(code, err)
    assert "counted twice" in err and f"delete the run folder {out / 'runs' / seed1['run']}" in err
    assert {name: (out / name).read_bytes() for name in before} == before and not (out / "report.html").exists()


# ---------------------------------------------------------------- 43.5 every number is checked where it is parsed

@pytest.mark.parametrize("value", ["0", "-1", "inf", "1e12", "nan", "abc"])
def test_grade_time_limit_outside_its_range_is_a_sentence_naming_the_option(tmp_path, capsys, value):
    code, err = run_main(capsys, "grade", str(tmp_path), "--time-limit", value)
    assert code == 2 and "argument --time-limit: must be a number of seconds in (0, 86400]" in err and "Traceback" not in err, err


@pytest.mark.parametrize("env, says", [
    (dict(WORLD_SIZE="3000000000", RANK="0"), "WORLD_SIZE must be at most 1048576 (the number of processes), got 3000000000"),
    (dict(WORLD_SIZE="2", RANK="0", MASTER_PORT="abc"), "MASTER_PORT must be an integer (the TCP port"),
    (dict(WORLD_SIZE="2", RANK="0", MASTER_PORT="70000"), "MASTER_PORT must be at most 65535"),
    (dict(WORLD_SIZE="2", RANK="0", MASTER_PORT="0"), "MASTER_PORT must be at least 1"),
])
def test_torchrun_variables_out_of_range_are_named_before_anything_starts(tmp_path, capsys, monkeypatch, env, says):
    for k, v in env.items(): monkeypatch.setenv(k, v)
    code, err = run_main(capsys, "pretrain", "--out", str(tmp_path / "run"), "--epochs", "1", *TINY_ARGS)
    assert code == 2 and says in err and "Traceback" not in err and not (tmp_path / "run").exists(), err


# ---------------------------------------------------------------- 43.3 linear-eval checks what it evaluates

def test_linear_eval_refuses_a_checkpoint_of_another_run_copied_into_the_folder(finished, tmp_path, capsys):
    run = _copy(finished, tmp_path / "run")
    before = (run / "linear_eval.json").read_bytes() if (run / "linear_eval.json").exists() else None
    state = load_checkpoint(run / "checkpoint.pt")
    save_checkpoint(run / "checkpoint.pt", {**state, "config": {**state["config"], "loss": "simple"}})  # a simple run's, same shapes
    code, err = run_main(capsys, "linear-eval", str(run), "--epochs", "1")
    _one_line(code, err)
    assert "holds a run of another configuration" in err and "loss 'simple' where config.json says 'contrastive'" in err
    assert ((run / "linear_eval.json").read_bytes() if (run / "linear_eval.json").exists() else None) == before


# ---------------------------------------------------------------- 43.7 quiet means quiet

@pytest.mark.parametrize("quiet", [True, False])
def test_the_device_line_is_said_once_and_never_with_quiet(tmp_path, capsys, monkeypatch, quiet):
    from ctl_explore import distributed
    monkeypatch.setattr(distributed, "_AUTO_SAID", set())  # as in a fresh process
    (tmp_path / "a-file").write_text("not a folder")  # refused just after the device is resolved: no training
    code, err = run_main(capsys, "pretrain", "--out", str(tmp_path / "a-file"), "--epochs", "1", "--device", "auto",
                         *(["--quiet"] if quiet else []))
    assert code == 1 and err.count("device 'auto' is") == (0 if quiet else 1), err
    assert distributed.DEVICE_LINE_ENV not in os.environ  # the command's setting ends with it


# ---------------------------------------------------------------- 43.6 what a submission cannot reach

@needs_bwrap
def test_a_symlinked_submission_is_not_read_and_an_escape_coded_name_is_escaped(tmp_path):
    from ctl_explore.grading import grade
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET_TOKEN=abc123\n")
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "bob.ipynb").symlink_to(secret)
    _empty_notebook(subs / "\x1b]0;pwned\x07\x1b[2Jeve" / "a.ipynb")
    lines = []
    rows = grade([subs], tmp_path / "grades.csv", time_limit=5, echo=lines.append)
    bob = [r for r in rows if r["student"] == "bob"]
    assert len(bob) == 1 and bob[0]["status"] == "error" and "symbolic link" in bob[0]["reason"]
    assert "SECRET" not in (tmp_path / "grades.csv").read_text() and not any("SECRET" in line for line in lines)
    assert lines and not any(c in line for line in lines for c in "\x1b\x07"), lines
    assert any("\\x1b]0;pwned\\x07" in line for line in lines)


def test_grading_kills_every_process_the_notebook_started_setsid_and_double_fork_too(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    from ctl_explore import grading
    monkeypatch.setattr(grading, "_grade_in_child", lambda *a, **k: [])  # the checks are not this test's
    pids = tmp_path / "pids"
    cell = ("import os, subprocess\n# check_06_1\nkids = [subprocess.Popen(['sleep', '120'], start_new_session=True) for _ in range(3)]\n"
            "r, w = os.pipe()\n"
            "if os.fork() == 0:\n    os.setsid()\n    pid = os.fork()\n    if pid == 0: os.execvpe('sleep', ['sleep', '121'], {})\n"
            "    os.write(w, str(pid).encode()); os._exit(0)\n"
            "late = os.read(r, 32).decode()\n"
            f"open({str(pids)!r}, 'w').write(' '.join([str(k.pid) for k in kids] + [late]))")
    path = tmp_path / "sub.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell)]), path)
    before = set(Path(tempfile.gettempdir()).glob(f"{grading.GRADE_TMP_PREFIX}{os.getpid()}-*"))
    grading.grade_notebook(path, "mallory", time_limit=30, sandbox=grading.Sandbox("none"))  # (in a sandbox its namespace ends them: below)
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) == 4
    def alive(pid):
        try: return not Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX"
        except OSError: return False
    assert not [p for p in started if alive(p)], "processes the submission started outlived its grading"
    assert set(Path(tempfile.gettempdir()).glob(f"{grading.GRADE_TMP_PREFIX}{os.getpid()}-*")) == before


def test_a_killed_gradings_folder_and_processes_are_removed_by_the_next_grade(tmp_path):
    from ctl_explore import grading
    gone = subprocess.Popen(["true"]); gone.wait()  # a grader's pid that no longer runs
    folder = Path(tempfile.mkdtemp(prefix=f"{grading.GRADE_TMP_PREFIX}{gone.pid}-"))
    (folder / "kernel-0.json").write_text("{}")
    left = subprocess.Popen(["sleep", "120"], env={**os.environ, grading.GRADE_TOKEN_ENV: folder.name}, start_new_session=True)
    try:
        assert folder in grading.remove_stale_gradings()
        assert not folder.exists() and left.wait(timeout=10) == -9
    finally:
        if left.poll() is None: left.kill(); left.wait()
        shutil.rmtree(folder, ignore_errors=True)


def test_a_path_with_escape_codes_reaches_the_terminal_escaped(tmp_path, capsys):
    code, err = run_main(capsys, "grade", str(tmp_path / "\x1b]0;pwned\x07\x1b[2Jgone"), "--out", str(tmp_path / "g.csv"))
    _one_line(code, err)
    assert "no notebook or folder at" in err and "\x1b" not in err and "\x07" not in err and "\\x1b]0;pwned\\x07" in err


@needs_bwrap
def test_in_the_sandbox_a_detached_process_dies_with_the_grading(tmp_path):
    "A process the notebook detached (setsid, double fork) lives in the sandbox's process namespace, which ends with the kernel."
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    from ctl_explore import grading
    cell = ("import os, subprocess\n# check_06_1\nsubprocess.Popen(['sleep', '1237'], start_new_session=True)\n"
            "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0: os.execvp('sleep', ['sleep', '1238'])\n    os._exit(0)")
    path = tmp_path / "sub.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell)]), path)
    grading.grade_notebook(path, "mallory", time_limit=30)
    def sleeping():
        found = []
        for p in Path("/proc").iterdir():
            try: cmd = (p / "cmdline").read_bytes()
            except OSError: continue
            if cmd in (b"sleep\x001237\x00", b"sleep\x001238\x00"): found.append(p.name)
        return found
    deadline = time.monotonic() + 10
    while sleeping() and time.monotonic() < deadline: time.sleep(0.2)
    assert not sleeping(), "processes the submission detached outlived its grading"


def test_processes_an_answer_starts_in_the_answer_host_die_with_its_grading_outside_a_sandbox_too(tmp_path):
    """A function answer is called in the answer host, outside the kernel: what it detaches there (setsid) carries the
    grading's mark and is killed when the lesson's checks are done, as the kernel's own are (with --unsafe, where no
    process namespace ends them)."""
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    from ctl_explore import grading
    pids = tmp_path / "pids"
    answer = ("import torch\nfrom ctl_explore.exercises import check_01_2\n"
              "def my_relative_penalty(neg, tau):\n"
              "    import subprocess\n"
              "    kid = subprocess.Popen(['sleep', '1241'], start_new_session=True)\n"
              f"    open({str(pids)!r}, 'a').write(f'{{kid.pid}} ')\n"
              "    return neg  # wrong, and beside the point: the check calls it\n")
    path = tmp_path / "sub.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(answer)]), path)
    rows = grading.grade_notebook(path, "mallory", time_limit=60, sandbox=grading.Sandbox("none"))
    assert [r["status"] for r in rows if r["exercise"] == "01.2"] == ["failed"], rows
    started = [int(p) for p in pids.read_text().split()]  # the answer ran in the host and started its process
    assert started
    def alive(pid):
        try: return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
        except OSError: return False
    deadline = time.monotonic() + 10
    while [p for p in started if alive(p)] and time.monotonic() < deadline: time.sleep(0.2)
    assert not [p for p in started if alive(p)], "a process the answer started in the answer host outlived its grading"


def _marked_commands(token: str) -> list[str]:
    "The command lines of the processes a grading marked (its kernel, its answer host and theirs)."
    from ctl_explore import grading
    out = []
    for pid in grading._marked_processes(token):
        with contextlib.suppress(OSError): out.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
    return out


@pytest.mark.parametrize("phase, runs", [("kernel", "ipykernel"), ("checks", "answer_host.py")])
def test_sigterm_during_grading_exits_143_and_leaves_no_folder_or_process(tmp_path, phase, runs):
    """`ctl-explore grade` stopped by SIGTERM while a submission's cell runs (in its kernel) or while its answer is checked
    (in the answer host): exit status 143 with one sentence, the grading's temporary folder removed, every process it
    marked gone. In the sandbox where one works, as a class would be graded."""
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    from ctl_explore import grading
    if phase == "kernel": cell = "from ctl_explore.exercises import check_01_2\nimport time\ntime.sleep(300)\n"
    else: cell = "from ctl_explore.exercises import check_01_2\ndef my_relative_penalty(neg, tau):\n    import time\n    time.sleep(300)\n    return neg\n"
    sub = tmp_path / "subs" / "sleeper.ipynb"
    sub.parent.mkdir()
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell)]), sub)
    argv = [sys.executable, "-c", "import sys; from ctl_explore.cli import main; sys.exit(main())", "grade", str(sub.parent),
            "--out", str(tmp_path / "grades.csv"), "--time-limit", "600", *([] if _no_sandbox() is None else ["--unsafe"])]
    grader = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline, folders = time.monotonic() + 180, []
        while grader.poll() is None and time.monotonic() < deadline:
            folders = list(Path(tempfile.gettempdir()).glob(f"{grading.GRADE_TMP_PREFIX}{grader.pid}-*"))
            if folders and any(runs in c for c in _marked_commands(folders[0].name)): break
            time.sleep(0.3)
        assert len(folders) == 1 and any(runs in c for c in _marked_commands(folders[0].name)), (
            f"the grading never reached its {phase}: {grader.poll()}")
        time.sleep(3)  # into the sleep
        grader.send_signal(signal.SIGTERM)
        out, err = grader.communicate(timeout=90)
    finally:
        if grader.poll() is None: os.killpg(grader.pid, signal.SIGKILL); grader.wait()
    assert grader.returncode == 143 and "Traceback" not in err and len(err.strip().splitlines()) <= 2, (grader.returncode, err)
    assert not folders[0].exists(), "the grading's temporary folder outlived its SIGTERM"
    deadline = time.monotonic() + 10
    while _marked_commands(folders[0].name) and time.monotonic() < deadline: time.sleep(0.2)
    assert not _marked_commands(folders[0].name), "processes of the grading outlived its SIGTERM"
