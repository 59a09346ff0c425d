"""Checkpoints at a cadence (appendix 29): every N epochs, at most once per S seconds, always at a learning-rate drop and
at the end, written in the background from a copy; a run killed between checkpoints resumes to exactly the numbers of an
uninterrupted one; SIGTERM saves the last finished epoch and exits with status 143 (TrainingTerminated)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

import ctl_explore.train as train
from ctl_explore.train import TIMING_KEYS, CheckpointWriter, PretrainConfig, TrainingTerminated, load_checkpoint, pretrain

SMALL = dict(width=4, out_dim=16, knn_k=20, batch_size=256, device="cpu", eval_every=50)
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def _written(monkeypatch) -> list[int]:
    "The epochs of the checkpoints written from now on."
    seen, real = [], train.save_checkpoint
    monkeypatch.setattr(train, "save_checkpoint", lambda path, state: seen.append(state["epoch"]) or real(path, state))
    return seen


def _same_run(a: dict, b: dict) -> None:
    "Two checkpoints hold the same run: weights, bank, generator, optimizer state and metrics (timings aside)."
    for key in a["model"]: assert torch.equal(a["model"][key], b["model"][key]), key
    for key in a["bank"]: assert torch.equal(a["bank"][key], b["bank"][key]), key
    assert torch.equal(a["generator"], b["generator"])
    sa, sb = a["optimizer"]["state"], b["optimizer"]["state"]
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k]["momentum_buffer"], sb[k]["momentum_buffer"]) for k in sa)
    strip = lambda h: [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in h]
    assert strip(a["history"]) == strip(b["history"]) and a["epoch"] == b["epoch"]


@pytest.mark.slow
def test_checkpoints_every_n_epochs_at_each_lr_drop_and_at_the_end(tmp_path, monkeypatch):
    torch.set_num_threads(1)
    config = PretrainConfig(epochs=9, warmup_epochs=1, lr_drops=(0.5,), **SMALL)  # the lr drops after epoch 4 (0.5 × 9)
    written = _written(monkeypatch)
    pretrain(config, tmp_path / "run", quiet=True, checkpoint_every=3)
    assert written == [3, 4, 6, 9]  # every third epoch, the last before the drop, the end
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 9  # a line every epoch still
    written.clear()
    pretrain(PretrainConfig(epochs=2, **SMALL), tmp_path / "default", quiet=True)
    assert written == [1, 2]  # the default: every epoch, as before
    written.clear()
    pretrain(PretrainConfig(epochs=3, **SMALL), tmp_path / "minute", quiet=True, checkpoint_s=60)
    assert written == [2, 3]  # at most once a minute: only the epoch before the lr drop (0.8 × 3 epochs) and the end


@pytest.mark.parametrize("bad, sentence", [
    (dict(checkpoint_every=0), "checkpoint_every must be an integer in [1, 3] (epochs), got 0"),
    (dict(checkpoint_every=True), "checkpoint_every must be an integer in [1, 3] (epochs), got True"),
    (dict(checkpoint_s=-1), "checkpoint_s must be a number of seconds in [0, 86400], got -1"),
    (dict(checkpoint_s=float("nan")), "checkpoint_s must be a number of seconds in [0, 86400], got nan"),
])
def test_a_bad_cadence_is_named(tmp_path, bad, sentence):
    with pytest.raises(ValueError, match=__import__("re").escape(sentence)):
        pretrain(PretrainConfig(epochs=3, **SMALL), tmp_path / "run", **bad)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_run_killed_between_checkpoints_resumes_to_the_uninterrupted_numbers(tmp_path, monkeypatch):
    torch.set_num_threads(1)
    config = PretrainConfig(epochs=6, warmup_epochs=1, lr_drops=(0.99,), **SMALL)  # no drop before the end: no forced checkpoint
    pretrain(config, tmp_path / "whole", quiet=True, checkpoint_every=4)
    # a kill during epoch 6: epoch 4's checkpoint is on disk, epoch 5's lines are in metrics.jsonl, its state only in memory
    real_epoch, real_finish = train._train_one_epoch, CheckpointWriter.finish
    def epoch(state, *a):
        if state.epoch == 5: raise SystemExit("killed")
        return real_epoch(state, *a)
    monkeypatch.setattr(train, "_train_one_epoch", epoch)
    monkeypatch.setattr(CheckpointWriter, "finish", lambda self: (self.wait(), self._thread.shutdown()))  # dies: no last write
    with pytest.raises(SystemExit): pretrain(config, tmp_path / "killed", quiet=True, checkpoint_every=4)
    assert load_checkpoint(tmp_path / "killed" / "checkpoint.pt")["epoch"] == 4
    assert len((tmp_path / "killed" / "metrics.jsonl").read_text().splitlines()) == 5
    monkeypatch.undo()
    torch.set_num_threads(1)
    pretrain(config, tmp_path / "killed", quiet=True, checkpoint_every=4)
    _same_run(load_checkpoint(tmp_path / "whole" / "checkpoint.pt"), load_checkpoint(tmp_path / "killed" / "checkpoint.pt"))
    assert [int(l.split('"epoch": ')[1].split(",")[0]) for l in (tmp_path / "killed" / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3, 4, 5, 6]


def test_a_failed_background_write_is_raised(tmp_path, monkeypatch):
    def full(path, state): raise OSError(28, "No space left on device", str(path))
    monkeypatch.setattr(train, "save_checkpoint", full)
    with pytest.raises(OSError, match="No space left on device"):
        pretrain(PretrainConfig(epochs=2, **SMALL), tmp_path / "run", quiet=True)


def test_sigterm_inside_pretrain_becomes_training_terminated(tmp_path, monkeypatch):
    "In-process: SIGTERM during an epoch saves the last finished one and raises TrainingTerminated (exit status 143); the handler is put back."
    torch.set_num_threads(1)
    before = signal.getsignal(signal.SIGTERM)
    real_epoch = train._train_one_epoch
    def epoch(state, *a):
        if state.epoch == 2: os.kill(os.getpid(), signal.SIGTERM); time.sleep(1)
        return real_epoch(state, *a)
    monkeypatch.setattr(train, "_train_one_epoch", epoch)
    with pytest.raises(TrainingTerminated) as caught:
        pretrain(PretrainConfig(epochs=5, **SMALL), tmp_path / "run", quiet=True, checkpoint_every=5)
    assert caught.value.exit_status == 143 and "stopped by SIGTERM at epoch 3 of 5 (2 finished epochs saved" in str(caught.value)
    assert load_checkpoint(tmp_path / "run" / "checkpoint.pt")["epoch"] == 2  # the cadence would have waited for epoch 5
    assert signal.getsignal(signal.SIGTERM) == before


@pytest.mark.slow
def test_sigterm_to_a_training_process_saves_exits_143_and_resumes_to_the_same_numbers(tmp_path):
    code = textwrap.dedent(f"""
        import sys, torch
        from ctl_explore.train import PretrainConfig, TrainingTerminated, pretrain
        torch.set_num_threads(1)
        try: pretrain(PretrainConfig(epochs=6, warmup_epochs=1, **{SMALL!r}), sys.argv[1], quiet=True, checkpoint_every=6)
        except TrainingTerminated as e: print(e, file=sys.stderr); sys.exit(e.exit_status)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "run")], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics, deadline = tmp_path / "run" / "metrics.jsonl", time.time() + 240
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 2):
        assert proc.poll() is None and time.time() < deadline, proc.communicate()[1][-2000:]
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143 and "stopped by SIGTERM" in err and "Traceback" not in err, err[-2000:]
    saved = load_checkpoint(tmp_path / "run" / "checkpoint.pt")["epoch"]
    assert 2 <= saved < 6  # the last finished epoch, though the cadence alone would have written only epoch 6
    torch.set_num_threads(1)
    config = PretrainConfig(epochs=6, warmup_epochs=1, **SMALL)
    pretrain(config, tmp_path / "run", quiet=True)
    pretrain(config, tmp_path / "whole", quiet=True)
    _same_run(load_checkpoint(tmp_path / "whole" / "checkpoint.pt"), load_checkpoint(tmp_path / "run" / "checkpoint.pt"))


# ---------------------------------------------------------------- issue 40 item 4: the CLI sets the cadence; one rule for all


def _cadence_asked(monkeypatch, device: str) -> list:
    "The (every, seconds) that `pretrain` hands its loop, the loop not run; `device` is what resolve_device answers."
    import contextlib
    asked = []
    monkeypatch.setattr(train, "resolve_device", lambda name: torch.device(device))
    monkeypatch.setattr(train.torch.cuda, "device", lambda d: contextlib.nullcontext())  # no GPU needed to enter it
    monkeypatch.setattr(train, "_init_distributed", lambda d: False)
    monkeypatch.setattr(train, "_pretrain", lambda *a, **k: asked.append(a[-1] if len(a) > 8 else k["cadence"]) or {})
    return asked


@pytest.mark.parametrize("device, every, seconds", [("cpu", 1, 0.0), ("cuda:0", 1, 60.0)])
def test_pretrains_default_cadence_is_the_rule_at_most_once_a_minute_on_cuda(tmp_path, monkeypatch, device, every, seconds):
    asked = _cadence_asked(monkeypatch, device)
    pretrain(PretrainConfig(epochs=3, **SMALL), tmp_path / "run")
    pretrain(PretrainConfig(epochs=3, **SMALL), tmp_path / "run", checkpoint_every=2, checkpoint_s=0)  # given: as given, on CUDA too
    assert asked == [(every, seconds), (2, 0.0)]
    assert train.checkpoint_cadence(device) == dict(checkpoint_every=every, checkpoint_s=seconds)


def test_the_study_and_the_cli_share_the_rule(tmp_path, monkeypatch):
    "A study's run asks `pretrain` for no cadence of its own, so `pretrain`'s one rule (`checkpoint_cadence`) applies, as for the CLI."
    from ctl_explore.study import workers
    calls = []
    monkeypatch.setattr(workers, "pretrain", lambda config, run_dir, **kw: calls.append(kw) or {})
    monkeypatch.setattr(workers, "_current", lambda run_dir, config, stretch: config)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # where a study's own rule would have said "once a minute"
    for device in ("cuda", "auto", "cpu"):
        workers._train(PretrainConfig(**{**SMALL, "epochs": 3, "device": device}), tmp_path / "run", None, (0, None))
    assert len(calls) == 3 and not [k for kw in calls for k in kw if k.startswith("checkpoint")], calls


def test_the_cli_hands_its_cadence_to_pretrain_and_names_a_bad_one(tmp_path, monkeypatch, capsys):
    from ctl_explore import cli
    given = []
    monkeypatch.setattr(train, "pretrain", lambda config, out, **kw: given.append(kw) or {"epoch": 1})
    base = ["pretrain", "--dataset", "digits", "--device", "cpu", "--out", str(tmp_path / "run")]
    assert cli.main([*base, "--checkpoint-every", "5", "--checkpoint-s", "30"]) == 0 and cli.main(base) == 0
    assert [(k["checkpoint_every"], k["checkpoint_s"]) for k in given] == [(5, 30.0), (None, None)]  # None: pretrain's rule
    monkeypatch.undo()
    with pytest.raises(SystemExit) as e: cli.main([*base, "--epochs", "3", "--checkpoint-every", "0"])
    assert e.value.code == 2 and "checkpoint_every must be an integer in [1, 3] (epochs), got 0" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------- issue 40 item 5: SIGTERM during set-up; the Slurm script requeues


def test_sigterm_during_set_up_exits_143(tmp_path, monkeypatch, capsys):
    from ctl_explore import cli
    before = signal.getsignal(signal.SIGTERM)
    def load(*a):  # SIGTERM while the data load (a download, ImageNet's decoding), before the first epoch
        os.kill(os.getpid(), signal.SIGTERM); time.sleep(5)
        pytest.fail("SIGTERM did not stop the set-up")
    monkeypatch.setattr(train, "_load_data", load)
    code = cli.main(["pretrain", "--dataset", "digits", "--device", "cpu", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 143 and err == ["ctl-explore: stopped by SIGTERM before training began (nothing new to save); run the same "
                                   "command to resume (exit status 143: requeue the job)"]
    assert signal.getsignal(signal.SIGTERM) == before


SLURM = Path(__file__).resolve().parents[1] / "scripts" / "slurm-study.sh"


@pytest.mark.parametrize("study_exit, requeued", [(143, True), (1, False)])
def test_the_slurm_script_passes_sigterm_on_and_requeues_on_143(tmp_path, study_exit, requeued):
    text = SLURM.read_text()
    assert "#SBATCH --requeue\n" in text and "#SBATCH --signal=B:TERM@120\n" in text
    assert not any(line.lstrip().startswith("exec ") for line in text.splitlines())  # the shell stays, to requeue
    bin_ = tmp_path / "bin"; bin_.mkdir()
    (bin_ / "ctl-explore").write_text(f"#!/usr/bin/env bash\necho \"$*\" > {tmp_path}/args\ntrap 'exit {study_exit}' TERM\n"
                                      f"touch {tmp_path}/started\nwhile true; do sleep 0.05; done\n")
    (bin_ / "scontrol").write_text(f"#!/usr/bin/env bash\necho \"$*\" >> {tmp_path}/scontrol\n")
    for f in bin_.iterdir(): f.chmod(0o755)
    env = {**ENV, "PATH": f"{bin_}:{os.environ['PATH']}", "SLURM_ARRAY_TASK_ID": "3", "SLURM_JOB_ID": "77"}
    job = subprocess.Popen(["bash", str(SLURM), "cifar10-paper", str(tmp_path / "s")], env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while not (tmp_path / "started").exists() and time.monotonic() < deadline: time.sleep(0.02)
    job.send_signal(signal.SIGTERM)  # what --signal=B:TERM@120 sends: to the batch shell only
    _, err = job.communicate(timeout=20)
    assert job.returncode == study_exit and (tmp_path / "args").read_text().split() == [
        "study", "--preset", "cifar10-paper", "--out", str(tmp_path / "s"), "--run", "3"]
    assert ((tmp_path / "scontrol").read_text() if requeued else "") == ("requeue 77\n" if requeued else "")
    assert (tmp_path / "scontrol").exists() == requeued and ("requeueing job 77" in err) == requeued
