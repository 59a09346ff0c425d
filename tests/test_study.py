"""The temperature study: the smoke preset end to end (results, figures, report; reuse on rerun), what a study folder
refuses (another configuration, damaged rows), workers and concurrent studies on one folder, the convergence criteria,
the curve-wide rules on hand-made tables that must pass and must fail, and the report opened in headless Chromium."""
from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from ctl_explore.losses import n_informative
from ctl_explore.study import (PRESETS, RESULT_KEYS, StudyError, StudyPreset, check_run, findings, load_results,
                               neighbour_purity, noise_margin, run_study, study_configs, study_figures, trend, usable,
                               write_report)
from ctl_explore.train import PretrainConfig


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("study") / "smoke"
    start = time.perf_counter()
    rows = run_study("smoke", out, quiet=True, workers=1)
    return out, rows, time.perf_counter() - start


def test_smoke_study_writes_tidy_results(smoke):
    out, rows, _ = smoke
    assert len(rows) == len(study_configs("smoke", 1438)) == 12
    with open(out / "results.csv") as f:
        table = list(csv.DictReader(f))
    assert len(table) == 12 and {"loss", "tau", "seed", "linear_top1", "uniformity", "tolerance", "alignment", "neighbour_purity",
                                  "converged", "collapsed", "pos_similarity", "top_negative_10", "wall_time_s"} <= set(table[0])
    assert json.loads((out / "results.json").read_text()) == rows == load_results(out / "results.json")
    for r in rows:
        assert 0 <= r["linear_top1"] <= 1 and r["uniformity"] >= 0 and -1 <= r["tolerance"] <= 1 and 0 <= r["neighbour_purity"] <= 1
        assert r["top10_negatives"] == sorted(r["top10_negatives"], reverse=True)
        assert [p["epoch"] for p in r["trajectory"]] == [1, 2, 3] and r["config"]["warmup_epochs"] == 1
        assert r["converged"] is False  # three epochs never converge: nothing of the smoke study counts as evidence
    assert {r["loss"] for r in rows} == {"contrastive", "hard_contrastive", "simple", "hard_simple"}


def test_wall_time_is_the_runs_whole_time(smoke):
    out, rows, first = smoke
    for r in rows:
        state = torch.load(out / "runs" / r["run"] / "checkpoint.pt", weights_only=True)
        trained = sum(h["epoch_time_s"] for h in state["history"])
        assert r["wall_time_s"] > trained  # evaluation, checkpoints and the measurement count too
    assert sum(r["wall_time_s"] for r in rows) <= first * 1.05


def test_rerun_reuses_finished_runs(smoke):
    out, rows, first = smoke
    stamps = {p: p.stat().st_mtime_ns for p in (out / "runs").glob("*/checkpoint.pt")}
    start = time.perf_counter()
    assert run_study("smoke", out, quiet=True, workers=1) == rows
    assert time.perf_counter() - start < first / 3
    assert stamps == {p: p.stat().st_mtime_ns for p in (out / "runs").glob("*/checkpoint.pt")}


def test_interrupted_study_continues(smoke, tmp_path):
    out, rows, _ = smoke
    partial = tmp_path / "partial"
    shutil.copytree(out, partial)
    for run in sorted((partial / "runs").iterdir())[:3]: (run / "result.json").unlink()  # as if killed before measuring
    again = run_study("smoke", partial, quiet=True, workers=1)
    strip = lambda rs: [{k: v for k, v in r.items() if k != "wall_time_s"} for r in rs]
    assert strip(again) == strip(rows)


def test_another_configuration_in_the_folder_is_refused(smoke, tmp_path):
    out, rows, _ = smoke
    copy = tmp_path / "S"
    shutil.copytree(out, copy)
    wider = dataclasses.replace(PRESETS["smoke"], width=8)
    with pytest.raises(StudyError, match=r"contrastive-tau0.1-seed0 holds a run of another configuration.*'width': \(4, 8\)"):
        run_study(wider, copy, quiet=True, workers=1)
    # the same when only the checkpoint is there (killed before its row was written)
    (copy / "runs" / "contrastive-tau0.1-seed0" / "result.json").unlink()
    with pytest.raises(StudyError, match="contrastive-tau0.1-seed0.*another configuration"):
        run_study(wider, copy, quiet=True, workers=1)


def test_damaged_checkpoint_stops_the_study_with_a_sentence(smoke, tmp_path):
    out, rows, _ = smoke
    copy = tmp_path / "S"
    shutil.copytree(out, copy)
    run = copy / "runs" / rows[0]["run"]
    (run / "result.json").unlink()
    data = bytearray((run / "checkpoint.pt").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (run / "checkpoint.pt").write_bytes(bytes(data))
    with pytest.raises(StudyError) as caught:
        run_study("smoke", copy, quiet=True, workers=1)
    message = str(caught.value)
    assert rows[0]["run"] in message and "delete" in message and "--restart" not in message and "restart=True" not in message


@pytest.mark.parametrize("content", ["", "null", "[]", '{"run": "x"}', "{not json", "\x00\xff"])
def test_damaged_result_is_measured_again_with_a_warning(smoke, tmp_path, content):
    out, rows, _ = smoke
    copy = tmp_path / "S"
    shutil.copytree(out, copy)
    name = rows[0]["run"]
    (copy / "runs" / name / "result.json").write_bytes(content.encode("latin-1"))
    with pytest.warns(UserWarning, match=f"{name}"):
        again = run_study("smoke", copy, quiet=True, workers=1)
    assert [r["uniformity"] for r in again] == [r["uniformity"] for r in rows]
    assert json.loads((copy / "runs" / name / "result.json").read_text())["run"] == name


def test_older_result_format_is_measured_again(smoke, tmp_path):
    out, rows, _ = smoke
    copy = tmp_path / "S"
    shutil.copytree(out, copy)
    path = copy / "runs" / rows[0]["run"] / "result.json"
    path.write_text(json.dumps({**rows[0], "result_format": "ctl_explore.study-result/1", "linear_top1": -1.0}))
    again = run_study("smoke", copy, quiet=True, workers=1)
    assert again[0]["linear_top1"] == rows[0]["linear_top1"]


TINY = StudyPreset("tiny", width=4, epochs=2, taus=(0.2, 0.5), seeds=(0,), simple_losses=False, linear_epochs=2)


def _strip(rows):
    return [{k: v for k, v in r.items() if k != "wall_time_s"} for r in rows]


def test_workers_give_the_serial_results(tmp_path):
    serial = run_study(TINY, tmp_path / "serial", quiet=True, workers=1)
    parallel = run_study(TINY, tmp_path / "parallel", quiet=True, workers=2)
    assert _strip(parallel) == _strip(serial)
    with pytest.raises(ValueError, match="workers must be an integer >= 1"):
        run_study(TINY, tmp_path / "x", workers=0)


def test_two_studies_share_one_folder(tmp_path):
    code = ("import sys, json; from ctl_explore.study import run_study, StudyPreset; "
            "p = StudyPreset('tiny', width=4, epochs=2, taus=(0.2, 0.5), seeds=(0,), simple_losses=False, linear_epochs=2); "
            "rows = run_study(p, sys.argv[1], quiet=True, workers=1, poll_s=0.2); print(json.dumps([r['run'] for r in rows]))")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "S")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    assert json.loads(outs[0][0]) == json.loads(outs[1][0])
    for run in (tmp_path / "S" / "runs").iterdir():
        lines = (run / "metrics.jsonl").read_text().splitlines()
        assert [json.loads(l)["epoch"] for l in lines] == [1, 2]  # one writer's records, not two interleaved
    assert not list((tmp_path / "S").rglob("*.tmp"))


def test_presets():
    assert {"smoke", "digits", "cifar10-paper", "cifar100-paper", "svhn-paper", "imagenet100-paper"} <= set(PRESETS)
    digits = PRESETS["digits"]
    assert len(digits.taus) >= 5 and len(digits.seeds) >= 3 and digits.warmup_epochs >= 1
    assert PRESETS["svhn-paper"].alpha == 0.0315 and PRESETS["imagenet100-paper"].backbone == "resnet50"
    for name, n in (("cifar10-paper", 50_000), ("svhn-paper", 73_257)):
        hard_simple = study_configs(name, n)[-1]
        assert hard_simple.loss == "hard_simple" and n_informative(n - 1, hard_simple.alpha) == 4095
    with pytest.raises(ValueError, match="preset must be one of"):
        run_study("mnist")


def test_check_run_criteria():
    cfg = PretrainConfig(epochs=100, warmup_epochs=10)
    settled = [dict(epoch=e, uniformity=3 - 2 * math.exp(-e / 10), knn_accuracy=0.95) for e in range(5, 101, 5)]
    climbing = [dict(epoch=e, uniformity=e / 30, knn_accuracy=0.9) for e in range(5, 101, 5)]
    knn_climbing = [dict(r, knn_accuracy=0.5 + r["epoch"] / 200) for r in settled]
    collapsed = [dict(epoch=e, uniformity=0.1, knn_accuracy=0.6) for e in range(5, 101, 5)]
    assert check_run(settled, cfg)["converged"] and not check_run(settled, cfg)["collapsed"]
    assert not check_run(climbing, cfg)["converged"]
    assert not check_run(knn_climbing, cfg)["converged"]
    assert check_run(collapsed, cfg)["collapsed"]
    assert not check_run(settled[:2], cfg)["converged"]  # too few measured epochs in the window to judge
    jolted = [dict(r, uniformity=r["uniformity"] - (0.6 if r["epoch"] == 70 else 0)) for r in settled]
    assert check_run(jolted, cfg)["converged"]  # one epoch caught mid-jolt by SGD does not decide it


def test_trend_and_margins():
    rng = np.random.default_rng(0)
    taus = np.repeat([0.05, 0.1, 0.2, 0.5, 1.0], 3)
    assert trend(taus, -taus + rng.normal(0, 0.02, 15)).direction(-1) == 1
    assert trend(taus, -taus + rng.normal(0, 0.02, 15)).direction(+1) == -1
    assert trend(taus, rng.normal(0, 1, 15)).direction(+1) == 0
    assert noise_margin((0.9, float("nan"), 1), (0.8, 0.0, 3)) == math.inf
    assert noise_margin((0.5, 0.0, 3), (0.5, 0.0, 3), n_test=359) == pytest.approx(1.96 * math.sqrt(2 * 0.25 / 359), rel=1e-3)
    # three seeds each: Welch's t with 4 degrees of freedom, not 2 standard errors
    assert noise_margin((0.5, 0.1, 3), (0.5, 0.1, 3)) == pytest.approx(2.776 * math.sqrt(2 * 0.01 / 3), rel=1e-3)


def test_neighbour_purity():
    z = torch.nn.functional.normalize(torch.tensor([[1., 0], [0.99, 0.1], [0, 1], [0.1, 0.99]]), dim=1)
    assert neighbour_purity(z, torch.tensor([0, 0, 1, 1]), k=1) == 1.0
    assert neighbour_purity(z, torch.tensor([0, 1, 0, 1]), k=1) == 0.0
    with pytest.raises(ValueError, match="k=4"):
        neighbour_purity(z, torch.tensor([0, 0, 1, 1]), k=4)


TAUS = (0.05, 0.1, 0.2, 0.3, 0.5, 1.0)


def _table(agree: bool = True, flat: bool = False, noise: float = 0.0, seeds=(0, 1, 2), rng_seed: int = 1):
    "Hand-made study rows: every metric a clean function of τ, as [WL21] says (agree) or the other way round, plus noise."
    rng, rows = np.random.default_rng(rng_seed), []
    for loss in ("contrastive", "hard_contrastive"):
        hard = loss == "hard_contrastive"
        for i, tau in enumerate(TAUS):
            x = 0 if flat else (i if agree else len(TAUS) - 1 - i) / (len(TAUS) - 1)
            peak = 0 if flat else (1 - abs(tau - 0.25) / 0.75 if agree else abs(tau - 0.25) / 0.75)
            for s in seeds:
                e = lambda: noise * rng.normal() + 0.002 * s
                rows.append(dict(loss=loss, tau=tau, seed=s, converged=True, collapsed=False, n_test=10_000,
                                 uniformity=(3.2 - (0.1 if agree else 1.5) * x if hard else 3.5 - x) + e(),
                                 tolerance=0.3 + 0.5 * x + e(),
                                 linear_top1=0.7 + 0.2 * peak + (0.2 * x if hard and agree else -0.2 * x if hard else 0) + e(),
                                 pos_similarity=0.6 + 0.3 * x + e(), top10_negatives=[0.1 + 0.5 * x + e()] * 10,
                                 neighbour_purity=0.8 + 0.1 * x + e()))
    simple, hard_simple = (0.7, 0.7) if flat else (0.5, 0.9) if agree else (0.95, 0.5)
    for loss, a in (("simple", simple), ("hard_simple", hard_simple)):
        rows += [dict(loss=loss, tau=None, seed=s, converged=True, collapsed=False, n_test=10_000, uniformity=2.0,
                      tolerance=0.5, linear_top1=a + noise * rng.normal() + 0.002 * s, pos_similarity=0.7,
                      top10_negatives=[0.4] * 10, neighbour_purity=0.8) for s in seeds]
    return rows


def test_rules_pass_a_table_that_agrees_and_fail_one_that_contradicts():
    assert [f.verdict for f in findings(_table(agree=True))] == ["reproduced"] * 6
    assert [f.verdict for f in findings(_table(agree=False))] == ["not reproduced"] * 6


def test_rules_conclude_nothing_from_noise():
    # at p < 0.05 one noise table in twenty shows a chance trend; over many, the rules must stay near that rate
    verdicts = [[f.verdict for f in findings(_table(flat=True, noise=0.02, rng_seed=s))] for s in range(40)]
    for i in range(6):
        concluded = sum(v[i] != "inconclusive at this scale" for v in verdicts) / len(verdicts)
        assert concluded <= 0.15, (i + 1, concluded)
    # one seed: no spread, so no difference between cells can be told (trends over τ still can)
    one = findings(_table(agree=True, seeds=(0,)))
    assert [one[i].verdict for i in (1, 2, 3)] == ["inconclusive at this scale"] * 3


def test_each_rule_fails_on_its_own_counterexample():
    base = _table(agree=True)
    def patch(rows, pred, **values):
        return [dict(r, **values) if pred(r) else r for r in rows]
    # finding 1: uniformity rising with τ
    f1 = [dict(r, uniformity=2 + r["tau"]) if r["loss"] == "contrastive" else r for r in base]
    assert findings(f1)[0].verdict == "not reproduced"
    # finding 2: the peak at the largest τ, far above the window's best
    f2 = patch(base, lambda r: r["loss"] == "contrastive" and r["tau"] == 1.0, linear_top1=0.99)
    assert findings(f2)[1].verdict == "not reproduced"
    # finding 2: an arm within the noise of the peak -> inconclusive, not reproduced
    peak = np.mean([r["linear_top1"] for r in base if r["loss"] == "contrastive" and r["tau"] == 0.2])
    f2b = [dict(r, linear_top1=peak - 0.003 + 0.002 * r["seed"]) if r["loss"] == "contrastive" and r["tau"] == 1.0 else r for r in base]
    assert findings(f2b)[1].verdict == "inconclusive at this scale"
    # finding 3: the hard loss's uniformity swings more than the ordinary loss's
    f3 = [dict(r, uniformity=1 + 2 * r["tau"]) if r["loss"] == "hard_contrastive" else r for r in base]
    assert findings(f3)[2].verdict == "not reproduced"
    # finding 4: Simple as good as the best ordinary run, or HardSimple far behind
    assert findings(patch(base, lambda r: r["loss"] == "simple", linear_top1=0.99))[3].verdict == "not reproduced"
    assert findings(patch(base, lambda r: r["loss"] == "hard_simple", linear_top1=0.3))[3].verdict == "not reproduced"
    # finding 5: the positive similarity falling with τ
    f5 = [dict(r, pos_similarity=0.9 - 0.3 * r["tau"]) if r["loss"] == "contrastive" else r for r in base]
    assert findings(f5)[4].verdict == "not reproduced"
    # finding 6: neighbour purity falling with τ, although uniformity still behaves
    f6 = [dict(r, neighbour_purity=0.9 - 0.1 * r["tau"] + 0.001 * r["seed"]) if r["loss"] == "contrastive" else r for r in base]
    assert findings(f6)[5].verdict == "not reproduced" and findings(f6)[0].verdict == "reproduced"


def test_collapsed_and_unconverged_runs_are_not_evidence():
    mixed = _table(agree=True) + [dict(r, collapsed=True) for r in _table(agree=False)] + \
            [dict(r, converged=False) for r in _table(agree=False)]
    assert len(usable(mixed)) == len(_table(agree=True))
    assert [f.verdict for f in findings(mixed)] == ["reproduced"] * 6


def test_figures_and_report(smoke, tmp_path):
    _, rows, _ = smoke
    assert set(study_figures(rows)) == {"uniformity_tolerance", "similarity_profile", "neighbour_purity", "accuracy"}
    good = _table(agree=True)
    for r in good:
        r.update(run=f"{r['loss']}-{r['tau']}-{r['seed']}", n_train=1438, uniformity_change=0.01, knn_change=0.0,
                 trajectory=[dict(epoch=e, uniformity=1.0, tolerance=0.5, knn_accuracy=0.9) for e in (5, 10)],
                 config=rows[0]["config"])
    text = write_report(good, tmp_path, "digits").read_text()
    assert "6 reproduced" in text and "at this scale" in text and "Reproducing" not in text
    text = write_report(rows, tmp_path, "smoke").read_text()
    assert "0 of 12 runs" in text and "0 reproduced" in text


CHROMIUM = os.environ.get("CTL_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="needs a system Chromium: `apt-get install -y --no-install-recommends chromium`")
def test_report_renders_in_chromium_without_errors(smoke):
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs Playwright for Python: `pip install playwright`")
    out, rows, _ = smoke
    report = write_report(rows, out, "smoke")
    errors = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        try:
            page = browser.new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: errors.append(f"network request: {r.url}") if not r.url.startswith(("file:", "data:", "blob:")) else None)
            page.goto(report.as_uri())
            page.wait_for_function("document.querySelectorAll('.js-plotly-plot .main-svg').length >= 3", timeout=30_000)
            drawn = page.evaluate("""() => [...document.querySelectorAll('.js-plotly-plot')].map(
                gd => ({id: gd.id, traces: gd.querySelectorAll('.scatterlayer .trace').length}))""")
            verdicts = page.locator("td.v").all_inner_texts()
        finally:
            browser.close()
    assert errors == []
    assert {d["id"] for d in drawn} == {"fig-trajectories", "fig-uniformity_tolerance", "fig-similarity_profile",
                                        "fig-neighbour_purity", "fig-accuracy"}
    assert next(d for d in drawn if d["id"] == "fig-trajectories")["traces"] >= 2, drawn  # smoke runs are all left out of the τ curves
    assert len(verdicts) == 6


# --- runs that have not settled are stretched (train until converged, capped) --------------------------------------------

STRETCHY = StudyPreset("stretchy", width=4, image_size=8, epochs=10, warmup_epochs=1, eval_every=1, taus=(0.5,), seeds=(0,),
                       simple_losses=False, linear_epochs=2, extend_epochs=5, max_epochs=20)


def _model(run_dir):
    return torch.load(run_dir / "checkpoint.pt", weights_only=True)


def test_unsettled_runs_are_stretched_up_to_the_cap(tmp_path, monkeypatch):
    import ctl_explore.study_runs as study
    torch.set_num_threads(1)
    monkeypatch.setattr(study, "_settled", lambda *a, **k: False)  # a window that never settles
    rows = run_study(STRETCHY, tmp_path / "s", quiet=True, workers=1)
    assert [r["config"]["epochs"] for r in rows] == [20, 20]
    for r in rows:
        state = _model(tmp_path / "s" / "runs" / r["run"])
        cfg = PretrainConfig.from_dict(state["config"])
        assert cfg.epochs == 20 and state["epoch"] == 20
        # every epoch trained under the schedule the run ended with: stretching changed no epoch already trained
        assert [h["lr"] for h in state["history"]] == pytest.approx([study.lr_at(cfg, e) for e in range(20)], rel=1e-12)
        assert [p["epoch"] for p in r["trajectory"]] == list(range(1, 21))
    # the finished, stretched rows are reused as they are: nothing trains again
    monkeypatch.setattr(study, "pretrain", lambda *a, **k: pytest.fail("a finished stretched run was trained again"))
    assert run_study(STRETCHY, tmp_path / "s", quiet=True, workers=1) == rows
    # where a run executes is not part of what it is: the rows and the stretch serve a study asked on another device
    asked = study_configs(STRETCHY, 1438)[0]
    elsewhere = dataclasses.replace(asked, device="cuda:1", compile=True)
    run_dir = tmp_path / "s" / "runs" / rows[0]["run"]
    assert study.saved_row(run_dir, elsewhere, STRETCHY.stretch) == rows[0]
    current = study._current(run_dir, elsewhere, STRETCHY.stretch)
    assert (current.epochs, current.device, current.compile) == (20, "cuda:1", True)
    with pytest.raises(StudyError, match="another configuration"):  # what it computes is
        study.saved_row(run_dir, dataclasses.replace(asked, tau=0.7), STRETCHY.stretch)
    # and a finished run cannot be stretched again: its epochs after the first drop had the old schedule's learning rate
    with pytest.raises(StudyError, match="past its first learning-rate drop"):
        study.stretch_run(tmp_path / "s" / "runs" / rows[0]["run"], 25)


def test_settled_runs_keep_their_schedule(tmp_path, monkeypatch):
    import ctl_explore.study_runs as study
    torch.set_num_threads(1)
    monkeypatch.setattr(study, "_settled", lambda *a, **k: True)
    rows = run_study(STRETCHY, tmp_path / "s", quiet=True, workers=1)
    assert [r["config"]["epochs"] for r in rows] == [10, 10]


def test_a_stretched_run_equals_one_planned_that_long(tmp_path, monkeypatch):
    "Stretched at its first drop and resumed by the study, a run is the very run that was configured with the longer schedule."
    import ctl_explore.study_runs as study
    from ctl_explore.train import pretrain
    torch.set_num_threads(1)
    preset = dataclasses.replace(STRETCHY, max_epochs=15)
    asked = study_configs(preset, 1438)[0]
    run_dir = tmp_path / "s" / "runs" / study.run_name(asked)
    pretrain(asked, run_dir, quiet=True, until_epoch=study.first_drop(asked))   # as if killed at the first drop...
    study.stretch_run(run_dir, 15)                                               # ...just after the stretch
    monkeypatch.setattr(study, "_settled", lambda *a, **k: False)
    rows = run_study(preset, tmp_path / "s", quiet=True, workers=1)
    assert rows[0]["config"]["epochs"] == 15
    planned = tmp_path / "planned"
    pretrain(dataclasses.replace(asked, epochs=15), planned, quiet=True)
    a, b = _model(run_dir), _model(planned)
    assert a["epoch"] == b["epoch"] == 15
    for k in b["model"]: assert torch.equal(a["model"][k], b["model"][k]), k
    assert torch.equal(a["bank"]["features"], b["bank"]["features"])


def test_stretch_rules():
    from ctl_explore.study import is_stretch
    base = PretrainConfig(epochs=200).to_dict()
    longer = lambda e, **kw: {**base, "epochs": e, **kw}
    assert is_stretch(longer(250), base, (50, 400)) and is_stretch(longer(400), base, (50, 400))
    assert not is_stretch(longer(450), base, (50, 400))          # past the cap
    assert not is_stretch(longer(230), base, (50, 400))          # not a whole step
    assert not is_stretch(longer(250, tau=0.7), base, (50, 400))  # another run
    assert not is_stretch(longer(250), base, (0, None))           # the preset does not stretch
    assert not is_stretch(base, base, (50, 400))
    with pytest.raises(ValueError, match="max_epochs must be an integer >= epochs"):
        StudyPreset("bad", epochs=200, extend_epochs=50, max_epochs=220)
    with pytest.raises(ValueError, match="extend_epochs must be an integer >= 0"):
        StudyPreset("bad", extend_epochs=-5)
    assert PRESETS["digits"].stretch == (50, 400) and PRESETS["cifar10-paper"].stretch == (0, None)


# --- a study past one machine: list, run one by index, gather ------------------------------------------------------------

CLUSTER = StudyPreset("cluster", width=4, image_size=8, epochs=6, warmup_epochs=1, eval_every=1, taus=(0.1, 0.2, 0.5), seeds=(0, 1),
                      simple_losses=False, linear_epochs=2)
_CLUSTER_CODE = (
    "import sys, time; from ctl_explore.study import StudyPreset, run_one, study_plan\n"
    "p = StudyPreset('cluster', width=4, image_size=8, epochs=6, warmup_epochs=1, eval_every=1, taus=(0.1, 0.2, 0.5), seeds=(0, 1), "
    "simple_losses=False, linear_epochs=2)\n"
    "n = len(study_plan(p, 1438)); start = int(sys.argv[2]); todo = [(start + k) % n for k in range(n)]\n"
    "while todo:\n"
    "    todo = [i for i in todo if run_one(p, i, sys.argv[1]) is None]\n"
    "    if todo: time.sleep(0.2)\n")


def test_cluster_tasks_share_a_folder_and_survive_a_killed_one(tmp_path):
    "Three job-array-like workers claim runs from one folder; one is killed mid-run; every run ends done once, as a serial study."
    from ctl_explore.study import gather, study_plan
    import signal
    shared = tmp_path / "shared"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    start = lambda offset: subprocess.Popen([sys.executable, "-c", _CLUSTER_CODE, str(shared), str(offset)], env=env,
                                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    victim = start(0)
    first = shared / "runs" / study_plan(CLUSTER, 1438)[0]["run"] / "metrics.jsonl"
    deadline = time.time() + 300
    while not (first.exists() and len(first.read_text().splitlines()) >= 2):
        assert victim.poll() is None and time.time() < deadline, victim.communicate()[1][-2000:]
        time.sleep(0.05)
    others = [start(4), start(8)]
    os.kill(victim.pid, signal.SIGKILL)  # mid-run: its lock goes with its process
    victim.wait()
    outs = [p.communicate(timeout=600) for p in others]
    assert [p.returncode for p in others] == [0, 0], [o[1][-2000:] for o in outs]
    rows, missing = gather(CLUSTER, shared)
    assert missing == [] and len(rows) == 12
    for item in study_plan(CLUSTER, 1438):  # every epoch of every run trained and recorded once
        lines = (shared / "runs" / item["run"] / "metrics.jsonl").read_text().splitlines()
        assert [json.loads(l)["epoch"] for l in lines] == list(range(1, 7)), item["run"]
    assert not list(shared.rglob("*.tmp"))
    torch.set_num_threads(1)
    serial = run_study(CLUSTER, tmp_path / "serial", quiet=True, workers=1)
    assert _strip(rows) == _strip(serial)


def test_run_one_gather_and_a_partial_report(tmp_path):
    from ctl_explore.study import gather, report_study, run_one, study_plan
    torch.set_num_threads(1)
    plan = study_plan(CLUSTER, 1438)
    assert [p["index"] for p in plan] == list(range(12)) and plan[0]["run"] == "contrastive-tau0.1-seed0"
    with pytest.raises(StudyError, match="holds no study"):
        gather(CLUSTER, tmp_path / "none")
    row = run_one(CLUSTER, 3, tmp_path / "s")
    assert row["run"] == plan[3]["run"] and run_one(CLUSTER, 3, tmp_path / "s") == row  # a finished run is reused
    rows, missing = gather(CLUSTER, tmp_path / "s")
    assert [r["run"] for r in rows] == [plan[3]["run"]] and len(missing) == 11
    report, left = report_study(CLUSTER, tmp_path / "s")
    assert left == missing and "This study is not finished" in report.read_text() and "11 of its 12 runs are missing" in report.read_text()
    for bad in (12, -1, 1.0, True):
        with pytest.raises(ValueError, match=r"index must be an integer in \[0, 11\]"):
            run_one(CLUSTER, bad, tmp_path / "s")
