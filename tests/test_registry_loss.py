"""A loss declared in one place is found everywhere a loss name is taken: `apply_loss` (and the memory bank and two-view
batches through it), the explorer's playground, the command line's `--loss`, `PretrainConfig` and `pretrain`, and a study
with its report. The toy loss is a softplus triplet over (pos, neg); it is registered for each test and removed afterwards."""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch
import torch.nn.functional as F

from ctl_explore.losses import LOSSES, LossSpec, apply_loss, loss_names, loss_spec, reduce_loss, register_loss
from ctl_explore.train import PretrainConfig


def toy_loss(pos, neg, tau, reduction="mean"):
    "Each anchor's mean over its negatives of softplus((s_ij − s_ii)/τ): a smooth triplet loss."
    return reduce_loss(F.softplus((neg - pos[:, None]) / tau).mean(dim=1), reduction)


TOY = LossSpec("toy", toy_loss, ("tau",), label="toy softplus triplet", color="#123456", paper="made up by the test")


@pytest.fixture
def toy():
    assert "toy" not in LOSSES
    spec = register_loss(TOY)
    try: yield spec
    finally: LOSSES.pop("toy", None)


def _sims(seed=0, b=6, k=10):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(b, generator=g) * 2 - 1, torch.rand(b, k, generator=g) * 2 - 1


def test_toy_is_applied_by_name(toy):
    assert loss_spec("toy") is toy and loss_names()[-1] == "toy" and "toy" in loss_names("similarity")
    assert "toy" not in loss_names("feature")
    pos, neg = _sims()
    torch.testing.assert_close(apply_loss("toy", pos, neg, tau=0.5), toy_loss(pos, neg, 0.5))
    torch.testing.assert_close(apply_loss("toy", pos, neg, reduction="none", tau=0.5), toy_loss(pos, neg, 0.5, "none"))
    with pytest.raises(ValueError, match="the toy loss needs tau"): apply_loss("toy", pos, neg)
    with pytest.raises(ValueError, match="the toy loss takes tau; it does not take alpha"): apply_loss("toy", pos, neg, tau=0.5, alpha=0.1)


def test_toy_runs_against_the_memory_bank_and_a_batch(toy):
    from ctl_explore.memory_bank import MemoryBank, batch_loss
    from ctl_explore.losses import pair_similarities
    g = torch.Generator().manual_seed(1)
    q, z2 = (F.normalize(torch.randn(8, 5, generator=g), dim=1) for _ in range(2))
    bank, idx = MemoryBank(20, 5, generator=g), torch.arange(8)
    torch.testing.assert_close(bank.loss(q, idx, "toy", tau=0.3), toy_loss(*bank.similarities(q, idx), 0.3))
    torch.testing.assert_close(batch_loss(q, z2, "toy", tau=0.3), toy_loss(*pair_similarities(q, z2), 0.3))


def test_toy_is_on_the_playground_menu(toy):
    from ctl_explore.explorer import HyperspherePlayground, playground_losses, sphere_loss, sphere_step
    assert playground_losses()["toy"] == "toy softplus triplet"
    assert "triplet_limit" not in playground_losses() and "simple_limit" not in playground_losses()
    pos, neg = _sims(2)
    torch.testing.assert_close(sphere_loss(pos, neg, "toy", 0.4, 0.1, 0.01), 0.4 * toy_loss(pos, neg, 0.4, "sum"))
    w = HyperspherePlayground(loss="toy", n_classes=2, per_class=5)
    assert ("toy softplus triplet", "toy") in w.loss_dropdown.options and w.loss_dropdown.value == "toy"
    w.step(2)
    assert w.n_steps == 2 and len(w.history["uniformity"]) == 3


def test_toy_is_gone_once_unregistered():
    assert "toy" not in LOSSES
    pos, neg = _sims()
    with pytest.raises(ValueError, match=r"loss must be one of \('contrastive'.*got 'toy'"): loss_spec("toy")
    with pytest.raises(ValueError, match="loss must be one of"): apply_loss("toy", pos, neg, tau=0.5)
    from ctl_explore.explorer import playground_losses
    assert "toy" not in playground_losses()


def test_registration_refuses_another_loss_under_a_taken_name(toy):
    assert register_loss(TOY) is TOY  # the same declaration again (a notebook cell run twice) changes nothing
    assert loss_spec("toy") is TOY
    with pytest.raises(ValueError, match="loss 'toy' is already registered"):
        register_loss(dataclasses.replace(TOY, label="another toy"))
    with pytest.raises(ValueError, match="loss 'contrastive' is already registered"):
        register_loss(dataclasses.replace(TOY, name="contrastive"))
    assert loss_spec("contrastive").label == "contrastive (Eq 1)"


def test_toy_is_named_in_a_finding_by_its_declared_word(toy):
    "The findings' texts read a loss's word from its declaration when written: its `short` word, else its label."
    from ctl_explore.study.findings import FINDINGS
    trend, hard = FINDINGS[1], FINDINGS[3]
    assert trend.statement(**{**trend.params, "loss": "toy"}).startswith("toy softplus triplet, uniformity falling")
    text = hard.statement(**{**hard.params, "hard": "toy"})
    assert "the toy softplus triplet's range of uniformity" in text and "below the ordinary loss's" in text
    LOSSES["toy"] = dataclasses.replace(TOY, short="toy triplet")  # declared again with a short word: read now, not at import
    assert "the toy triplet's accuracy lies above the ordinary loss's" in hard.statement(**{**hard.params, "hard": "toy"})
    assert "toy softplus" not in hard.statement(**{**hard.params, "hard": "toy"})
    with pytest.raises(ValueError, match="loss 'toy' is already registered"):  # the short word is part of what a declaration says
        register_loss(dataclasses.replace(TOY, short="another word"))
    import ctl_explore.generalized  # noqa: F401  lesson 11 declares its losses by position: the short word, declared last, moves none
    assert all(s.color.startswith("#") and s.short == "" for n, s in LOSSES.items() if s.level == "feature")


@pytest.mark.parametrize("change, message", [
    (dict(level="pixel"), r"loss 'toy': level must be one of \('similarity', 'feature'\), got 'pixel'"),
    (dict(name="two words"), "a loss's name must be a Python identifier"),
    (dict(fn=None), "loss 'toy': fn must be callable"),
    (dict(params=["tau"]), "loss 'toy': params must be a tuple"),
])
def test_a_bad_declaration_is_refused_naming_it(change, message):
    with pytest.raises(ValueError, match=message):
        register_loss(dataclasses.replace(TOY, **change))
    assert "toy" not in LOSSES and "two words" not in LOSSES


def test_toy_is_a_choice_of_the_command_line(toy, tmp_path, capsys):
    from ctl_explore.cli import build_parser
    with pytest.raises(SystemExit): build_parser().parse_args(["pretrain", "--help"])
    assert "toy" in capsys.readouterr().out
    assert build_parser().parse_args(["pretrain", "--loss", "toy", "--out", str(tmp_path / "run")]).loss == "toy"


def test_toy_pretrains_on_digits(toy, tmp_path):
    from ctl_explore.train import PretrainConfig, pretrain
    torch.set_num_threads(1)
    config = PretrainConfig(loss="toy", tau=0.5, epochs=1, width=4, out_dim=8, batch_size=64, knn_k=5, device="cpu")
    assert config.loss_params() == {"tau": 0.5}
    record = pretrain(config, tmp_path / "run", quiet=True)
    assert record["epoch"] == 1 and torch.isfinite(torch.tensor(record["loss"]))
    assert json.loads((tmp_path / "run" / "config.json").read_text())["loss"] == "toy"


def test_a_one_run_study_of_toy_records_its_hyper_parameters_and_reports_its_label(toy, tmp_path):
    "The toy, declared again with a weight λ of its negatives and a default for it, in a 1-run study named as on the command line: its row records the τ and λ its spec takes (λ by the spec's default), no α, and the report names it by its label."
    from ctl_explore.cli import study_preset
    from ctl_explore.study.report import write_report
    from ctl_explore.study.runner import run_study
    from ctl_explore.train import negatives_seen

    def weighted(pos, neg, tau, lam, reduction="mean"):
        return reduce_loss(F.softplus((lam * neg - pos[:, None]) / tau).mean(dim=1), reduction)
    LOSSES.pop("toy")
    register_loss(dataclasses.replace(TOY, fn=weighted, params=("tau", "lam"), default_lam=lambda n_negatives, alpha: 4 / n_negatives))
    torch.set_num_threads(1)
    preset = study_preset("smoke", [0.5], losses=["toy"], seeds=[0])  # resolved once, as `ctl-explore study --losses toy ...` does
    rows = run_study(preset, tmp_path / "study", quiet=True, device="cpu", workers=1)
    assert len(rows) == 1 and "failed" not in rows[0], rows
    row = rows[0]
    k = negatives_seen(PretrainConfig.from_dict(row["config"]), row["n_train"])
    assert (row["loss"], row["tau"], row["alpha"], row["lam"]) == ("toy", 0.5, None, 4 / k)  # from the spec's params, never its name
    html = write_report(rows, tmp_path / "study", preset).read_text()
    assert "toy-tau0.5-seed0" in html  # the run's row
    assert "toy softplus triplet" in html  # its registered label, in the trajectories' titles (a smoke run is never usable, so no table names it)