"""`ctl-explore study` from the command line: one sentence for every bad option, a user's folder refused with its files intact,
an invalid result.json named in a warning (never a traceback), failed runs named with their errors (exit status 1),
the state of each run in --list, and a Ctrl-C that says how many runs are saved."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

import ctl_explore.study.plan as plan
import ctl_explore.study.rows as rows_module
import ctl_explore.study.runner as runner
from ctl_explore.cli import main
from ctl_explore.study.plan import StudyPreset

TINY = StudyPreset.make("tiny", width=4, epochs=2, taus=(0.2, 0.5), seeds=(0,), simple_losses=False, linear_epochs=2)
WILD = dataclasses.replace(TINY.with_base(lr=1e6), name="wild")


@pytest.fixture(autouse=True)
def presets(monkeypatch):
    monkeypatch.setitem(plan.PRESETS, "tiny", TINY)
    monkeypatch.setitem(plan.PRESETS, "wild", WILD)
    torch.set_num_threads(1)


def _usage_error(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as caught:
        main(list(argv))
    err = capsys.readouterr().err
    assert caught.value.code == 2 and "Traceback" not in err
    return err.strip().splitlines()[-1]


@pytest.mark.parametrize("argv, says", [
    (["--workers", "0"], "argument --workers: must be a whole number >= 1 (worker processes), got '0'"),
    (["--workers", "two"], "argument --workers: must be a whole number >= 1 (worker processes), got 'two'"),
    (["--out", " "], "argument --out: must name a folder, not an empty string"),
    (["--preset", "cifar"], "argument --preset: invalid choice: 'cifar'"),
    (["--run", "4", "--out", "{tmp}/s"], "index must be an integer in [0, 3] (the study's 4 runs; see --list), got 4"),
    (["--run", "x"], "argument --run: invalid int value: 'x'"),
    (["--device", "gpu", "--list"], "device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got 'gpu'"),
    (["--list", "--report"], "argument --report: not allowed with argument --list"),
])
def test_a_bad_study_option_is_one_sentence(capsys, tmp_path, argv, says):
    line = _usage_error(capsys, "study", "--preset", "tiny", *[a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert says in line and line.startswith("ctl-explore")


def test_a_users_folder_is_refused_and_its_files_survive(capsys, tmp_path):
    files = {"results.csv": "my,table\n", "results.json": '{"mine": true}', "report.html": "<p>mine</p>", "metrics.jsonl": "{}\n"}
    for name, text in files.items(): (tmp_path / name).write_text(text)
    for extra in ([], ["--run", "0"]):
        assert main(["study", "--preset", "tiny", "--out", str(tmp_path), "--quiet", *extra]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "holds files this package did not write" in err and "Traceback" not in err
    assert main(["study", "--preset", "tiny", "--out", str(tmp_path), "--report"]) == 1
    assert "holds no study" in capsys.readouterr().err
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == files


def test_failed_runs_are_named_listed_and_reported(capsys, tmp_path):
    out = tmp_path / "w"
    assert main(["study", "--preset", "wild", "--out", str(out), "--quiet", "--workers", "1"]) == 1
    err = capsys.readouterr().err
    assert "4 of 4 runs failed (contrastive-tau0.2-seed0: TrainingDivergedError: training diverged at epoch 1" in err
    assert "Traceback" not in err and "training diverged" in (out / "report.html").read_text()
    assert main(["study", "--preset", "wild", "--out", str(out), "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("\tstate") and all("\tfailed: TrainingDivergedError: training diverged" in l for l in lines[1:])
    assert main(["study", "--preset", "wild", "--out", str(out), "--run", "1"]) == 1
    assert "run contrastive-tau0.5-seed0 failed: TrainingDivergedError" in capsys.readouterr().err


@pytest.mark.slow
def test_workers_lowered_and_failing_in_workers_are_said(capsys, tmp_path):
    assert main(["study", "--preset", "wild", "--out", str(tmp_path / "w"), "--quiet", "--workers", "8"]) == 1
    err = capsys.readouterr().err
    assert "ctl-explore: warning: workers lowered from 8 to" in err and "4 of 4 runs failed" in err and "Traceback" not in err
    rows = rows_module.load_results(tmp_path / "w" / "results.json")  # failed runs in workers become rows (what run_study returned)
    assert len(rows) == 4 and all(r["failed"].startswith("TrainingDivergedError") for r in rows)


def test_an_invalid_result_json_gets_a_sentence_not_a_traceback(capsys, tmp_path):
    out = tmp_path / "s"
    assert main(["study", "--preset", "tiny", "--out", str(out), "--quiet", "--workers", "1"]) == 0
    ended = capsys.readouterr().out  # the study ends with its verdicts, one line a finding, after where its files are
    table = ended.split("[WL21]'s findings at this scale:\n")[1].splitlines()
    assert "runs; results in" in ended and [line.split(".")[0] for line in table] == ["1", "2", "3", "4", "5", "6"]
    assert all(any(v in line for v in ("reproduced", "undecided at this scale")) for line in table)
    path = out / "runs" / "contrastive-tau0.2-seed0" / "result.json"
    row = json.loads(path.read_text())
    edited = {**row, "linear_top1": "high"}
    path.write_text(json.dumps({**edited, "checksum": rows_module.row_checksum(edited)}))
    assert main(["study", "--preset", "tiny", "--out", str(out), "--report"]) == 0
    said = capsys.readouterr()
    assert f"ctl-explore: warning: {path} is not a valid result row (linear_top1 must be a number in [0, 1], got 'high')" in said.err
    assert "1 run(s) not finished yet: contrastive-tau0.2-seed0" in said.out and "Traceback" not in said.err
    assert main(["study", "--preset", "tiny", "--out", str(out), "--list"]) == 0
    assert "contrastive-tau0.2-seed0\tcontrastive\t0.2\t0\t2\tstarted" in capsys.readouterr().out
    assert main(["study", "--preset", "tiny", "--out", str(out), "--quiet", "--workers", "1"]) == 0  # measured again
    assert "measuring run contrastive-tau0.2-seed0 again from its checkpoint" in capsys.readouterr().err
    assert isinstance(json.loads(path.read_text())["linear_top1"], float)


def test_ctrl_c_says_how_many_runs_are_saved(capsys, monkeypatch, tmp_path):
    def interrupted(*a, **k): raise runner.StudyInterrupted(10, 1, 12, tmp_path / "S")
    monkeypatch.setattr(runner, "run_study", interrupted)
    assert main(["study", "--preset", "tiny", "--out", str(tmp_path / "S")]) == 130
    err = capsys.readouterr().err
    assert "10 of its 12 runs finished and saved" in err and "1 failed" in err and "nothing saved" not in err


# ---- options made from the configuration's fields (one source for each option)

def test_every_config_field_is_an_option_described_by_its_comment():
    from fastcore.docments import docments
    from ctl_explore.cli import build_parser
    from ctl_explore.linear_eval import LinearEvalConfig
    from ctl_explore.train import PretrainConfig
    parser = build_parser()
    subs = parser._subparsers._group_actions[0].choices
    for command, cls in (("pretrain", PretrainConfig), ("linear-eval", LinearEvalConfig)):
        actions = {}
        for a in subs[command]._actions: actions.setdefault(a.dest, a)  # --compile before --no-compile
        for f in dataclasses.fields(cls):
            assert f.name in actions, f"{command}: no option for {cls.__name__}.{f.name}"
            assert actions[f.name].help.replace("%%", "%").startswith(docments(cls)[f.name]), f.name
            assert actions[f.name].default == f.default, f.name


def test_an_undocumented_field_is_refused_by_name():
    from ctl_explore.cli import field_help

    @dataclasses.dataclass
    class Half:
        said: int = 1  # a field with its comment
        unsaid: float = 2.0

    with pytest.raises(ValueError, match=r"Half's fields unsaid have no documenting comment"):
        field_help(Half)


def test_option_types_follow_the_annotations():
    from ctl_explore.cli import build_parser
    args = build_parser().parse_args(["pretrain", "--out", "x", "--image-size", "12", "--lam", "0.5", "--lr-drops", "0.5", "0.9",
                                      "--monitor-images", "100", "--compile", "step", "--stem", "cifar"])
    assert (args.image_size, args.lam, args.lr_drops, args.monitor_images, args.compile, args.stem) == (12, 0.5, [0.5, 0.9], 100, "step", "cifar")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["pretrain", "--out", "x", "--image-size", "1.5"])


def test_taus_replace_the_presets_grid_and_name_the_study():
    from ctl_explore.cli import study_preset
    from ctl_explore.study.plan import get_preset, study_configs
    p = study_preset("smoke", [0.5, 0.1, 0.5])
    assert p.taus == (0.1, 0.5) and p.name == "smoke-taus0.1-0.5"
    assert {c.tau for c in study_configs(p, 100) if c.loss == "contrastive"} == {0.1, 0.5}
    assert study_preset("smoke", None) is get_preset("smoke")
    with pytest.raises(ValueError, match="--taus must be a finite number > 0"):
        study_preset("smoke", [0.1, -1.0])


def test_losses_seeds_and_dataset_replace_the_presets_axes(capsys):
    "--losses, --seeds and --dataset, generated from the preset's fields, resolve the preset once and name the study after them."
    from ctl_explore.cli import study_preset
    assert main(["study", "--preset", "smoke", "--losses", "contrastive", "simple", "--seeds", "3", "--taus", "0.5", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[1] for line in lines[1:]] == ["contrastive-tau0.5-seed3", "simple-seed3"]
    p = study_preset("smoke", None, losses=["simple"], seeds=[1, 2], dataset="mnist")
    assert (p.losses, p.seeds, p.base.dataset, p.name) == (("simple",), (1, 2), "mnist", "smoke-lossessimple-seeds1-2-datasetmnist")
    with pytest.raises(SystemExit): main(["study", "--losses", "no_such_loss", "--list"])
    assert "invalid choice: 'no_such_loss'" in capsys.readouterr().err
    with pytest.raises(SystemExit): main(["study", "--preset", "smoke", "--seeds", "-1", "--list"])
    assert "each of seeds must be one of integer seeds >= 0, got -1" in capsys.readouterr().err


def test_taus_on_the_command_line(capsys):
    assert main(["study", "--preset", "smoke", "--taus", "0.3", "--list"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()[1:]
    assert {line.split("\t")[3] for line in lines if "\tcontrastive\t" in line} == {"0.3"}
