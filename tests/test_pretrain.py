"""Pretraining and linear evaluation end to end: exact resume after SIGKILL (the 2-process gloo run against one process is in
test_train_distributed.py, which shares its torchrun launch),
pretraining beating a random backbone, every loss without NaN (including [CLL20]'s feature losses of lesson 11), and
the command line's help and errors."""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from ctl_explore.linear_eval import LinearEvalConfig, linear_eval
from ctl_explore.losses import loss_names, loss_spec
from ctl_explore.run_folders import CheckpointError
from ctl_explore.train import TIMING_KEYS, PretrainConfig, default_lam, load_checkpoint, pretrain

LOSS_NAMES, FEATURE_LOSS_NAMES = loss_names("similarity"), loss_names("feature")  # lessons 00 and 11, read from the registry

# Runs in subprocesses share one environment, so that a killed-and-resumed run and an uninterrupted one compute
# with the same thread count (floating-point sums depend on it).
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
TINY = ["--width", "8", "--out-dim", "32", "--batch-size", "64", "--quiet"]


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    "`ctl-explore args` in a new process: about 7 CPU-s of imports and setup before its first step."
    return subprocess.run([sys.executable, "-m", "ctl_explore.cli", *args], env=ENV, capture_output=True, text=True,
                          timeout=timeout)


def cli_here(capsys, *args: str) -> subprocess.CompletedProcess:
    """`ctl-explore args` in this process, through the command's own `main` (its parser, its sentences, its exit status),
    where the test's point is the command rather than a process of its own. A traceback would escape and fail the test."""
    from ctl_explore.cli import main
    capsys.readouterr()
    try: code = main(list(args))
    except SystemExit as e: code = e.code
    out = capsys.readouterr()
    return subprocess.CompletedProcess(["ctl-explore", *args], code, out.out, out.err)


def history(run: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in load_checkpoint(run / "checkpoint.pt")["history"]]


@pytest.mark.slow
def test_resume_after_sigkill_gives_the_uninterrupted_metrics(tmp_path, capsys):
    # only the killed run needs a process of its own: the uninterrupted run and the resumption run here, with the same
    # single thread as the killed process (OMP_NUM_THREADS=1 there; pretrain's threads_for here), so the same sums
    args = ["pretrain", *TINY, "--epochs", "4"]
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    assert cli_here(capsys, *args, "--out", str(whole)).returncode == 0

    proc = subprocess.Popen([sys.executable, "-m", "ctl_explore.cli", *args, "--out", str(killed)], env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 240
        while time.time() < deadline:  # wait for the second epoch's checkpoint, then kill during the third epoch
            metrics = killed / "metrics.jsonl"
            if metrics.exists() and len(metrics.read_text().splitlines()) >= 2: break
            if proc.poll() is not None: pytest.fail("the run ended before it could be killed")
            time.sleep(0.05)
        time.sleep(0.3)
        assert proc.poll() is None, "the run finished before the kill: make it longer"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None: proc.kill()
    done = len(load_checkpoint(killed / "checkpoint.pt")["history"])
    assert 2 <= done < 4, done

    assert cli_here(capsys, *args, "--out", str(killed)).returncode == 0  # the same command again resumes
    assert history(killed) == history(whole)
    a, b = (load_checkpoint(r / "checkpoint.pt") for r in (whole, killed))
    for key in a["model"]: assert torch.equal(a["model"][key], b["model"][key]), key
    assert torch.equal(a["bank"]["features"], b["bank"]["features"])
    lines = [json.loads(l) for l in (killed / "metrics.jsonl").read_text().splitlines()]
    assert [l["epoch"] for l in lines] == [1, 2, 3, 4]  # no epoch lost or written twice
    assert not [p.name for p in killed.iterdir() if p.name.endswith(".tmp")]  # a temporary file of the killed writer is gone


@pytest.mark.slow
def test_short_digits_run_beats_random_backbone(tmp_path):
    torch.set_num_threads(1)
    pretrain(PretrainConfig(epochs=15, eval_every=15), tmp_path, quiet=True)  # measured once, at the end: the same weights
    probe = LinearEvalConfig(epochs=50)
    trained, untrained = linear_eval(tmp_path, probe)["top1"], linear_eval(tmp_path, probe, random_init=True)["top1"]
    assert trained > untrained + 0.04, (trained, untrained)


@pytest.mark.parametrize("loss", LOSS_NAMES)
def test_every_loss_trains_without_nan(tmp_path, loss):
    torch.set_num_threads(1)
    for tau in (0.05, 0.1, 0.2, 0.5, 1.0):
        cfg = PretrainConfig(loss=loss, tau=tau, alpha=0.1, epochs=1, width=4, out_dim=16, knn_k=20)
        last = pretrain(cfg, tmp_path / f"{tau}", quiet=True)
        assert all(math.isfinite(last[k]) for k in ("loss", "uniformity", "tolerance", "alignment", "knn_accuracy")), (tau, last)
        weights = load_checkpoint(tmp_path / f"{tau}" / "checkpoint.pt")["model"]
        assert all(torch.isfinite(w).all() for w in weights.values() if w.is_floating_point()), tau


def test_help_documents_every_option(capsys):
    "In-process (the parser is the command's): every field is an option; each command's --help exits 0."
    from ctl_explore.cli import main
    for argv in (["pretrain", "--help"], ["linear-eval", "--help"], ["--help"]):
        with pytest.raises(SystemExit) as e: main(argv)
        assert e.value.code == 0, argv
        if argv[0] == "pretrain":
            out = capsys.readouterr().out
            for field in PretrainConfig.__dataclass_fields__:
                assert "--" + field.replace("_", "-") in out, field


@pytest.mark.parametrize("args, message", [
    (["pretrain", "--out", "x", "--loss", "infonce"], "invalid choice: 'infonce'"),
    (["pretrain", "--out", "x", "--tau", "0"], "tau must be a finite number > 0"),
    (["pretrain", "--out", "x", "--epochs", "two"], "invalid int value"),
    (["pretrain", "--tau", "0.1"], "the following arguments are required: --out"),
    (["pretrain", "--out", "x", "--bogus"], "unrecognized arguments: --bogus"),
    (["train"], "invalid choice: 'train'"),
    (["pretrain", "--out", "x", "--loss", "nt_xent"], "needs negatives='batch'"),
    (["pretrain", "--out", "x", "--loss", "align_swd", "--negatives", "bank"], "needs negatives='batch'"),
])
def test_bad_options_are_errors_not_tracebacks(args, message, capsys, monkeypatch, tmp_path):
    "In-process: a usage error is SystemExit(2) with its sentence on stderr; any other exception would escape and fail the test."
    from ctl_explore.cli import main
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e: main(args)
    assert e.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x").exists()  # nothing written before the options were checked


@pytest.mark.slow
def test_a_bad_option_in_a_real_process_is_a_sentence_and_exit_2(tmp_path):
    "The same through the installed command's process: exit status 2, the sentence, no traceback."
    out = cli("pretrain", "--out", str(tmp_path / "x"), "--tau", "0")
    assert out.returncode == 2
    assert "tau must be a finite number > 0" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.slow
def test_corrupt_or_foreign_checkpoint_is_an_error_and_kept(tmp_path, capsys):
    ckpt = tmp_path / "checkpoint.pt"
    ckpt.write_bytes(b"not a checkpoint")
    out = cli_here(capsys, "pretrain", "--out", str(tmp_path), *TINY, "--epochs", "1")
    assert out.returncode == 1 and "is not a readable checkpoint" in out.stderr and "Traceback" not in out.stderr
    assert ckpt.read_bytes() == b"not a checkpoint"
    out = cli_here(capsys, "linear-eval", str(tmp_path / "nothing-here"))
    assert out.returncode == 1 and "pretrain into" in out.stderr


# ---------------------------------------------------------------- [CLL20]'s feature-level losses (lesson 11)

FEATURE_TINY = dict(negatives="batch", head="mlp", width=4, out_dim=16, knn_k=20, epochs=1)


@pytest.mark.parametrize("loss", FEATURE_LOSS_NAMES)
def test_every_feature_loss_trains_without_nan(tmp_path, loss):
    torch.set_num_threads(1)
    for tau, lam in ((0.05, 0.05), (0.5, 1.0), (1.0, 1000.0)):
        cfg = PretrainConfig(loss=loss, tau=tau, lam=lam, **FEATURE_TINY)
        assert set(cfg.loss_params()) == set(loss_spec(loss).params)
        last = pretrain(cfg, tmp_path / f"{tau}", quiet=True)
        assert all(math.isfinite(last[k]) for k in ("loss", "uniformity", "tolerance", "alignment", "knn_accuracy")), (tau, last)
        weights = load_checkpoint(tmp_path / f"{tau}" / "checkpoint.pt")["model"]
        assert all(torch.isfinite(w).all() for w in weights.values() if w.is_floating_point()), tau


@pytest.mark.parametrize("loss", FEATURE_LOSS_NAMES)
def test_feature_loss_with_the_memory_bank_is_refused(loss):
    with pytest.raises(ValueError, match="needs negatives='batch'"): PretrainConfig(loss=loss)
    with pytest.raises(ValueError, match="needs negatives='batch'"): PretrainConfig(loss=loss, negatives="bank")
    PretrainConfig(loss=loss, negatives="batch")  # the same loss against the batch is fine


def test_nt_xent_run_is_the_contrastive_run_with_batch_negatives(tmp_path):
    torch.set_num_threads(1)
    runs = {}
    for loss in ("nt_xent", "contrastive"):
        pretrain(PretrainConfig(loss=loss, tau=0.3, **FEATURE_TINY), tmp_path / loss, quiet=True)
        runs[loss] = load_checkpoint(tmp_path / loss / "checkpoint.pt")
    assert history(tmp_path / "nt_xent") == history(tmp_path / "contrastive")
    for key, w in runs["contrastive"]["model"].items(): assert torch.equal(runs["nt_xent"]["model"][key], w), key


def test_align_logsumexp_at_lambda_tau_retraces_nt_xent_with_rescaled_sgd(tmp_path):
    # τ·NT-Xent = align + τ·LSE − 1 on the sphere, and SGD with momentum on τ·L with lr/τ and weight decay·τ takes
    # exactly the steps SGD takes on L. In float32 the two runs differ by rounding, which training amplifies (a
    # near-collapsed embedding at initialisation is sensitive), so this compares two large steps (batch 512)
    torch.set_num_threads(1)
    tau, setting = 0.2, {**FEATURE_TINY, "batch_size": 512}
    a = PretrainConfig(loss="nt_xent", tau=tau, **setting)
    rescaled = dict(lr=a.lr / tau, weight_decay=a.weight_decay * tau, **setting)
    b = PretrainConfig(loss="align_logsumexp", tau=tau, lam=tau, **rescaled)
    c = PretrainConfig(loss="align_logsumexp", tau=tau, lam=4 * tau, **rescaled)  # another λ: another objective
    for name, cfg in (("a", a), ("b", b), ("c", c)): pretrain(cfg, tmp_path / name, quiet=True)
    (ra,), (rb,) = history(tmp_path / "a"), history(tmp_path / "b")
    assert math.isclose(tau * ra["loss"] + 1, rb["loss"], rel_tol=1e-5), (ra["loss"], rb["loss"])
    wa, wb, wc = (load_checkpoint(tmp_path / n / "checkpoint.pt")["model"] for n in "abc")
    keys = [k for k in wa if wa[k].is_floating_point()]
    for key in keys: torch.testing.assert_close(wb[key], wa[key], atol=1e-3, rtol=1e-3, msg=key)
    gap = lambda w: max((w[k] - wa[k]).abs().max().item() for k in keys)
    assert gap(wc) > 10 * gap(wb), (gap(wc), gap(wb))


def test_align_swd_run_resumes_to_the_uninterrupted_numbers(tmp_path):
    # SWD draws its projections from the run's generator, which the checkpoint carries: resuming is exact
    torch.set_num_threads(1)
    cfg = PretrainConfig(loss="align_swd", lam=100.0, **{**FEATURE_TINY, "epochs": 3})
    pretrain(cfg, tmp_path / "whole", quiet=True)
    pretrain(cfg, tmp_path / "pieces", quiet=True, until_epoch=1)
    pretrain(cfg, tmp_path / "pieces", quiet=True)
    assert history(tmp_path / "pieces") == history(tmp_path / "whole")
    a, b = (load_checkpoint(tmp_path / r / "checkpoint.pt")["model"] for r in ("whole", "pieces"))
    for key in a: assert torch.equal(a[key], b[key]), key


@pytest.mark.slow
def test_cli_trains_a_feature_loss(tmp_path, capsys):
    out = cli_here(capsys, "pretrain", *TINY, "--epochs", "1", "--loss", "align_swd", "--lam", "100", "--negatives", "batch",
              "--head", "mlp", "--out", str(tmp_path / "swd"))
    assert out.returncode == 0, out.stderr[-2000:]
    last = json.loads(out.stdout.splitlines()[-1])
    assert last["epoch"] == 1 and math.isfinite(last["loss"])
    assert json.loads((tmp_path / "swd" / "config.json").read_text())["loss"] == "align_swd"


@pytest.mark.slow
def test_simple_losses_default_to_eq7_lambda_and_train_the_studys_loss(tmp_path, capsys):
    # [WL21] Eq 7: the τ → ∞ limit is the simple loss with λ = 1/K. Left unset, lam resolves to 1/K over the negatives
    # the loss sees (the bank's n_train − 1 other rows; HardSimple's ⌈αK⌉ kept ones), which is what the study passes
    torch.set_num_threads(1)
    from ctl_explore.losses import n_informative
    from ctl_explore.study.plan import PRESETS, study_configs
    tiny = dict(epochs=1, width=4, out_dim=16, knn_k=20, device="cpu")
    k = 1437  # the digits' training split has 1438 images
    for loss, explicit in (("simple", 1 / k), ("hard_simple", 1 / n_informative(k, 0.0819))):
        default, given, other = (PretrainConfig(loss=loss, lam=lam, **tiny) for lam in (None, explicit, 1.0))
        assert default.lam is None and default.loss_params(k) == {**given.loss_params(), "lam": explicit}
        for name, cfg in (("default", default), ("given", given), ("other", other)): pretrain(cfg, tmp_path / f"{loss}-{name}", quiet=True)
        w = {n: load_checkpoint(tmp_path / f"{loss}-{n}" / "checkpoint.pt")["model"] for n in ("default", "given", "other")}
        for key in w["given"]: assert torch.equal(w["default"][key], w["given"][key]), (loss, key)
        assert any(not torch.equal(w["other"][key], w["given"][key]) for key in w["given"]), loss  # λ = 1: another loss
    # the study passes exactly the default λ; its shipped rows, which saved lam 1.0 for the softmax losses (the old
    # default, never read), compare equal to the configurations it makes now, which leave lam unset there
    for cfg in study_configs(PRESETS["digits"], 1438):
        if cfg.loss in ("simple", "hard_simple"): assert cfg.lam == default_lam(cfg.loss, k, cfg.alpha), cfg
        else: assert cfg.lam is None, cfg
    shipped = Path(__file__).parents[1] / "data" / "study-digits"
    older = json.loads((shipped / "third-run" / "results.json").read_text())  # written before the default changed
    assert {r["config"]["lam"] for r in older if r["loss"] == "contrastive"} == {1.0}
    rows = older + json.loads((shipped / "results.json").read_text())
    for row in rows:
        now = {**row["config"], "lam": row["config"]["lam"] if row["loss"] in ("simple", "hard_simple") else None}
        assert PretrainConfig.from_dict(row["config"]).to_dict() == PretrainConfig.from_dict(now).to_dict(), row["run"]
    # a checkpoint saved with an explicit λ loads against the same configuration, and not against the Eq 7 default
    with pytest.raises(CheckpointError, match="'lam': \\(1.0, None\\)"):
        load_checkpoint(tmp_path / "simple-other" / "checkpoint.pt", PretrainConfig(loss="simple", **tiny))
    assert load_checkpoint(tmp_path / "simple-other" / "checkpoint.pt", PretrainConfig(loss="simple", lam=1.0, **tiny))["epoch"] == 1
    help_text = cli_here(capsys, "pretrain", "--help").stdout
    assert "1/K" in help_text and "Eq 7" in help_text


@pytest.mark.parametrize("loss", ["contrastive", "hard_contrastive"])
def test_bfloat16_bank_trains_close_to_float32(tmp_path, loss):
    torch.set_num_threads(1)
    common = dict(loss=loss, tau=0.2, alpha=0.1, epochs=2, width=4, out_dim=16, knn_k=20)
    runs = {p: pretrain(PretrainConfig(bank_precision=p, **common), tmp_path / p, quiet=True) for p in ("fp32", "bf16")}
    assert load_checkpoint(tmp_path / "bf16" / "checkpoint.pt")["bank"]["features"].dtype == torch.bfloat16
    assert load_checkpoint(tmp_path / "fp32" / "checkpoint.pt")["bank"]["features"].dtype == torch.float32
    assert all(math.isfinite(runs["bf16"][k]) for k in ("loss", "uniformity", "knn_accuracy"))
    # rounding the bank to ~3 digits changes the trajectory, not the outcome: the loss and the kNN accuracy stay close
    assert abs(runs["bf16"]["loss"] - runs["fp32"]["loss"]) < 0.1 * runs["fp32"]["loss"], runs
    assert abs(runs["bf16"]["knn_accuracy"] - runs["fp32"]["knn_accuracy"]) < 0.1, runs


@pytest.mark.slow
def test_cli_bank_precision_option(tmp_path, capsys):
    out = cli_here(capsys, "pretrain", *TINY, "--epochs", "1", "--bank-precision", "bf16", "--out", str(tmp_path / "bf16"))
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads((tmp_path / "bf16" / "config.json").read_text())["bank_precision"] == "bf16"
    bad = cli_here(capsys, "pretrain", *TINY, "--bank-precision", "fp16", "--out", str(tmp_path / "bad"))
    assert bad.returncode != 0 and "bank-precision" in bad.stderr


# ---------------------------------------------------------------- hooks for the study: warm-up, sparse measuring, wall time, threads

SMALL = dict(width=4, out_dim=16, knn_k=20, batch_size=64)


def test_eval_every_measures_sparsely_and_trains_the_same_weights(tmp_path):
    from ctl_explore.train import METRIC_KEYS
    runs = {k: pretrain(PretrainConfig(epochs=3, eval_every=k, **SMALL), tmp_path / str(k), quiet=True) for k in (1, 2)}
    every, sparse = (load_checkpoint(tmp_path / str(k) / "checkpoint.pt") for k in (1, 2))
    assert [set(METRIC_KEYS) <= set(r) for r in sparse["history"]] == [False, True, True]  # epoch 2, and the last
    assert not set(METRIC_KEYS) & set(sparse["history"][0])
    assert runs[2] == sparse["history"][-1]
    for key in every["model"]: assert torch.equal(every["model"][key], sparse["model"][key]), key
    assert torch.equal(every["bank"]["features"], sparse["bank"]["features"])


def test_wall_time_is_cumulative_over_sessions(tmp_path):
    cfg = PretrainConfig(epochs=3, **SMALL)
    pretrain(cfg, tmp_path, quiet=True, until_epoch=2)
    first = load_checkpoint(tmp_path / "checkpoint.pt")
    pretrain(cfg, tmp_path, quiet=True)
    state = load_checkpoint(tmp_path / "checkpoint.pt")
    walls = [r["wall_time_s"] for r in state["history"]]
    assert walls[:2] == [r["wall_time_s"] for r in first["history"]]
    assert walls[2] > walls[1] + state["history"][2]["epoch_time_s"]  # the second session adds its setup and epoch
    assert state["wall_time_s"] == walls[-1] and walls[0] > state["history"][0]["epoch_time_s"]


def test_warmup_schedule_is_used(tmp_path):
    pretrain(PretrainConfig(epochs=3, warmup_epochs=2, lr=0.02, lr_drops=(0.9,), **SMALL), tmp_path, quiet=True)
    lrs = [r["lr"] for r in load_checkpoint(tmp_path / "checkpoint.pt")["history"]]
    assert lrs == pytest.approx([0.01, 0.02, 0.02])  # warm-up; the drop after 90% comes after the last epoch


def test_threads_are_set_for_the_run_and_restored(tmp_path, monkeypatch):
    from ctl_explore.train import threads_for
    assert threads_for(PretrainConfig(device="cpu")) == 1 and threads_for(PretrainConfig(device="cpu", backbone="resnet18")) is None
    seen, real = [], torch.set_num_threads
    monkeypatch.setattr(torch, "set_num_threads", lambda n: (seen.append(n), real(n)))
    before = torch.get_num_threads()
    pretrain(PretrainConfig(epochs=1, device="cpu", **SMALL), tmp_path / "auto", quiet=True)
    pretrain(PretrainConfig(epochs=1, device="cpu", **SMALL), tmp_path / "two", quiet=True, threads=2)
    assert seen == [1, before, 2, before] and torch.get_num_threads() == before
    with pytest.raises(ValueError, match="threads must be an integer >= 1"): pretrain(PretrainConfig(), tmp_path / "x", threads=0)


def test_training_interrupted_survives_pickling(tmp_path):
    "A worker's Ctrl-C reaches its parent process as itself (ProcessPoolExecutor pickles the exception)."
    import pickle
    from ctl_explore.train import TrainingInterrupted
    e = pickle.loads(pickle.dumps(TrainingInterrupted(3, 10, tmp_path)))
    assert isinstance(e, TrainingInterrupted) and (e.epoch, e.epochs, e.out_dir) == (3, 10, tmp_path)
    assert str(e) == str(TrainingInterrupted(3, 10, tmp_path))


# ---- the loop's state (lesson 07, "The loop"), and the configuration's documented fields

def test_a_new_state_checkpoints_exactly_the_state_keys():
    from ctl_explore.data import load_dataset
    from ctl_explore.run_folders import STATE_KEYS
    from ctl_explore.train import new_state
    config = PretrainConfig(width=4, out_dim=16, batch_size=32, device="cpu")
    state = new_state(config, load_dataset("digits", train=True), torch.device("cpu"))
    assert state.net is state.model and state.step is None and state.epoch == 0 and state.history == []
    assert state.loss_params == {"tau": 0.2}
    assert list(state.checkpoint(1.5)) == [*STATE_KEYS, "wall_time_s"]
    # the same seed builds the same run: equal weights, bank and generator
    again = new_state(config, load_dataset("digits", train=True), torch.device("cpu"))
    assert all(torch.equal(a, b) for a, b in zip(state.model.state_dict().values(), again.model.state_dict().values()))
    assert torch.equal(state.bank.features, again.bank.features) and torch.equal(state.generator.get_state(), again.generator.get_state())


def test_every_configuration_field_documents_its_option():
    from fastcore.docments import docments
    docs = {k: v for k, v in docments(PretrainConfig).items() if k != "return"}
    assert [k for k, v in docs.items() if not v] == []  # the command line's help is generated from these comments
    assert "(default: fp32)" in docs["bank_precision"] and "[WL21] Eq 7" in docs["lam"]


def test_default_lam_is_the_registrys():
    from ctl_explore.losses import loss_spec
    for loss, n in (("simple", 1437), ("hard_simple", 1437), ("decoupled_nt_xent", 254), ("align_swd", 254)):
        assert default_lam(loss, n) == loss_spec(loss).default_lam(n, 0.0819)
    with pytest.raises(ValueError, match="takes no λ"): default_lam("contrastive", 10)
    with pytest.raises(ValueError, match=r"default λ is 1/K \(\[WL21\] Eq 7\)"): default_lam("simple")
    with pytest.raises(ValueError, match=r"got True"): default_lam("hard_simple", True)
