"""Issue 40, item 6: `compile="graph"`, the one-graph step replayed as a CUDA graph (torch.compile's mode="reduce-overhead",
the tensors the step updates in place marked static as benchmarks/bench_gpu.py marks them). On the CPU it falls back to
the eager step: the same numbers as compile=False, bit for bit. Like every execution option it is not part of a run's
identity, so a run resumes with or without it. Under torchrun it compiles the DDP-wrapped encoder as CUDA graphs. Where
appendix 14's fast epoch does not apply (CUDA, torchrun, a compiled step), the random numbers of a stretch of steps are
drawn at once; on the CPU they are the numbers drawn step by step. CUDA itself is mocked: what is checked is what
`_prepare_step` asks of torch.compile on a CUDA device, not a GPU's execution."""
from __future__ import annotations

import contextlib

import pytest
import torch
from tqdm.auto import tqdm
from test_train_compile import GraphCounter  # the graph-counting backend, one definition

import ctl_explore.data as data
import ctl_explore.fast as fast
from ctl_explore import train as train_module
from ctl_explore.cli import build_parser
from ctl_explore.data import TwoViewAugment, load_dataset
from ctl_explore.memory_bank import MemoryBank
from ctl_explore.train import (PretrainConfig, TrainState, _check_world, _prepare_step, build_model, compiled_as, load_checkpoint,
                               pretrain, training_step)

TINY = dict(width=4, out_dim=16, knn_k=20, batch_size=64, epochs=2, lr_drops=(0.5,), device="cpu")


def test_graph_is_a_compile_mode_of_the_library_and_the_command_line():
    assert PretrainConfig(compile="graph").compile == "graph"
    with pytest.raises(ValueError, match=r"^compile must be False, True \(or 'encoder'\), 'step' or 'graph', got 'graphs'$"):
        PretrainConfig(compile="graphs")
    assert build_parser().parse_args(["pretrain", "--out", "r", "--compile", "graph"]).compile == "graph"
    assert build_parser().parse_args(["study", "--compile", "graph"]).compile == "graph"
    assert "graph" in build_parser()._subparsers._group_actions[0].choices["pretrain"].format_help()


def test_graph_falls_back_to_eager_off_cuda():
    for device in ("cpu", "meta"): assert compiled_as("graph", torch.device(device)) is None
    assert compiled_as("graph", torch.device("cpu"), world=4) is None
    assert compiled_as("graph", torch.device("cuda")) == "graph" and compiled_as("graph", torch.device("cuda:1"), world=8) == "graph-encoder"
    assert (compiled_as(False, torch.device("cuda")), compiled_as(True, torch.device("cpu")), compiled_as("step", torch.device("cpu"))) == \
        (None, "encoder", "step")


@pytest.fixture(scope="module")
def eager_run(tmp_path_factory):
    "Two epochs of a tiny digits run, compiled nothing: the reference."
    out = tmp_path_factory.mktemp("eager") / "run"
    pretrain(PretrainConfig(**TINY), out, quiet=True)
    return load_checkpoint(out / "checkpoint.pt")


def _same_run(a: dict, b: dict) -> None:
    assert [h["loss"] for h in a["history"]] == [h["loss"] for h in b["history"]]
    assert a["model"].keys() == b["model"].keys() and all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert torch.equal(a["bank"]["features"], b["bank"]["features"])
    assert torch.equal(a["generator"], b["generator"])


def test_graph_on_the_cpu_is_the_eager_run_bit_for_bit(eager_run, tmp_path, monkeypatch):
    def refuse(*args, **kwargs): raise AssertionError("torch.compile was called on the CPU")
    monkeypatch.setattr(torch, "compile", refuse)
    pretrain(PretrainConfig(**TINY, compile="graph"), tmp_path / "graph", quiet=True)
    saved = load_checkpoint(tmp_path / "graph" / "checkpoint.pt")
    assert saved["config"]["compile"] == "graph"
    _same_run(saved, eager_run)


@pytest.mark.parametrize("first, then", [("graph", False), (False, "graph")])
def test_a_run_resumes_with_or_without_graph(eager_run, tmp_path, first, then):
    out = tmp_path / "run"
    pretrain(PretrainConfig(**TINY, compile=first), out, quiet=True, until_epoch=1)
    pretrain(PretrainConfig(**TINY, compile=then), out, quiet=True)  # no CheckpointError: compile is no part of the identity
    _same_run(load_checkpoint(out / "checkpoint.pt"), eager_run)


def _state(negatives: str = "bank") -> TrainState:
    torch.manual_seed(0)
    config = PretrainConfig(**{**TINY, "compile": "graph", "negatives": negatives})
    model = build_model(config, 1, torch.device("cpu"))
    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay)
    bank = MemoryBank(100, config.out_dim, generator=torch.Generator().manual_seed(1))
    return TrainState(config, model, optimizer, bank, torch.Generator().manual_seed(0), {}, TwoViewAugment("digits"))


def test_on_cuda_the_whole_step_is_compiled_as_a_cuda_graph_with_static_tensors(monkeypatch):
    asked = []
    monkeypatch.setattr(train_module, "compile_step", lambda step, **options: asked.append((step, options)) or step)
    state = _state()
    _prepare_step(state, torch.device("cuda"))  # nothing runs on the device: the model stays on the CPU
    assert state.compiled == "graph" and asked == [(training_step, {"mode": "reduce-overhead"})]
    group = state.optimizer.param_groups[0]
    assert isinstance(group["lr"], torch.Tensor) and group["lr"].item() == pytest.approx(0.03)  # filled in place by each epoch
    buffers = [state.optimizer.state[p]["momentum_buffer"] for p in group["params"] if p.requires_grad]
    assert len(buffers) == sum(p.requires_grad for p in group["params"])  # made before the first step: one graph, recorded once
    for t in buffers + [group["lr"]] + list(state.bank.buffers()):
        assert getattr(t, "_dynamo_static_input_type", None) == "unguarded"  # read and written in place by the CUDA graph
    train_module._set_lr(state.optimizer, 0.003, as_tensor=True)
    assert state.optimizer.param_groups[0]["lr"] is group["lr"]  # the same static tensor, a new value


def test_under_torchrun_graph_compiles_the_encoder_and_is_allowed(monkeypatch):
    compiled = []
    monkeypatch.setattr(train_module, "_distributed", lambda: (0, 2))
    monkeypatch.setattr(train_module, "distributed_net", lambda model, device: model)  # DDP needs a process group
    monkeypatch.setattr(torch, "compile", lambda fn, **options: compiled.append(options) or fn)
    _check_world(PretrainConfig(compile="graph"), 2)  # allowed
    with pytest.raises(ValueError, match=r"^compile='step' is not supported under torchrun: .* use compile='graph'"):
        _check_world(PretrainConfig(compile="step"), 2)
    state = _state()
    _prepare_step(state, torch.device("cuda", 1))
    assert state.compiled == "graph-encoder" and compiled == [{"mode": "reduce-overhead"}] and state.step is training_step
    state = _state()
    _prepare_step(state, torch.device("cpu"))  # torchrun on CPUs: the eager step
    assert state.compiled is None and len(compiled) == 1 and state.step is training_step


def _epoch_draws(monkeypatch, negatives: str, plain: bool) -> tuple[list, int, int]:
    "The draws each step of one epoch (off the fast path) is given, how often one step's and a stretch's numbers were drawn."
    counts = dict(one=0, stretch=0)
    one, stretch = data.sample_view, fast.stacked_view_draws
    def counted_one(*args, **kwargs):
        counts["one"] += 1
        return one(*args, **kwargs)
    def counted_stretch(*args, **kwargs):
        counts["stretch"] += 1
        return stretch(*args, **kwargs)
    monkeypatch.setattr(train_module, "sample_view", counted_one)  # view_draws' per-step draw
    monkeypatch.setattr(fast, "stacked_view_draws", counted_stretch)
    seen = []
    def step(state, images, idx, params, draws, part):  # not lesson 07's step: the fast epoch does not apply, as on CUDA
        seen.append((idx.clone(), [d[part] for d in draws]))
        return torch.zeros(())
    train = load_dataset("digits", train=True)
    state = _state(negatives)
    state.step = step
    steps = len(train) // state.config.batch_size
    with fast.plain_epochs() if plain else contextlib.nullcontext():
        train_module._train_epoch(state, train, tqdm(range(steps), disable=True))
    return seen, counts["one"], counts["stretch"], steps


@pytest.mark.parametrize("negatives", ["bank", "batch"])
def test_off_the_fast_path_a_stretch_of_steps_draws_its_numbers_at_once(monkeypatch, negatives):
    with monkeypatch.context() as m: per_step, one, stretched, steps = _epoch_draws(m, negatives, plain=True)
    assert (one, stretched) == (steps * (1 if negatives == "bank" else 2), 0)
    with monkeypatch.context() as m: at_once, one, stretched, steps = _epoch_draws(m, negatives, plain=False)
    assert (one, stretched) == (0, 1)  # the epoch's 22 steps are one stretch
    assert len(at_once) == len(per_step) == steps
    for (idx, draws), (idx0, draws0) in zip(at_once, per_step):  # on the CPU: the very numbers drawn step by step
        assert torch.equal(idx, idx0)
        for d, d0 in zip(draws, draws0):
            for name in d.__dataclass_fields__: assert torch.equal(getattr(d, name), getattr(d0, name)), name


def test_the_stretch_is_bounded_and_off_for_files_and_feature_losses():
    train = load_dataset("digits", train=True)
    state = _state()
    assert fast.draw_stretch(state, train, 1) == fast.DRAW_BYTES // (64 * fast._UNIFORMS * 4)
    state.config = PretrainConfig(**{**TINY, "negatives": "batch", "loss": "align_swd"})
    assert fast.draw_stretch(state, train, 2) == 0  # its projections are drawn inside the step, between two steps' draws
    with fast.plain_epochs(): assert fast.draw_stretch(_state(), train, 1) == 0


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Dynamo detected a call to a `functools.lru_cache`-wrapped function:UserWarning")
def test_the_compiled_step_given_a_stretchs_rows_of_draws_is_compiled_once(tmp_path, monkeypatch):
    "Each step's draws are rows of a stretch's tensors (another storage offset at every step): no recompilation, which on CUDA would record a CUDA graph per step."
    counter, real_compile = GraphCounter(), torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **options: real_compile(fn, backend=counter))
    try: pretrain(PretrainConfig(**{**TINY, "epochs": 1, "compile": "step"}), tmp_path / "step", quiet=True)
    finally: torch._dynamo.reset()
    assert counter.graphs == 1  # 22 steps, one stretch, one graph
