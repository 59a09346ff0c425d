"""The GPU benchmark (benchmarks/bench_gpu.py) at its toy size on the CPU, so that the script a GPU owner runs keeps working."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

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
    rows = bench.main(["--toy", "--device", "cpu", "--rows", "32", "--batch", "4", "8", "--steps", "1", "--out", str(out)])
    # one row per (negatives, batch): the memory bank of [WL21] and SimCLR's batch negatives
    assert [(r["negatives"], r["batch"], r["compile"]) for r in rows] == [("bank", 4, False), ("bank", 8, False),
                                                                         ("batch", 4, False), ("batch", 8, False)]
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
    rows = bench.main(["--toy", "--device", "cpu", "--rows", "16", "--batch", "4", "--steps", "1", "--warmup", "0", "--negatives", "batch"])
    assert len(rows) == 1 and rows[0]["images_per_s"] > 0
    assert not (tmp_path / "results").exists()


def test_full_size_defaults(bench, monkeypatch):
    monkeypatch.setattr(bench.torch.cuda, "is_available", lambda: True)
    args = bench.parse_args([])
    assert (args.toy, args.device, args.batch, args.rows, args.compile) == (False, "cuda", [128, 512], 50_000, "both")
    assert args.out == bench.RESULTS / "gpu.md"


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
