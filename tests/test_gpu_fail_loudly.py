"""Issue 32 item 1 on the CPU: when torch cannot use a GPU, one sentence says why (the GPUs hidden by
CUDA_VISIBLE_DEVICES, no NVIDIA GPU, or a driver too old for the wheel's CUDA, with the install line of a wheel that
fits), `require_cuda` stops with it, and device 'auto' says once which device it chose. Each machine is faked."""
from __future__ import annotations

import subprocess

import pytest
import torch

import ctl_explore.distributed as distributed_mod
from ctl_explore.distributed import CUDA12_INDEX, CudaUnavailableError, cuda_problem, require_cuda, resolve_device


class _Smi:
    "subprocess.run as nvidia-smi answers: `driver` on stdout, or a failure."
    def __init__(self, driver: str | None): self.driver, self.calls = driver, 0
    def __call__(self, cmd, **kw):
        self.calls += 1
        assert cmd[0].endswith("nvidia-smi") and "--query-gpu=driver_version" in cmd
        if self.driver is None: return subprocess.CompletedProcess(cmd, 9, "", "NVIDIA-SMI has failed")
        return subprocess.CompletedProcess(cmd, 0, f"{self.driver}\n", "")


def fake_machine(monkeypatch, *, cuda: bool, smi: str | None | bool, files: list[str], wheel: str | None = "13.0",
                 visible: str | None = None):
    "A machine as the checks see it: torch's CUDA, nvidia-smi (False: absent; None: present but failing; else its driver), /dev files, the env."
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.version, "cuda", wheel)
    monkeypatch.setattr(distributed_mod.shutil, "which", lambda name: None if smi is False else "/usr/bin/nvidia-smi")
    runner = _Smi(None if smi is False else smi)
    monkeypatch.setattr(distributed_mod.subprocess, "run", runner)
    monkeypatch.setattr(distributed_mod.glob, "glob", lambda pattern: list(files) if pattern == "/dev/nvidia*" else [])
    if visible is None: monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else: monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    for name in ("WORLD_SIZE", "LOCAL_RANK", "RANK"): monkeypatch.delenv(name, raising=False)
    return runner


def test_an_old_driver_is_named_with_the_wheel_and_the_install_line(monkeypatch):
    fake_machine(monkeypatch, cuda=False, smi="550.54.15", files=["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"])
    problem = cuda_problem()
    assert "driver is 550.54.15" in problem and "built for CUDA 13.0" in problem and "needs driver 580 or later" in problem
    version = torch.__version__.split("+")[0]
    assert f"pip install torch=={version} --index-url {CUDA12_INDEX}" in problem and problem.count(".") < 12  # one sentence
    with pytest.raises(CudaUnavailableError, match=r"^the cifar10-paper preset needs a CUDA GPU, but this machine has an NVIDIA GPU"):
        require_cuda("the cifar10-paper preset")


def test_device_files_alone_are_a_gpu_and_a_failing_nvidia_smi_is_said(monkeypatch):
    fake_machine(monkeypatch, cuda=False, smi=None, files=["/dev/nvidia0", "/dev/nvidiactl"])
    assert "driver is unknown (nvidia-smi did not answer)" in cuda_problem()


def test_control_files_without_a_gpu_are_no_gpu(monkeypatch):
    # /dev/nvidiactl and /dev/nvidia-uvm exist where a driver is installed; only /dev/nvidiaN is a GPU
    fake_machine(monkeypatch, cuda=False, smi=False, files=["/dev/nvidiactl", "/dev/nvidia-uvm"])
    assert cuda_problem().startswith("no NVIDIA GPU on this machine")


def test_a_torch_built_without_cuda_is_named(monkeypatch):
    fake_machine(monkeypatch, cuda=False, smi="580.65.06", files=["/dev/nvidia0"], wheel=None)
    problem = cuda_problem()
    assert "built without CUDA" in problem and f"--index-url {CUDA12_INDEX}" in problem and "580.65.06" in problem


@pytest.mark.parametrize("visible", ["", "NoDevFiles", " ", "-1"])
def test_hidden_gpus_are_said_before_anything_else(monkeypatch, visible):
    runner = fake_machine(monkeypatch, cuda=False, smi="580.65.06", files=["/dev/nvidia0"], visible=visible)
    assert cuda_problem().startswith("CUDA_VISIBLE_DEVICES hides every GPU")
    assert runner.calls == 0  # nvidia-smi is not even asked
    with pytest.raises(CudaUnavailableError, match="hides every GPU"): resolve_device("cuda")


def test_no_gpu_at_all(monkeypatch):
    fake_machine(monkeypatch, cuda=False, smi=False, files=[])
    assert cuda_problem().startswith("no NVIDIA GPU on this machine")
    with pytest.raises(CudaUnavailableError, match="no NVIDIA GPU"): require_cuda("--device cuda")
    with pytest.raises(ValueError, match="CUDA is not available: no NVIDIA GPU"): resolve_device("cuda:0")  # a ValueError too


def test_a_usable_gpu_is_no_problem(monkeypatch):
    fake_machine(monkeypatch, cuda=True, smi="580.65.06", files=["/dev/nvidia0"], visible="0")
    assert cuda_problem() is None
    require_cuda("the cifar10-paper preset")  # nothing raised


def test_auto_says_once_which_device_it_chose_and_why(monkeypatch, capsys):
    monkeypatch.setattr(distributed_mod, "_AUTO_SAID", set())
    fake_machine(monkeypatch, cuda=False, smi=False, files=[])  # no GPU: 'auto' is the CPU (a GPU torch cannot use is refused, below)
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("auto") == torch.device("cpu")
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ctl_explore: device 'auto' is cpu: no NVIDIA GPU on this machine")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == torch.device("cuda", 0)
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [err[0]] and err[0].startswith("ctl_explore: device 'auto' is cuda:0: CUDA is available")
    assert resolve_device("cpu") == torch.device("cpu") and capsys.readouterr().err == ""  # a device asked by name is not told


# ---------------------------------------------------------------- the commands stop before any download


@pytest.mark.parametrize("machine", ["old driver", "no gpu", "hidden"])
def test_pretrain_device_cuda_stops_before_any_download(monkeypatch, tmp_path, capsys, machine):
    from ctl_explore import cli, data
    kinds = {"old driver": dict(smi="550.54.15", files=["/dev/nvidia0"]), "no gpu": dict(smi=False, files=[]),
             "hidden": dict(smi="580.65.06", files=["/dev/nvidia0"], visible="")}
    fake_machine(monkeypatch, cuda=False, **kinds[machine])
    asked = []
    monkeypatch.setattr(data, "load_dataset", lambda *a, **k: asked.append(a) or pytest.fail("a dataset was loaded"))
    code = cli.main(["pretrain", "--dataset", "cifar10", "--download", "--device", "cuda", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1 and "needs a CUDA GPU, but" in err[0] and not asked
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("machine", ["old driver", "no gpu", "hidden"])
def test_a_cuda_study_stops_before_any_download(monkeypatch, tmp_path, capsys, machine):
    from ctl_explore import cli, data
    kinds = {"old driver": dict(smi="550.54.15", files=["/dev/nvidia0"]), "no gpu": dict(smi=False, files=[]),
             "hidden": dict(smi="580.65.06", files=["/dev/nvidia0"], visible="NoDevFiles")}
    fake_machine(monkeypatch, cuda=False, **kinds[machine])
    monkeypatch.setattr(data, "load_dataset", lambda *a, **k: pytest.fail("a dataset was loaded"))
    code = cli.main(["study", "--preset", "cifar10-paper", "--out", str(tmp_path / "study")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1 and "the cifar10-paper preset needs a CUDA GPU, but" in err[0]
    assert not (tmp_path / "study").exists()


# ---------------------------------------------------------------- issue 40 item 1: 'auto' does not fall to the CPU past a GPU


@pytest.mark.parametrize("wheel", ["13.0", None])  # a driver too old for the wheel; a torch built without CUDA
def test_auto_refuses_a_gpu_torch_cannot_use(monkeypatch, wheel):
    fake_machine(monkeypatch, cuda=False, smi="550.54.15", files=["/dev/nvidia0"], wheel=wheel)
    with pytest.raises(CudaUnavailableError, match=r"^device 'auto' does not fall back to the CPU when this machine has an NVIDIA GPU") as e:
        resolve_device("auto")
    assert f"--index-url {CUDA12_INDEX}" in str(e.value) and "550.54.15" in str(e.value) and "--device cpu" in str(e.value)
    assert resolve_device("cpu") == torch.device("cpu")  # asked for by name: the CPU


def test_auto_is_the_cpu_where_the_gpus_are_hidden_on_purpose(monkeypatch, capsys):
    monkeypatch.setattr(distributed_mod, "_AUTO_SAID", set())
    fake_machine(monkeypatch, cuda=False, smi="550.54.15", files=["/dev/nvidia0"], visible="")
    assert resolve_device("auto") == torch.device("cpu") and "hides every GPU" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["pretrain", "--dataset", "digits", "--download"], ["study", "--preset", "digits", "--device", "auto"]])
def test_the_cli_on_auto_stops_before_any_download_where_torch_cannot_use_the_gpu(monkeypatch, tmp_path, capsys, command):
    from ctl_explore import cli, data
    fake_machine(monkeypatch, cuda=False, smi="550.54.15", files=["/dev/nvidia0"])
    monkeypatch.setattr(data, "load_dataset", lambda *a, **k: pytest.fail("a dataset was loaded"))
    code = cli.main([*command, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1 and err[0].startswith("ctl-explore: error: --device auto does not fall back to the CPU when")
    assert "driver is 550.54.15" in err[0] and not (tmp_path / "out").exists()


def test_the_benchmark_refuses_its_cpu_toy_where_torch_cannot_use_the_gpu(monkeypatch, capsys):
    import importlib.util, pathlib
    spec = importlib.util.spec_from_file_location("bench_gpu_40", pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "bench_gpu.py")
    bench = importlib.util.module_from_spec(spec); spec.loader.exec_module(bench)
    fake_machine(monkeypatch, cuda=False, smi="550.54.15", files=["/dev/nvidia0"])
    with pytest.raises(SystemExit) as e: bench.parse_args([])
    assert e.value.code == 2 and "no --device given, and this machine has an NVIDIA GPU but torch cannot use it" in capsys.readouterr().err
    assert bench.parse_args(["--toy"]).toy and bench.parse_args(["--device", "cpu"]).toy  # the CPU asked for: the toy
    with pytest.raises(SystemExit): bench.parse_args(["--device", "cuda"])
    assert "--device cuda asked for, but CUDA is not available: this machine has an NVIDIA GPU but" in capsys.readouterr().err


# ---------------------------------------------------------------- issue 40 item 2: study --download; download is no part of a run


def test_a_cuda_study_with_download_stops_with_the_gpu_sentence_before_downloading(monkeypatch, tmp_path, capsys):
    from ctl_explore import cli, train
    fake_machine(monkeypatch, cuda=False, smi=False, files=[])
    monkeypatch.setattr(train, "load_dataset", lambda *a, **k: pytest.fail("a dataset was loaded"))
    code = cli.main(["study", "--preset", "cifar10-paper", "--download", "--out", str(tmp_path / "s")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1 and "the cifar10-paper preset needs a CUDA GPU, but no NVIDIA GPU" in err[0]
    assert not (tmp_path / "s").exists()


def test_a_cuda_study_with_download_fetches_both_splits_once_then_starts(monkeypatch, tmp_path, capsys):
    from ctl_explore import cli, train
    from ctl_explore.study import report, runner
    fake_machine(monkeypatch, cuda=True, smi="580.65.06", files=["/dev/nvidia0"])
    done = []
    monkeypatch.setattr(train, "load_dataset", lambda name, train, **kw: done.append(("load", name, train, kw["download"], kw["progress"])))
    monkeypatch.setattr(runner, "run_study", lambda preset, out, **kw: done.append(("study", preset.name, preset.base.download)) or [])
    monkeypatch.setattr(report, "write_report", lambda rows, out, preset: out / "report.html")
    assert cli.main(["study", "--preset", "cifar10-paper", "--download", "--out", str(tmp_path / "s")]) == 0
    assert done == [("load", "cifar10", True, True, True), ("load", "cifar10", False, True, True), ("study", "cifar10-paper", False)]


def test_a_dataset_that_is_not_downloaded_is_a_sentence():
    from ctl_explore.train import PretrainConfig, download_splits
    with pytest.raises(ValueError, match=r"^imagenet100 cannot be downloaded \(--download\): .*no download"):
        download_splits(PretrainConfig(dataset="imagenet100"))


def test_a_run_started_with_download_resumes_without_it(tmp_path):
    import dataclasses
    from ctl_explore.train import PretrainConfig, load_checkpoint, pretrain, run_identity
    config = PretrainConfig(epochs=1, width=4, out_dim=16, knn_k=20, batch_size=256, device="cpu", eval_every=50)
    pretrain(dataclasses.replace(config, download=True, data_root=str(tmp_path / "data")), tmp_path / "run", quiet=True)
    assert run_identity(config) == run_identity(dataclasses.replace(config, download=True, data_root="elsewhere"))
    assert load_checkpoint(tmp_path / "run" / "checkpoint.pt", config)["epoch"] == 1  # no CheckpointError {'download': (True, False)}
    assert pretrain(config, tmp_path / "run", quiet=True)["epoch"] == 1  # the same run, resumed (here: finished) without --download


def test_a_study_without_its_data_names_download_before_any_run(monkeypatch, tmp_path, capsys):
    from ctl_explore import cli
    from ctl_explore.study import runner
    fake_machine(monkeypatch, cuda=True, smi="580.65.06", files=["/dev/nvidia0"])
    monkeypatch.setenv("CTL_EXPLORE_DATA", str(tmp_path / "data"))
    monkeypatch.setattr(runner, "run_study", lambda *a, **k: pytest.fail("a study started without its data"))
    code = cli.main(["study", "--preset", "cifar10-paper", "--out", str(tmp_path / "s")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and err == [f"ctl-explore: error: cifar10 not found in {tmp_path / 'data'}: give --download to fetch it "
                                 "(both splits, once) before the runs"]
    assert not (tmp_path / "s").exists()
