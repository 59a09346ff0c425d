"""Issue 16 on the CPU: the CUDA paths of `pretrain` proven without a GPU. The device of each torchrun process, the order
in which a process takes its GPU and joins the group, the download by process 0 first, the per-process augmentation,
zero host syncs per training step, resuming across devices, the monitor's subset and the compiled step."""
from __future__ import annotations

import dataclasses
import datetime
import inspect
import math
import os

import pytest
import torch
import torch.distributed as dist

import ctl_explore.distributed as distributed_mod
import ctl_explore.train as train_mod
from ctl_explore.checks import value_checks
from ctl_explore.debug import count_host_syncs
from ctl_explore.data import _per_channel, TwoViewAugment, augment_view, load_dataset
from ctl_explore.memory_bank import MemoryBank
from ctl_explore.distributed import resolve_device
from ctl_explore.run_folders import CheckpointError, save_checkpoint
from ctl_explore.train import (TIMING_KEYS, PretrainConfig, build_model, load_checkpoint, monitor_rows, negatives_seen,
                               pretrain, run_identity, training_step, view_draws, TrainState)

TINY = dict(width=4, out_dim=16, knn_k=20, batch_size=16)
RUN = {**TINY, "batch_size": 64}  # whole runs: 23 steps an epoch on the digits instead of 90, none of these tests counts steps


# ---------------------------------------------------------------- one device per torchrun process

@pytest.fixture
def fake_gpus(monkeypatch):
    "A machine with 4 CUDA devices, as far as `resolve_device` can tell; no torchrun variables."
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    for name in ("WORLD_SIZE", "LOCAL_RANK", "RANK"): monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_one_process_keeps_the_device_it_is_given(fake_gpus):
    assert resolve_device("auto") == torch.device("cuda", 0) == resolve_device("cuda")  # an index, for set_device and DDP
    assert resolve_device("cuda:3") == torch.device("cuda", 3)
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match="has 4 CUDA device"): resolve_device("cuda:4")


@pytest.mark.parametrize("local_rank", [0, 1, 3])
def test_under_torchrun_each_process_takes_the_gpu_of_its_local_rank(fake_gpus, local_rank):
    fake_gpus.setenv("WORLD_SIZE", "4"); fake_gpus.setenv("RANK", str(local_rank)); fake_gpus.setenv("LOCAL_RANK", str(local_rank))
    assert resolve_device("auto") == torch.device("cuda", local_rank) == resolve_device("cuda")
    assert resolve_device("cpu") == torch.device("cpu")  # gloo on the CPU, as the 2-process test runs
    with pytest.raises(ValueError, match="names one GPU, but torchrun started 4 processes"): resolve_device("cuda:1")


def test_under_torchrun_a_rank_without_a_gpu_is_refused(fake_gpus):
    fake_gpus.setenv("WORLD_SIZE", "8"); fake_gpus.setenv("RANK", "5"); fake_gpus.setenv("LOCAL_RANK", "5")
    with pytest.raises(ValueError, match="LOCAL_RANK 5, but this machine has 4 CUDA device.*--nproc_per_node=4"): resolve_device("auto")
    fake_gpus.delenv("LOCAL_RANK")
    with pytest.raises(ValueError, match="LOCAL_RANK is not set"): resolve_device("cuda")
    fake_gpus.setenv("LOCAL_RANK", "one")
    with pytest.raises(ValueError, match="LOCAL_RANK must be an integer"): resolve_device("cuda")


def test_without_cuda_auto_is_the_cpu_and_cuda_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(distributed_mod, "unusable_gpu", lambda: None)  # no GPU here, even on a machine that has one
    monkeypatch.setenv("WORLD_SIZE", "2"); monkeypatch.setenv("RANK", "1"); monkeypatch.setenv("LOCAL_RANK", "1")
    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(ValueError, match="CUDA is not available"): resolve_device("cuda")


def test_a_process_takes_its_gpu_before_it_joins_the_group(fake_gpus):
    calls = []
    fake_gpus.setattr(torch.cuda, "set_device", lambda d: calls.append(("set_device", d)))
    fake_gpus.setattr(dist, "is_initialized", lambda: False)
    fake_gpus.setattr(dist, "init_process_group", lambda backend, **kw: calls.append(("init", backend, kw)))
    assert not distributed_mod._init_distributed(torch.device("cuda", 2))  # one process: no group
    assert calls == []
    fake_gpus.setenv("WORLD_SIZE", "4"); fake_gpus.setenv("RANK", "2"); fake_gpus.setenv("LOCAL_RANK", "2")
    assert distributed_mod._init_distributed(resolve_device("cuda"))
    # issue 24: the group waits for its members, and in every collective, at most CTL_EXPLORE_DIST_TIMEOUT seconds (600 unset)
    bounded = {"timeout": datetime.timedelta(seconds=600)}
    # the group is joined in a helper thread (so that Ctrl-C can stop the wait), which makes the GPU current there too
    assert calls == [("set_device", torch.device("cuda", 2)), ("set_device", torch.device("cuda", 2)),
                     ("init", "nccl", {"device_id": torch.device("cuda", 2), **bounded})]
    calls.clear()
    assert distributed_mod._init_distributed(torch.device("cpu"))
    assert calls == [("init", "gloo", bounded)]
    calls.clear()
    fake_gpus.setenv("CTL_EXPLORE_DIST_TIMEOUT", "12.5")
    assert distributed_mod._init_distributed(torch.device("cpu"))
    assert calls == [("init", "gloo", {"timeout": datetime.timedelta(seconds=12.5)})]


@pytest.mark.parametrize("rank", [0, 1])
def test_process_0_downloads_while_the_others_wait(monkeypatch, rank):
    events = []
    monkeypatch.setattr(distributed_mod, "_distributed", lambda: (rank, 2))
    monkeypatch.setattr(train_mod, "_load_splits", lambda config, device, quiet: events.append(("load", config.download)) or "splits")
    monkeypatch.setattr(dist, "broadcast", lambda t, src: events.append(("wait for process 0", int(t))))
    config = PretrainConfig(dataset="cifar10", download=True)
    assert train_mod._load_data(config, torch.device("cpu"), True) == "splits"
    if rank == 0: assert events == [("load", True), ("wait for process 0", 1)]  # downloads, then lets the others go
    else: assert events == [("wait for process 0", 1), ("load", False)]         # waits, then reads the files from the disk
    events.clear()
    assert train_mod._load_data(dataclasses.replace(config, download=False), torch.device("cpu"), True) == "splits"
    assert events == [("load", False)]  # nothing to download: no waiting


def test_a_failed_download_stops_every_process(monkeypatch):
    monkeypatch.setattr(distributed_mod, "_distributed", lambda: (1, 2))
    monkeypatch.setattr(dist, "broadcast", lambda t, src: t.fill_(0))  # what process 1 hears when process 0 failed
    monkeypatch.setattr(train_mod, "_load_splits", lambda *a: pytest.fail("process 1 must not load after process 0 failed"))
    with pytest.raises(RuntimeError, match="process 0 failed to download cifar10"):
        train_mod._load_data(PretrainConfig(dataset="cifar10", download=True), torch.device("cpu"), True)


# ---------------------------------------------------------------- each process augments its own slice

def test_a_slice_of_the_draws_augments_the_slice_as_the_whole_batch_does():
    images = load_dataset("digits", train=True).images[:16]
    augment = TwoViewAugment("digits")
    params, (draws,) = view_draws(augment, images, torch.Generator().manual_seed(0), 1)
    whole = augment_view(images, params, draws)
    torch.testing.assert_close(whole, augment.view(images, torch.Generator().manual_seed(0)), rtol=0, atol=0)  # the same stream
    for part in (slice(0, 8), slice(8, 16)):  # two processes, each with half of the global batch
        torch.testing.assert_close(augment_view(images[part], params, draws[part]), whole[part], rtol=0, atol=0)


# ---------------------------------------------------------------- zero host syncs per step

def _setup(negatives: str, loss: str):
    config = PretrainConfig(negatives=negatives, loss=loss, tau=0.2, alpha=0.1, device="cpu", **TINY)
    data = load_dataset("digits", train=True)
    model = build_model(config, 1, torch.device("cpu"))
    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay)
    bank = MemoryBank(len(data), config.out_dim, generator=torch.Generator().manual_seed(1)) if negatives == "bank" else None
    return config, data, model, optimizer, bank, config.loss_params(negatives_seen(config, len(data)))


@pytest.mark.parametrize("negatives, loss", [("bank", "contrastive"), ("bank", "hard_contrastive"),
                                             ("batch", "contrastive"), ("batch", "nt_xent")])
def test_a_training_step_reads_nothing_on_the_host(negatives, loss):
    torch.set_num_threads(1)
    config, data, model, optimizer, bank, params = _setup(negatives, loss)
    augment, g = TwoViewAugment("digits"), torch.Generator().manual_seed(0)
    order = torch.randperm(len(data), generator=g)
    losses = []
    _per_channel.cache_clear()  # the same start whatever ran before in this process
    for k in range(3):
        with value_checks(False), count_host_syncs(trace=True) as syncs:
            idx = order[k * config.batch_size:(k + 1) * config.batch_size]
            images = data.images[idx]
            aug, draws = view_draws(augment, images, g, 1 if negatives == "bank" else 2)
            losses.append(training_step(TrainState(config, model, optimizer, bank, g, params), images, idx, aug, draws))
        if k == 0:  # the first step makes the augmentation's per-channel mean and std once per device (cached): two copies, no more
            made_at = f"{inspect.getsourcefile(_per_channel.__wrapped__)}:{inspect.getsourcelines(_per_channel.__wrapped__)[1] + 3}"
            assert [op for op, _ in syncs.where] == ["aten.lift_fresh"] * 2 and {w for _, w in syncs.where} == {made_at}, syncs.where
        else:
            assert syncs.total == 0, (k, syncs)
    assert all(l.ndim == 0 and not l.requires_grad for l in losses)
    assert all(math.isfinite(l.item()) for l in losses)  # read here, after the steps


def test_the_epoch_reads_the_loss_only_at_its_logging_points():
    torch.set_num_threads(1)
    config, data, model, optimizer, bank, params = _setup("bank", "contrastive")
    from tqdm.auto import tqdm
    steps = 7
    for log_every, shown in ((2, 3), (100, 0)):
        bar = tqdm(range(steps), disable=False, leave=False)
        with count_host_syncs() as syncs:
            state = TrainState(config, model, optimizer, bank, torch.Generator().manual_seed(0), params, TwoViewAugment("digits"))
            total = train_mod._train_epoch(state, data, bar, log_every=log_every)
        bar.close()
        assert syncs.total == shown and set(syncs.ops) <= {"aten._local_scalar_dense"}, (log_every, syncs)  # steps 2, 4, 6
        assert math.isfinite(total.item())
    quiet = tqdm(range(steps), disable=True)
    with count_host_syncs() as syncs:
        state = TrainState(config, model, optimizer, bank, torch.Generator().manual_seed(0), params, TwoViewAugment("digits"))
        train_mod._train_epoch(state, data, quiet, log_every=1)
    assert syncs.total == 0, syncs


# ---------------------------------------------------------------- resume across devices

def test_the_device_is_not_part_of_a_run(tmp_path):
    cfg = PretrainConfig(epochs=2, device="cpu", **RUN)
    pretrain(cfg, tmp_path, quiet=True, until_epoch=1)
    for device in ("cuda", "cuda:1", "auto"):  # a checkpoint written on one device loads for another
        assert load_checkpoint(tmp_path / "checkpoint.pt", dataclasses.replace(cfg, device=device))["epoch"] == 1
    assert load_checkpoint(tmp_path / "checkpoint.pt", dataclasses.replace(cfg, compile="step"))["epoch"] == 1
    assert run_identity(cfg) == run_identity(dataclasses.replace(cfg, device="cuda:1", compile=True))
    with pytest.raises(CheckpointError, match="another configuration"):
        load_checkpoint(tmp_path / "checkpoint.pt", dataclasses.replace(cfg, tau=0.3))


def test_a_checkpoint_from_another_device_type_resumes_with_a_reseeded_stream(tmp_path):
    torch.set_num_threads(1)
    cfg = PretrainConfig(epochs=3, device="cpu", eval_every=3, **RUN)
    pretrain(cfg, tmp_path / "whole", quiet=True)
    pretrain(cfg, tmp_path / "cpu", quiet=True, until_epoch=1)
    state = load_checkpoint(tmp_path / "cpu" / "checkpoint.pt")
    assert state["generator"].numel() == 5056  # a CPU generator's state; a CUDA one's is 16 bytes (seed and offset)
    cuda_state = torch.tensor([7] * 8 + [0] * 8, dtype=torch.uint8)
    cuda_ckpt = {**{k: v for k, v in state.items() if k != "format"}, "generator": cuda_state,
                 "config": dataclasses.replace(cfg, device="cuda").to_dict()}
    for name in ("from-cuda", "from-cuda-again"):
        (tmp_path / name).mkdir()
        save_checkpoint(tmp_path / name / "checkpoint.pt", cuda_ckpt)
        pretrain(cfg, tmp_path / name, quiet=True)  # written on CUDA, resumed on the CPU
    runs = {name: load_checkpoint(tmp_path / name / "checkpoint.pt") for name in ("whole", "from-cuda", "from-cuda-again")}
    history = runs["from-cuda"]["history"]
    assert [r.get("generator_reseeded") for r in history] == [None, "cuda → cpu", None]  # said where the stream changed
    assert all(math.isfinite(r["loss"]) for r in history) and "knn_accuracy" in history[-1]
    # a valid continuation, not the uninterrupted run: the first epoch is the same, the next ones drew other numbers ...
    strip = lambda h: [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in h]
    assert strip(history)[0] == strip(runs["whole"]["history"])[0] and history[1]["loss"] != runs["whole"]["history"][1]["loss"]
    # ... and a deterministic one: resuming the same checkpoint again gives the same run
    assert strip(runs["from-cuda-again"]["history"]) == strip(history)
    for key, w in runs["from-cuda"]["model"].items(): assert torch.equal(runs["from-cuda-again"]["model"][key], w), key
    assert runs["from-cuda"]["config"]["device"] == "cpu"  # the checkpoint now says where it was last written


# ---------------------------------------------------------------- measuring less: the monitor's subset

def test_the_monitor_subset_is_fixed_and_leaves_training_alone(tmp_path):
    cfg = PretrainConfig(epochs=1, device="cpu", **RUN)
    assert monitor_rows(cfg, 1438) is None
    sub = dataclasses.replace(cfg, monitor_images=300)
    rows = monitor_rows(sub, 1438)
    assert len(rows) == 300 and len(set(rows.tolist())) == 300 and torch.equal(rows, rows.sort().values)
    assert torch.equal(rows, monitor_rows(sub, 1438)) and monitor_rows(dataclasses.replace(sub, monitor_images=5000), 1438) is None
    full, part = pretrain(cfg, tmp_path / "all", quiet=True), pretrain(sub, tmp_path / "sub", quiet=True)
    assert full["loss"] == part["loss"] and full["uniformity"] == part["uniformity"]  # the test split is measured in full
    assert full["knn_accuracy"] != part["knn_accuracy"] and 0.3 < part["knn_accuracy"] <= 1
    with pytest.raises(ValueError, match="monitor_images must be an integer >= 2"): PretrainConfig(monitor_images=0)


def test_compile_settings_and_old_configurations():
    assert PretrainConfig(compile="encoder").compile is True and PretrainConfig(compile="step").compile == "step"
    assert PretrainConfig(compile="encoder") == PretrainConfig(compile=True)
    assert PretrainConfig(compile="graph").compile == "graph"  # the step as a CUDA graph (tests/test_compile_graph_option.py)
    with pytest.raises(ValueError, match="compile must be False, True \\(or 'encoder'\\), 'step' or 'graph'"): PretrainConfig(compile="graphs")
    with pytest.raises(ValueError, match="compile must be"): PretrainConfig(compile=1)
    old = PretrainConfig().to_dict()
    del old["monitor_images"]  # a configuration written before the field existed loads with its default
    assert PretrainConfig.from_dict(old) == PretrainConfig()


# ---------------------------------------------------------------- the whole step compiled

COMPILE_TESTS = "CTL_EXPLORE_COMPILE_TESTS"


@pytest.mark.skipif(os.environ.get(COMPILE_TESTS) != "1", reason=f"torch.compile of the whole step takes about 90 s on a "
                    f"2-core CPU (inductor builds C++ kernels); set {COMPILE_TESTS}=1 to run it")
def test_the_compiled_step_computes_the_eager_steps():
    torch.set_num_threads(1)
    losses = {}
    for name, step in (("eager", training_step), ("step", torch.compile(training_step))):
        config, data, model, optimizer, bank, params = _setup("bank", "contrastive")
        augment, g = TwoViewAugment("digits"), torch.Generator().manual_seed(0)
        with value_checks(False):
            losses[name] = []
            for k in range(3):
                idx = torch.arange(k * config.batch_size, (k + 1) * config.batch_size)
                aug, draws = view_draws(augment, data.images[idx], g, 1)
                losses[name].append(step(TrainState(config, model, optimizer, bank, g, params), data.images[idx], idx, aug, draws))
        losses[name] = torch.stack(losses[name])
        if name == "step": torch._dynamo.reset()
    # the same three steps (each one's loss depends on the previous updates), up to the rounding of fused kernels
    torch.testing.assert_close(losses["step"], losses["eager"], rtol=1e-5, atol=1e-5)
    assert len(set(losses["eager"].tolist())) == 3


# ---------------------------------------------------------------- issue 24: precision "auto", recorded per run

def test_precision_auto_is_bf16_on_cuda_and_fp32_on_the_cpu(monkeypatch):
    from ctl_explore.train import resolve_precision
    assert PretrainConfig().precision == "auto"
    assert [resolve_precision(PretrainConfig(), d) for d in ("cuda", "cuda:3", "cpu")] == ["bf16", "bf16", "fp32"]
    for explicit in ("fp32", "bf16"):  # an explicit precision (an older configuration says "fp32") keeps its meaning anywhere
        assert resolve_precision(PretrainConfig(precision=explicit), "cuda") == explicit
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_precision(PretrainConfig(device="auto")) == "bf16"
    with pytest.raises(ValueError, match="precision must be one of"): PretrainConfig(precision="fp16")
    with pytest.raises(ValueError, match="bank_precision must be one of"): PretrainConfig(bank_precision="auto")


def test_a_run_records_its_resolved_precision_and_resumes_with_it(tmp_path):
    import json
    cfg = PretrainConfig(**RUN, epochs=2, device="cpu")
    pretrain(cfg, tmp_path / "auto", quiet=True, until_epoch=1)
    assert json.loads((tmp_path / "auto" / "config.json").read_text())["precision"] == "fp32"
    assert load_checkpoint(tmp_path / "auto" / "checkpoint.pt")["config"]["precision"] == "fp32"
    # a run that started in bf16 (as "auto" does on CUDA) resumes in bf16 when asked with "auto", and equals the uninterrupted one
    bf16 = dataclasses.replace(cfg, precision="bf16")
    pretrain(bf16, tmp_path / "whole", quiet=True)
    pretrain(bf16, tmp_path / "split", quiet=True, until_epoch=1)
    pretrain(cfg, tmp_path / "split", quiet=True)  # precision "auto"
    a, b = (load_checkpoint(tmp_path / r / "checkpoint.pt") for r in ("whole", "split"))
    assert b["config"]["precision"] == "bf16" and json.loads((tmp_path / "split" / "config.json").read_text())["precision"] == "bf16"
    for key in a["model"]: assert torch.equal(a["model"][key], b["model"][key]), key
    # an explicit other precision is another run
    with pytest.raises(CheckpointError, match="'precision': \\('bf16', 'fp32'\\)"):
        pretrain(dataclasses.replace(cfg, precision="fp32"), tmp_path / "split", quiet=True)


def test_the_monitor_embeds_unit_vectors_under_bf16_autocast():
    # bf16 is the default on CUDA: the monitor's embeddings must still be unit vectors to float32 accuracy for the metrics
    from ctl_explore.train import embed
    config = PretrainConfig(**TINY, device="cpu")
    model = build_model(config, 1, torch.device("cpu"))
    images = load_dataset("digits", train=False).images[:64]
    z = embed(model, images, TwoViewAugment("digits"), 32, autocast=True)
    assert z.dtype == torch.float32 and torch.allclose(z.norm(dim=1), torch.ones(64), atol=1e-5)
    features = embed(model, images, TwoViewAugment("digits"), 32, features=True, autocast=True)
    assert features.dtype == torch.float32 and not torch.allclose(features.norm(dim=1), torch.ones(64), atol=1e-2)  # left as they are
