"""The GPU benchmark (benchmarks/bench_gpu.py) at its toy size on the CPU, so that the script a GPU owner runs keeps working.

The toy step (ResNet18 under bf16 autocast on the CPU) costs about 0.23 CPU-s per image, linearly in the batch, so the
tests run the smallest batches (2 and 3), one timed step and no warm-up unless a test counts them: what they check is the
page, the rows and the control flow, not the numbers. Its two-process case under torchrun is in
test_train_distributed.py, which shares one torchrun launch among three tests."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_gpu.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_gpu", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_gpu"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("bench_gpu", None)


def test_toy_run_writes_the_table_beside_the_anchors(bench, tmp_path):
    out = tmp_path / "gpu.md"
    shipped = bench.RESULTS / "gpu.md"
    before = shipped.stat().st_mtime_ns if shipped.exists() else None
    rows = bench.main(["--toy", "--device", "cpu", "--rows", "8", "--batch", "2", "3", "--steps", "1", "--warmup", "0", "--out", str(out)])
    # one row per (negatives, batch): the memory bank of [WL21] and SimCLR's batch negatives
    assert [(r["negatives"], r["batch"], r["compile"], r["gpus"]) for r in rows] == [
        ("bank", 2, "off", 1), ("bank", 3, "off", 1), ("batch", 2, "off", 1), ("batch", 3, "off", 1)]
    assert all(r["images_per_s"] > 0 and r["ms_per_step"] > 0 for r in rows)
    text = out.read_text()
    table = [line for line in text.splitlines() if line.startswith("| bank |") or line.startswith("| batch |")]
    assert len(table) == 4
    assert "toy size on the CPU" in text and "CPU " in text and "torch " in text  # the machine's name is written
    for anchor in ("97.7 min", "A6000", "dkobak/simclr-cifar10", "8,400", "25,000", "H200"):
        assert anchor in text, anchor
    # the toy never overwrites the page of benchmarks/results/ that a GPU run writes
    assert (shipped.stat().st_mtime_ns if shipped.exists() else None) == before


def test_toy_writes_nothing_without_out(bench, tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "RESULTS", tmp_path / "results")
    rows = bench.main(["--toy", "--device", "cpu", "--rows", "4", "--batch", "2", "--steps", "1", "--warmup", "0", "--negatives", "batch"])
    assert len(rows) == 1 and rows[0]["images_per_s"] > 0
    assert not (tmp_path / "results").exists()


def test_full_size_defaults(bench, monkeypatch):
    monkeypatch.setattr(bench.torch.cuda, "is_available", lambda: True)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    args = bench.parse_args([])  # issue 40: the default set fits the first hour: 4 cases, 2 of them compiled
    assert (args.toy, args.device, args.batch, args.rows, args.compile, args.loss, args.repeats) == \
        (False, "cuda", [128], 50_000, ["off", "graph"], ["contrastive"], 3)
    assert args.negatives == ["bank", "batch"] and args.out == bench.RESULTS / "gpu.md"
    args = bench.parse_args(["--full"])  # the whole grid, behind a flag
    assert (args.batch, args.compile, args.loss, args.repeats) == ([128, 512], ["off", "encoder", "step", "graph"], list(bench.LOSSES), 5)
    assert bench.parse_args(["--full", "--batch", "256"]).batch == [256]  # an option given wins
    monkeypatch.setenv("WORLD_SIZE", "4")  # under torchrun: the memory bank only, and a page of its own
    args = bench.parse_args([])
    assert args.world == 4 and args.negatives == ["bank"] and args.out == bench.RESULTS / "gpu-4gpus.md"


@pytest.mark.parametrize("argv, message", [
    (["--batch", "1"], "--batch sizes must be at least 2"),
    (["--rows", "8", "--batch", "16"], "--batch 16 is larger than --rows 8"),
    (["--steps", "0"], "--steps must be an integer >= 1"),
    (["--compile", "maybe"], "invalid choice: 'maybe'"),
])
def test_bad_arguments_are_named(bench, capsys, argv, message):
    with pytest.raises(SystemExit):
        bench.parse_args(["--toy", "--device", "cpu"] + argv)
    assert message in capsys.readouterr().err


def test_cuda_asked_without_cuda(bench, capsys, monkeypatch):
    monkeypatch.setattr(bench.torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit):
        bench.parse_args(["--device", "cuda"])
    assert "CUDA is not available" in capsys.readouterr().err


def test_under_torchrun_the_bank_only_and_divisible_batches(bench, capsys, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    for argv, message in ((["--negatives", "batch"], "--negatives batch runs in one process only"),
                          (["--batch", "5", "--rows", "16"], "divisible by the 2 processes")):
        with pytest.raises(SystemExit): bench.parse_args(["--toy", "--device", "cpu"] + argv)
        assert message in capsys.readouterr().err


def test_it_times_pretrains_own_step(bench, monkeypatch):
    import ctl_explore.train
    assert bench.training_step is ctl_explore.train.training_step  # the step pretrain runs, not a copy
    calls = []
    monkeypatch.setattr(bench, "training_step", lambda *a: calls.append(a[-1]) or ctl_explore.train.training_step(*a))
    bench.main(["--toy", "--device", "cpu", "--rows", "4", "--batch", "2", "--steps", "2", "--warmup", "1", "--negatives", "bank"])
    assert calls == [slice(0, 2)] * 4  # one process: the whole global batch; the FLOP count's step, warm-up and timed steps


# ---------------------------------------------------------------- issue 24: rows as they finish, failures as rows, the hard loss, spread

def test_a_failing_case_leaves_the_others_rows_and_every_row_is_written_as_it_finishes(bench, tmp_path, monkeypatch):
    out = tmp_path / "gpu.md"
    real, seen = bench.time_case, []
    def case(images, batch, negatives, compile, *args):
        seen.append(out.read_text() if out.exists() else "")  # what the page held when this case started
        if negatives == "batch" and batch == 2: raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore details")
        return real(images, batch, negatives, compile, *args)
    monkeypatch.setattr(bench, "time_case", case)
    rows = bench.main(["--device", "cpu", "--tiny", "--rows", "8", "--batch", "2", "3", "--steps", "1", "--warmup", "0",
                       "--repeats", "2", "--out", str(out)])
    assert [(r["negatives"], r["batch"], r["error"] is None) for r in rows] == [
        ("bank", 2, True), ("bank", 3, True), ("batch", 2, False), ("batch", 3, True)]
    assert rows[2]["error"] == "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"
    # each case found the rows of the cases before it on the page already
    assert seen[0] == "" and seen[1].count("| bank | 2 |") == 1 and "In progress: 1 of 4" in seen[1]
    assert "| batch | 2 | 1 | off | contrastive | failed: RuntimeError: CUDA out of memory" in seen[3]
    text = out.read_text()
    lines = text.splitlines()
    assert "In progress" not in text and sum(l.startswith("| bank |") for l in lines) == 2 and sum(l.startswith("| batch |") for l in lines) == 2
    assert not [p for p in tmp_path.iterdir() if p.suffix == ".tmp"]
    for r in rows:
        if r["error"] is None: assert r["images_per_s_min"] <= r["images_per_s"] <= r["images_per_s_max"] and r["repeats"] == 2


@pytest.mark.slow
def test_the_script_exits_1_when_a_case_failed(tmp_path, monkeypatch, capsys):
    # the script as a GPU owner runs it (its `__main__`, run here by runpy: a fresh process would spend ~8 CPU-s on its
    # imports), with the hard loss's step made to fail (as an out-of-memory error would)
    import runpy
    import ctl_explore.train as train
    original = train.training_step
    def step(*args):
        if args[0].config.loss == "hard_contrastive": raise MemoryError("no room for the hard loss")
        return original(*args)
    monkeypatch.setattr(train, "training_step", step)  # the script imports it from ctl_explore.train when it runs
    out = tmp_path / "gpu.md"
    monkeypatch.setattr(sys, "argv", [str(BENCH), "--device", "cpu", "--tiny", "--rows", "4", "--batch", "2", "--steps", "1",
                                      "--warmup", "0", "--negatives", "bank", "--loss", "contrastive", "hard_contrastive", "--out", str(out)])
    with pytest.raises(SystemExit) as exited:
        runpy.run_path(str(BENCH), run_name="__main__")
    assert exited.value.code == 1, capsys.readouterr().out[-2000:]
    text = out.read_text()
    assert "| bank | 2 | 1 | off | contrastive | " in text and "failed" not in text.split("| contrastive |")[1].split("\n")[0]
    assert "| bank | 2 | 1 | off | hard_contrastive | failed: MemoryError: no room for the hard loss |" in text


def test_the_hard_loss_is_timed_and_the_page_names_the_versions(bench, tmp_path):
    out = tmp_path / "gpu.md"
    rows = bench.main(["--device", "cpu", "--tiny", "--rows", "8", "--batch", "2", "--steps", "1", "--warmup", "0",
                       "--repeats", "3", "--negatives", "bank", "--loss", "contrastive", "hard_contrastive", "--out", str(out)])
    assert [r["loss"] for r in rows] == ["contrastive", "hard_contrastive"] and all(r["error"] is None for r in rows)
    assert all(r["repeats"] == 3 and r["images_per_s_min"] <= r["images_per_s"] <= r["images_per_s_max"] for r in rows)
    text = out.read_text()
    import torch
    assert f"torch {torch.__version__}" in text and "CUDA (torch built with)" in text and "median" in text and "range" in text
    assert "| bank | 2 | 1 | off | hard_contrastive |" in text and "CUDA graphs are not used" in text


def test_full_size_repeats_and_both_losses_and_no_compile_under_torchrun(bench, capsys, monkeypatch):
    monkeypatch.setattr(bench.torch.cuda, "is_available", lambda: True)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    args = bench.parse_args(["--full"])
    assert args.repeats == 5 and args.loss == ["contrastive", "hard_contrastive"]
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert bench.parse_args([]).compile == ["off"]
    with pytest.raises(SystemExit): bench.parse_args(["--compile", "step"])
    assert "pretrain refuses torch.compile with several processes" in capsys.readouterr().err


def test_flops_and_mfu_are_written(bench, tmp_path, capsys):
    "Each row gets its step's TFLOP/s (torch's FLOP counter) and, given the GPU's peak, the MFU."
    out = tmp_path / "gpu.md"
    rows = bench.main(["--toy", "--out", str(out), "--peak-tflops", "0.001", "--negatives", "bank", "--batch", "2", "--rows", "4",
                       "--steps", "1", "--warmup", "0"])
    assert len(rows) == 1 and rows[0]["error"] is None and rows[0]["flops_per_step"] > 0
    text = out.read_text()
    assert "| TFLOP/s per GPU | MFU |" in text and "0.001 TFLOP/s" in text
    rows = [l for l in text.splitlines() if l.startswith("| bank |")]
    assert rows and all(l.rstrip(" |").endswith("%") for l in rows)
    assert bench.peak_tflops(torch.device("cpu")) is None and bench.peak_tflops(torch.device("cpu"), 989.4) == 989.4
    printed = [l for l in capsys.readouterr().out.splitlines() if "images/s" in l]  # issue 40: each case's line as it is measured
    assert len(printed) == 1 and "TFLOP/s" in printed[0] and "MFU" in printed[0] and printed[0].rstrip().endswith("%")
