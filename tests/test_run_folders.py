"""Run folders that defend themselves (issue 13): checkpoints verified on load, one writer per folder, no writing into
folders pretrain did not make or through symbolic links, validation before anything is written, and failures told as
sentences with the right exit status (divergence, Ctrl-C, downloads, read-only folders), plus the numbers the losses
refuse (a boolean τ, a τ that requires a gradient, an empty batch against the memory bank)."""
from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
from pathlib import Path

import pytest
from processes import hold_run_lock
import torch
import torch.nn.functional as F

from ctl_explore import run_folders
from ctl_explore import train as train_module
from ctl_explore.cli import main
from ctl_explore.losses import contrastive_loss, hard_contrastive_loss, simple_loss
from ctl_explore.memory_bank import bank_contrastive_loss
from ctl_explore.memory_bank import MemoryBank
from ctl_explore.run_folders import (RUN_MARKER, SOFT_LOCK_NAME, CheckpointError, RunBusyError, RunFolderError, run_lock,
                                     save_checkpoint, write_json_atomic)
from ctl_explore.train import PretrainConfig, TrainingDivergedError, load_checkpoint, pretrain

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
TINY = dict(width=4, out_dim=16, knn_k=20, batch_size=64)
TINY_ARGS = ["--width", "4", "--out-dim", "16", "--knn-k", "20", "--batch-size", "64", "--quiet"]


def tiny(**kw) -> PretrainConfig:
    return PretrainConfig(**{**TINY, "epochs": 1, **kw})


def cli_process(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ctl_explore.cli", *args], env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def run_main(capsys, *args: str) -> tuple[int, str]:
    "`ctl-explore args` in this process: (exit status, stderr)."
    try: code = main(list(args))
    except SystemExit as e: code = e.code
    return code, capsys.readouterr().err


def wait_for(condition, timeout: float = 120, proc: subprocess.Popen | None = None) -> None:
    deadline = time.time() + timeout
    while not condition():
        if proc is not None and proc.poll() is not None: pytest.fail(f"the process ended early: {proc.communicate()[1][-2000:]}")
        if time.time() > deadline: pytest.fail("timed out")
        time.sleep(0.05)


def flip_middle_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def dead_pid() -> int:
    pid = 4_000_000
    while True:
        try: os.kill(pid, 0)
        except ProcessLookupError: return pid
        except PermissionError: pass
        pid += 1


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    "A finished 1-epoch run, to copy from."
    run = tmp_path_factory.mktemp("finished") / "run"
    torch.set_num_threads(1)
    pretrain(tiny(), run, quiet=True)
    return run


def copy_run(src: Path, dst: Path) -> Path:
    dst.mkdir(parents=True)
    for p in src.iterdir(): (dst / p.name).write_bytes(p.read_bytes())
    return dst


# ---------------------------------------------------------------- 1, 9: messages that name both ways to start over, and no bad advice

def _nests_here_and_refuses_other_threads(run):
    "Inside `run_lock(run)`: the holding thread may take it again; another thread of this process is refused, saying so."
    with run_lock(run): pass
    errors = []
    def other():
        try:
            with run_lock(run): pass
        except RunBusyError as e: errors.append(e)
    t = threading.Thread(target=other); t.start(); t.join()
    assert errors and "another thread of this process" in str(errors[0])


def test_mismatch_names_restart_for_python_and_the_command_line(finished):
    with pytest.raises(CheckpointError) as e: load_checkpoint(finished / "checkpoint.pt", tiny(tau=0.5))
    assert "restart=True" in str(e.value) and "--restart" in str(e.value) and "'tau': (0.2, 0.5)" in str(e.value)


class _Payload:
    def __reduce__(self): return (os.system, ("echo ran > payload-ran",))


def test_malicious_pickle_is_refused_without_advice_to_run_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    torch.save({"format": "ctl_explore.pretrain/1", "config": {}, "x": _Payload()}, tmp_path / "checkpoint.pt")
    with pytest.raises(CheckpointError) as e: load_checkpoint(tmp_path / "checkpoint.pt")
    message = str(e.value)
    assert "is not a readable checkpoint" in message and "nothing in it was run" in message
    assert "weights_only" not in message and "Traceback" not in message
    assert not (tmp_path / "payload-ran").exists()


# ---------------------------------------------------------------- 2: checkpoint integrity

def test_a_flipped_byte_in_a_checkpoint_is_detected(finished, tmp_path, capsys):
    run = copy_run(finished, tmp_path / "run")
    flip_middle_byte(run / "checkpoint.pt")
    torch.load(io.BytesIO((run / "checkpoint.pt").read_bytes()), weights_only=True)  # torch alone notices nothing
    with pytest.raises(CheckpointError, match="is damaged: its part .* does not match the checksum"):
        load_checkpoint(run / "checkpoint.pt")
    with pytest.raises(CheckpointError, match="is damaged"): pretrain(tiny(epochs=2), run, quiet=True)
    damaged = (run / "checkpoint.pt").read_bytes()
    code, err = run_main(capsys, "pretrain", "--out", str(run), "--epochs", "2", *TINY_ARGS)
    assert code == 1 and "is damaged" in err and "--restart" in err and "Traceback" not in err
    assert (run / "checkpoint.pt").read_bytes() == damaged  # kept for whoever wants to look at it


@pytest.mark.parametrize("epoch", [99, -2, 0, True])
def test_a_hand_edited_epoch_is_refused(finished, tmp_path, epoch):
    run = copy_run(finished, tmp_path / "run")
    state = load_checkpoint(run / "checkpoint.pt")
    save_checkpoint(run / "checkpoint.pt", {**{k: v for k, v in state.items() if k != "format"}, "epoch": epoch})
    with pytest.raises(CheckpointError, match="its epoch count"): load_checkpoint(run / "checkpoint.pt")
    with pytest.raises(CheckpointError, match="its epoch count"): pretrain(tiny(), run, quiet=True)


def test_right_format_tag_with_wrong_contents_is_a_sentence(finished, tmp_path, capsys):
    run = copy_run(finished, tmp_path / "run")
    state = {k: v for k, v in load_checkpoint(run / "checkpoint.pt").items() if k != "format"}
    save_checkpoint(run / "checkpoint.pt", {**state, "model": {"not.a.layer": torch.zeros(3)}})
    code, err = run_main(capsys, "pretrain", "--out", str(run), "--epochs", "1", *TINY_ARGS)
    assert code == 1 and "does not fit this run" in err and "Traceback" not in err
    save_checkpoint(run / "checkpoint.pt", {k: v for k, v in state.items() if k != "bank"})
    with pytest.raises(CheckpointError, match="lacks bank"): load_checkpoint(run / "checkpoint.pt")
    save_checkpoint(run / "checkpoint.pt", {**state, "history": "three"})
    with pytest.raises(CheckpointError, match="its history is a str"): load_checkpoint(run / "checkpoint.pt")


# ---------------------------------------------------------------- 3: one writer per run folder

@pytest.mark.slow
def test_a_second_process_on_one_folder_fails_at_once(tmp_path, capsys):
    "The first writer is a process started here; the second is this test's own process, running the same command line."
    run = tmp_path / "run"
    first = cli_process("pretrain", "--out", str(run), "--epochs", "50", *TINY_ARGS)
    try:
        wait_for(lambda: (run / "metrics.jsonl").exists() and (run / "metrics.jsonl").read_text().count("\n") >= 1, proc=first)
        started = time.time()
        code, err = run_main(capsys, "pretrain", "--out", str(run), "--epochs", "50", "--tau", "0.5", *TINY_ARGS)
        assert first.poll() is None, "the first run ended before the second was refused: make it longer"
        assert code == 1, err
        assert f"is being written by process {first.pid}" in err and "Traceback" not in err
        assert time.time() - started < 60
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    config = json.loads((run / "config.json").read_text())
    assert config["tau"] == 0.2  # the second writer changed nothing
    epochs = [json.loads(l)["epoch"] for l in (run / "metrics.jsonl").read_text().splitlines()]
    assert epochs == list(range(1, len(epochs) + 1))


def test_run_lock_is_exclusive_across_processes_and_threads_and_dies_with_its_holder(tmp_path):
    run = tmp_path / "run"
    holder = hold_run_lock(run, ENV)
    try:
        with pytest.raises(RunBusyError, match=f"process {holder.pid}"): 
            with run_lock(run): pass
        started = time.time()
        with pytest.raises(RunBusyError): pretrain(tiny(), run, quiet=True)
        assert time.time() - started < 5  # refused before loading any data
        assert isinstance(RunBusyError("x"), RuntimeError)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with run_lock(run):  # the lock died with its holder
        _nests_here_and_refuses_other_threads(run)


# A file system that refuses flock (Lustre mounted with noflock, NFS without its lock daemon): filelock's hard lock raises
# OSError(ENOSYS) or OSError(ENOTSUP) there. The stand-in below refuses the same way, in this process and in the holder's.
REFUSING_FLOCK = """
import errno, filelock
class RefusingFlock:
    "filelock.FileLock on a file system without flock."
    def __init__(self, *args, **kwargs): pass
    def acquire(self, *args, **kwargs): raise OSError(errno.{name}, "flock refused by the file system")
filelock.FileLock = RefusingFlock
"""


def _refuse_flock(monkeypatch, name: str) -> None:
    namespace = {}
    exec(REFUSING_FLOCK.replace("{name}", name).replace("filelock.FileLock = RefusingFlock", ""), namespace)
    monkeypatch.setattr(run_folders.filelock, "FileLock", namespace["RefusingFlock"])
    monkeypatch.setattr(run_folders, "_SOFT_FOLDERS", set())


@pytest.mark.parametrize("name", ["ENOSYS", "ENOTSUP"])
def test_run_lock_falls_back_to_a_soft_lock_with_one_warning_where_flock_is_refused(tmp_path, monkeypatch, name):
    _refuse_flock(monkeypatch, name)
    run = tmp_path / "run"
    with pytest.warns(UserWarning, match="refuses flock.*SoftFileLock") as warned:
        with run_lock(run):
            assert (run / SOFT_LOCK_NAME).is_file()
            _nests_here_and_refuses_other_threads(run)
        assert not (run / SOFT_LOCK_NAME).exists()  # released: the file goes
        with run_lock(run): pass                      # the same file system again: no second warning
    assert len([w for w in warned if "refuses flock" in str(w.message)]) == 1
    run_folders.check_run_folder(run, PretrainConfig.from_dict)  # the soft lock's file is one of a run folder's own


def test_soft_lock_refuses_a_second_process_naming_it_and_dies_with_it(tmp_path, monkeypatch):
    _refuse_flock(monkeypatch, "ENOSYS")
    run = tmp_path / "run"
    code = REFUSING_FLOCK.replace("{name}", "ENOSYS") + ("import sys, time, warnings\nwarnings.simplefilter('ignore')\n"
            "from ctl_explore.run_folders import run_lock\nwith run_lock(sys.argv[1]):\n    print('held', flush=True); time.sleep(120)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(run)], stdout=subprocess.PIPE, text=True, env=ENV)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert (run / SOFT_LOCK_NAME).is_file() and not (run / ".lock").exists()  # the holder took the soft lock
        with pytest.warns(UserWarning, match="refuses flock"):
            with pytest.raises(RunBusyError, match=f"is being written by process {holder.pid}: one run folder takes one writer"):
                with run_lock(run): pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert (run / SOFT_LOCK_NAME).is_file()  # a killed holder leaves its file, naming a process that no longer runs...
    with run_lock(run): pass                 # ...so the next writer removes it and takes the folder
    assert not (run / SOFT_LOCK_NAME).exists()


def test_run_lock_errors_other_than_a_refused_flock_are_not_a_soft_lock(tmp_path, monkeypatch):
    _refuse_flock(monkeypatch, "EIO")
    with pytest.raises(RunFolderError, match=r"cannot lock .*\.lock \(flock refused by the file system\)"):
        with run_lock(tmp_path / "run"): pass
    assert not (tmp_path / "run" / SOFT_LOCK_NAME).exists() and not run_folders._SOFT_FOLDERS


def test_temporary_files_are_per_writer_and_stale_ones_are_removed(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / RUN_MARKER).write_text(json.dumps(run_folders._MARKER))  # pretrain's folder: in any other, the files may be a user's
    stale = [f"checkpoint.pt.{dead_pid()}.abc123.tmp", "checkpoint.pt.tmp", f"result.json.{dead_pid()}.x_y.tmp"]
    for name in stale: (run / name).write_bytes(b"")
    alive = run / f"result.json.{os.getpid()}.zz.tmp"  # a live writer's file is left alone
    alive.write_bytes(b"{}")
    pretrain(tiny(), run, quiet=True)
    assert sorted(p.name for p in run.iterdir()) == sorted([".lock", RUN_MARKER, "checkpoint.pt", "config.json", "metrics.jsonl", alive.name])
    write_json_atomic(run / "result.json", {"a": [1, 2]})
    assert json.loads((run / "result.json").read_text()) == {"a": [1, 2]}
    assert not [p for p in run.iterdir() if p.name.startswith("result.json.") and p != alive]


# ---------------------------------------------------------------- 4: pretrain writes only into its own folders, never through links

def test_a_folder_with_foreign_files_is_refused_and_untouched(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "notes.txt").write_text("mine")
    with pytest.raises(RunFolderError, match=r"holds files pretrain did not write \(notes.txt\)"): pretrain(tiny(), run, quiet=True)
    code, err = run_main(capsys, "pretrain", "--out", str(run), *TINY_ARGS)
    assert code == 1 and "did not write (notes.txt)" in err and "usage:" not in err
    assert sorted(p.name for p in run.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("text", ['{"mine": 1}', "null", "[1, 2]", "not json", '{"tau": 0}'])
def test_a_config_json_that_is_not_pretrains_is_not_overwritten(tmp_path, text):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(text)
    with pytest.raises(RunFolderError, match="was not written by pretrain"): pretrain(tiny(), run, quiet=True)
    assert (run / "config.json").read_text() == text


@pytest.mark.parametrize("name", ["metrics.jsonl", "checkpoint.pt", "config.json"])
def test_symbolic_links_are_never_followed(tmp_path, name):
    run, outside = tmp_path / "run", tmp_path / "precious.txt"
    run.mkdir()
    outside.write_text("keep me")
    (run / name).symlink_to(outside)
    with pytest.raises(RunFolderError, match="is a symbolic link"): pretrain(tiny(), run, quiet=True, restart=True)
    assert outside.read_text() == "keep me"


def test_evaluations_of_other_weights_go_when_a_run_starts_over(finished, tmp_path):
    run = copy_run(finished, tmp_path / "run")
    (run / "result.json").write_text('{"old": true}')
    (run / "linear_eval.json").write_text('{"old": true}')
    pretrain(tiny(), run, quiet=True)  # resumes a finished run: its evaluations still hold
    assert (run / "result.json").exists() and (run / "linear_eval.json").exists()
    pretrain(tiny(), run, quiet=True, restart=True)
    assert not (run / "result.json").exists() and not (run / "linear_eval.json").exists()


def test_empty_out_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, err = run_main(capsys, "pretrain", "--out", "", *TINY_ARGS)
    assert code == 2 and "must name a folder" in err
    with pytest.raises(ValueError, match="out_dir must name a folder"): pretrain(tiny(), "")
    assert list(tmp_path.iterdir()) == []


def test_out_naming_a_file_is_a_sentence(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    code, err = run_main(capsys, "pretrain", "--out", str(tmp_path / "file"), *TINY_ARGS)
    assert code == 1 and "is a file, not a folder" in err and "Traceback" not in err


# ---------------------------------------------------------------- 7, 9: checked before the folder exists; sentences, not tracebacks

@pytest.mark.parametrize("args, status, message", [
    (["--image-size", "3"], 2, "image_size must be an integer >= 4 (for the convnet backbone"),
    (["--device", "tpu"], 2, "device must be 'auto', 'cpu', 'cuda' or 'cuda:N'"),
    (["--batch-size", "5000"], 2, "training images"),
    (["--tau", "nan"], 2, "tau must be a finite number > 0"),
    (["--warmup-epochs", "5", "--epochs", "5"], 2, "warmup_epochs must be an integer in [0, 4] (fewer than the 5 epochs)"),
    (["--threads", "0"], 2, "threads must be an integer >= 1"),
    (["--dataset", "cifar10", "--data-root", "{root}"], 1, "cifar10 not found in"),
])
def test_validation_errors_leave_no_folder(tmp_path, capsys, args, status, message):
    run = tmp_path / "run"
    args = [a.replace("{root}", str(tmp_path / "no-data")) for a in args]
    code, err = run_main(capsys, "pretrain", "--out", str(run), *TINY_ARGS, *args)
    assert code == status and message in err and "Traceback" not in err, err
    assert not run.exists()


def test_encoder_that_cannot_take_the_images_fails_before_writing(tmp_path, monkeypatch):
    monkeypatch.setattr(train_module, "MIN_IMAGE_SIZE", {})  # without the configuration's check, the trial embedding catches it
    with pytest.raises(ValueError, match="cannot embed 3-pixel images"): pretrain(tiny(image_size=3), tmp_path / "run", quiet=True)
    assert not (tmp_path / "run").exists()


def test_a_failed_download_says_where_to_put_the_files(tmp_path, capsys, monkeypatch):
    def offline(*a, **kw): raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")
    monkeypatch.setattr(train_module, "load_dataset", offline)
    root = tmp_path / "data"
    code, err = run_main(capsys, "pretrain", "--out", str(tmp_path / "run"), "--dataset", "cifar10", "--download",
                         "--data-root", str(root), *TINY_ARGS)
    assert code == 1 and "Traceback" not in err
    assert "could not download cifar10: [Errno -3] Temporary failure in name resolution" in err
    assert f"download it elsewhere and put its files in {root}" in err
    assert not (tmp_path / "run").exists()


def test_a_folder_that_cannot_be_written_is_found_before_training(finished, tmp_path, capsys, monkeypatch):
    run = copy_run(finished, tmp_path / "run")
    def refuse(*a, **kw): raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    started = time.time()
    code, err = run_main(capsys, "pretrain", "--out", str(run), "--epochs", "2", *TINY_ARGS)
    assert code == 1 and f"cannot write into {run} (Permission denied)" in err and "Traceback" not in err
    assert time.time() - started < 30 and load_checkpoint(run / "checkpoint.pt")["epoch"] == 1


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder_is_a_sentence(finished, tmp_path, capsys):
    run = copy_run(finished, tmp_path / "run")
    run.chmod(0o555)
    try:
        code, err = run_main(capsys, "pretrain", "--out", str(run), "--epochs", "2", *TINY_ARGS)
        assert code == 1 and "cannot write into" in err
    finally:
        run.chmod(0o755)


# ---------------------------------------------------------------- 6: divergence is a runtime failure, said as such

def test_divergence_is_reported_with_the_epoch_and_what_to_try(tmp_path, capsys):
    with pytest.raises(TrainingDivergedError, match=r"training diverged at epoch 1 .*--lr, now 1e\+08.*--tau, now 0.2"):
        pretrain(tiny(lr=1e8), tmp_path / "api", quiet=True)
    code, err = run_main(capsys, "pretrain", "--out", str(tmp_path / "cli"), "--lr", "1e8", *TINY_ARGS)
    assert code == 1 and "training diverged at epoch 1" in err
    assert "usage:" not in err and "Traceback" not in err and "finite similarities" not in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "cli" / "checkpoint.pt").exists()  # nothing diverged is saved


# ---------------------------------------------------------------- 7: Ctrl-C

@pytest.mark.slow
def test_ctrl_c_says_where_it_stopped_and_how_to_resume(tmp_path):
    run = tmp_path / "run"
    # a shell without job control starts background jobs with SIGINT ignored, and Python keeps an ignored SIGINT ignored:
    # give the child the default disposition, as a terminal would
    proc = cli_process("pretrain", "--out", str(run), "--epochs", "500", *TINY_ARGS,
                       preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        wait_for(lambda: (run / "metrics.jsonl").exists() and (run / "metrics.jsonl").read_text().count("\n") >= 1, proc=proc)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None: proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "interrupted at epoch" in err and "run the same command to resume" in err
    told = [l for l in err.strip().splitlines() if not l.startswith("ctl_explore: device 'auto' is")]  # device="auto" says what it chose
    assert len(told) == 1, err
    done = load_checkpoint(run / "checkpoint.pt")["epoch"]
    assert f"interrupted at epoch {done + 1} of 500" in err
    assert not [p for p in run.iterdir() if p.name.endswith(".tmp")]


# ---------------------------------------------------------------- 8: meaningless values

def test_booleans_are_not_numbers():
    for field in ("tau", "lr", "lam", "alpha", "momentum", "weight_decay"):
        with pytest.raises(ValueError, match=field): PretrainConfig(**{field: True})
    with pytest.raises(ValueError, match="lr_drops"): PretrainConfig(lr_drops=(True,))
    with pytest.raises(ValueError, match="lr_drops must be a sequence"): PretrainConfig(lr_drops=0.8)
    with pytest.raises(ValueError, match="download must be True or False"): PretrainConfig(download="yes")
    with pytest.raises(ValueError, match="epochs must be an integer"): PretrainConfig(epochs=True)
    pos, neg = torch.tensor([0.9, 0.5]), torch.tensor([[0.1, 0.3], [0.4, 0.0]])
    with pytest.raises(ValueError, match="tau must be a number, got the boolean True"): contrastive_loss(pos, neg, tau=True)
    with pytest.raises(ValueError, match="alpha must be a number"): hard_contrastive_loss(pos, neg, tau=0.2, alpha=True)
    with pytest.raises(ValueError, match="lam must be a number"): simple_loss(pos, neg, lam=False)


def test_a_temperature_that_requires_a_gradient_is_refused():
    pos, neg = torch.tensor([0.9, 0.5]), torch.tensor([[0.1, 0.3], [0.4, 0.0]])
    tau = torch.tensor(0.5, requires_grad=True)
    with pytest.raises(ValueError, match="requires a gradient"): contrastive_loss(pos, neg, tau=tau)
    assert contrastive_loss(pos, neg, tau=tau.detach()) == contrastive_loss(pos, neg, tau=0.5)


def test_the_bank_loss_refuses_an_empty_batch_like_contrastive_loss():
    bank = F.normalize(torch.randn(10, 8), dim=1)
    with pytest.raises(ValueError, match="at least one"): contrastive_loss(torch.zeros(0), torch.zeros(0, 3), tau=0.2)
    with pytest.raises(ValueError, match="q must hold at least one query"):
        bank_contrastive_loss(torch.zeros(0, 8), bank, torch.zeros(0, dtype=torch.long), tau=0.2)
    with pytest.raises(ValueError, match="q must hold at least one query"):
        MemoryBank(10, 8).loss(torch.zeros(0, 8), torch.zeros(0, dtype=torch.long), "hard_contrastive", tau=0.2, alpha=0.5)


# ---------------------------------------------------------------- issue 24: run folders own their files

@pytest.mark.parametrize("name", ["metrics.jsonl", "result.json", "linear_eval.json", "linear_eval_random_init.json"])
def test_a_users_lone_file_of_a_run_folders_name_survives(tmp_path, capsys, name):
    run = tmp_path / "run"
    run.mkdir()
    (run / name).write_text("the user's own\n")
    with pytest.raises(RunFolderError) as info: pretrain(tiny(), run, quiet=True)
    assert str(run) in str(info.value) and f"holds {name}, which pretrain did not write" in str(info.value)
    code, err = run_main(capsys, "pretrain", "--out", str(run), *TINY_ARGS)
    assert code == 1 and f"holds {name}, which pretrain did not write" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in run.iterdir() if p.name != ".lock") == [name]
    assert (run / name).read_text() == "the user's own\n"


def test_a_new_or_empty_folder_is_marked_and_only_a_marked_one_is_written_again(tmp_path):
    for run in (tmp_path / "new", tmp_path / "empty"):
        if run.name == "empty": run.mkdir()
        pretrain(tiny(), run, quiet=True)
        assert json.loads((run / RUN_MARKER).read_text()) == run_folders._MARKER
    # a marker someone else wrote is not taken for pretrain's
    (tmp_path / "new" / RUN_MARKER).write_text('{"written_by": "me"}')
    with pytest.raises(RunFolderError, match="is not the marker pretrain writes"): pretrain(tiny(), tmp_path / "new", quiet=True)


def test_a_run_folder_written_before_the_marker_still_resumes(finished, tmp_path):
    # the rule for folders of earlier versions: a valid configuration beside a zip checkpoint (then verified in full)
    old = copy_run(finished, tmp_path / "old")
    (old / RUN_MARKER).unlink()
    state = load_checkpoint(old / "checkpoint.pt")
    save_checkpoint(old / "checkpoint.pt", {**state, "config": {**state["config"], "epochs": 2}})  # one more epoch to go
    write_json_atomic(old / "config.json", {**state["config"], "epochs": 2})
    last = pretrain(tiny(epochs=2), old, quiet=True)
    assert last["epoch"] == 2 and (old / RUN_MARKER).exists()
    # the same files without the checkpoint, or with a checkpoint that is not pretrain's, are not taken for a run, even to restart
    for broken, error, message in (("no checkpoint", RunFolderError, "holds config.json, which pretrain did not write"),
                                   ("not a checkpoint", CheckpointError, "is not a readable checkpoint"),
                                   ("flipped byte", CheckpointError, "is damaged")):
        folder = copy_run(finished, tmp_path / broken.replace(" ", "_"))
        (folder / RUN_MARKER).unlink()
        if broken == "no checkpoint": (folder / "checkpoint.pt").unlink()
        elif broken == "not a checkpoint": (folder / "checkpoint.pt").write_bytes(b"my own bytes")
        else: flip_middle_byte(folder / "checkpoint.pt")
        before = {p.name: p.read_bytes() for p in folder.iterdir() if p.name != ".lock"}
        for restart in (False, True):
            with pytest.raises(error) as info: pretrain(tiny(), folder, quiet=True, restart=restart)
            assert message in str(info.value) and "restart=True" not in str(info.value)
        assert {p.name: p.read_bytes() for p in folder.iterdir() if p.name != ".lock"} == before


@pytest.mark.parametrize("text", ["{broken", '{"tau": 0}', "[1, 2]"])
def test_a_corrupt_config_json_in_a_run_folder_is_called_corrupt(finished, tmp_path, capsys, text):
    run = copy_run(finished, tmp_path / "run")
    (run / "config.json").write_text(text)
    with pytest.raises(RunFolderError) as info: pretrain(tiny(), run, quiet=True)
    message = str(info.value)
    assert "config.json is corrupt" in message and "was not written by pretrain" not in message and "delete config.json" in message
    code, err = run_main(capsys, "pretrain", "--out", str(run), *TINY_ARGS)
    assert code == 1 and "config.json is corrupt" in err and len(err.strip().splitlines()) == 1
    assert (run / "config.json").read_text() == text


def test_measurements_older_than_the_checkpoint_go_when_training_goes_on(finished, tmp_path):
    run = copy_run(finished, tmp_path / "run")
    state = load_checkpoint(run / "checkpoint.pt")
    save_checkpoint(run / "checkpoint.pt", {**state, "config": {**state["config"], "epochs": 2}})
    (run / "linear_eval.json").write_text('{"epoch": 1}')
    (run / "result.json").write_text('{"epoch": 1}')
    (run / "linear_eval_random_init.json").write_text('{"random": true}')  # the untrained encoder's: still true
    pretrain(tiny(epochs=2), run, quiet=True)  # epoch 2 trained: the epoch-1 measurements describe other weights
    assert not (run / "linear_eval.json").exists() and not (run / "result.json").exists()
    assert (run / "linear_eval_random_init.json").exists()
    (run / "linear_eval.json").write_text('{"epoch": 2}')
    pretrain(tiny(epochs=2), run, quiet=True)  # finished: nothing trained, the measurement stands
    assert (run / "linear_eval.json").read_text() == '{"epoch": 2}'


# ---------------------------------------------------------------- issue 24: absurd values are one sentence naming the option

@pytest.mark.parametrize("field, value, message", [
    ("image_size", 10**12, "image_size must be an integer in [4, 1024]"),
    ("width", 10**12, "width must be an integer in [1, 1024] (the ConvNet has 279·width² weights"),
    ("out_dim", 10**12, "out_dim must be an integer in [1, 65536] (the memory bank"),
    ("lr", 1e300, "lr must lie in (0, 1e+30] (SGD applies it as a float32"),
    ("weight_decay", 1e300, "weight_decay must lie in [0, 1e+30]"),
    ("lr", float("inf"), "lr must lie in (0, 1e+30]"),
    ("seed", 10**30, "seed must be an integer in [-1099511627776, 1099511627776]"),
])
def test_absurd_sizes_and_overflowing_numbers_are_refused_up_front(tmp_path, capsys, field, value, message):
    with pytest.raises(ValueError) as info: PretrainConfig(**{field: value})
    assert message in str(info.value)
    option = "--" + field.replace("_", "-")
    code, err = run_main(capsys, "pretrain", "--out", str(tmp_path / "run"), option, str(value), "--quiet")
    assert code == 2 and message in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_the_bounds_are_the_edges_that_work():
    # the largest values allowed are accepted, one more is refused; 279·width² counts the ConvNet's convolution weights
    for field, (high, _) in train_module.MAX_SIZES.items():
        PretrainConfig(**{field: high})
        with pytest.raises(ValueError, match=field): PretrainConfig(**{field: high + 1})
    from ctl_explore.models import SmallConvNet
    net = SmallConvNet(1, 8)
    convs = sum(m.weight.numel() for m in net.modules() if isinstance(m, torch.nn.Conv2d))
    assert convs == 279 * 8**2 + 9 * 1 * 8
    assert PretrainConfig(lr=1e30).lr == 1e30 and PretrainConfig(seed=-2**40).seed == -2**40


def test_overflowing_threads_name_the_option(tmp_path, capsys):
    with pytest.raises(ValueError, match=r"threads must be an integer >= 1 and at most 4096"): pretrain(tiny(), tmp_path / "a", threads=10**30)
    code, err = run_main(capsys, "pretrain", "--out", str(tmp_path / "b"), "--threads", str(10**30), *TINY_ARGS)
    assert code == 2 and "threads must be an integer >= 1 and at most 4096" in err and "Traceback" not in err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


# ---- ctl_explore.run_folders on its own (appendix 18): no training loop imported, and its readers

def test_run_folders_does_not_import_the_training_loop():
    code = "import sys, ctl_explore.run_folders\nassert 'ctl_explore.train' not in sys.modules, sorted(m for m in sys.modules if m.startswith('ctl_explore'))"
    subprocess.run([sys.executable, "-c", code], check=True, env=ENV)


def test_train_does_not_reexport_the_run_folder_names():
    "Each name has one home: the run folder's names are imported from ctl_explore.run_folders, not through the training loop."
    for name in ("write_atomic", "write_json_atomic", "save_checkpoint", "run_lock", "mark_run_folder", "remove_stale_measurements",
                 "CheckpointError", "RunFolderError", "RunBusyError", "RUN_MARKER", "CHECKPOINT_FORMAT", "STATE_KEYS"):
        assert name in run_folders.__all__ and name not in train_module.__all__


def test_readers_name_the_file(tmp_path):
    from ctl_explore.run_folders import read_config, read_json, read_metrics
    with pytest.raises(FileNotFoundError, match="holds no metrics.jsonl"): read_metrics(tmp_path)
    with pytest.raises(FileNotFoundError, match="holds no config.json"): read_config(tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"): read_json(tmp_path / "result.json")
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="holds a list, not a configuration"): read_config(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"config.json is not valid JSON"): read_config(tmp_path)
    write_json_atomic(tmp_path / "config.json", tiny().to_dict())
    assert PretrainConfig.from_dict(read_config(tmp_path)) == tiny()
    (tmp_path / "metrics.jsonl").write_text('{"epoch": 1, "loss": 2.5}\n\n{"epoch": 2, "loss": 2.0}\n')
    assert read_metrics(tmp_path) == [{"epoch": 1, "loss": 2.5}, {"epoch": 2, "loss": 2.0}]


def test_read_checkpoint_reads_the_configuration_with_the_given_function(tmp_path):
    from ctl_explore.run_folders import read_checkpoint
    state = dict(config=tiny().to_dict(), epoch=0, model={}, optimizer={}, bank={"features": torch.zeros(2, 2)},
                 generator=torch.Generator().get_state(), history=[])
    save_checkpoint(tmp_path / "checkpoint.pt", state)
    loaded, config = read_checkpoint(tmp_path / "checkpoint.pt", PretrainConfig.from_dict)
    assert config == tiny() and loaded["epoch"] == 0
    def refuse(d): raise ValueError("not mine")
    with pytest.raises(CheckpointError, match=r"its configuration is not valid \(not mine\)"):
        read_checkpoint(tmp_path / "checkpoint.pt", refuse)
