"""The explorer's figures read the loss registry when they are built, label what they shade, and a change of one
control sends one message to each figure it moves and none to the others."""
from __future__ import annotations

import dataclasses

import pytest

import ctl_explore.explorer as explorer
from ctl_explore.losses import loss_spec


def test_limit_colours_come_from_the_registry_at_call_time(monkeypatch):
    real = explorer.loss_spec
    recoloured = {"triplet_limit": "#010203", "simple_limit": "#040506"}
    monkeypatch.setattr(explorer, "loss_spec",
                        lambda name: dataclasses.replace(real(name), color=recoloured[name]) if name in recoloured else real(name))
    fig = explorer.loss_figure()
    assert [fig.data[1].line.color, fig.data[2].line.color] == ["#010203", "#040506"]
    assert [s.fillcolor for s in fig.layout.shapes] == ["#010203", "#040506"]
    monkeypatch.undo()
    fig = explorer.loss_figure()
    assert fig.data[1].line.color == loss_spec("triplet_limit").color and fig.data[2].line.color == loss_spec("simple_limit").color


def test_labels_in_the_plots_follow_what_they_label():
    ex = explorer.temperature_explorer()
    assert ex.fig_penalty.layout.annotations[0].x == pytest.approx(ex._s_alpha)
    ex.alpha_slider.value = 0.5
    assert ex.fig_penalty.layout.annotations[0].x == pytest.approx(ex._s_alpha)
    trip, simple = ex.fig_loss.layout.annotations
    assert trip.visible == bool(ex._regimes[0]) and simple.visible == bool(ex._regimes[1])
    assert "uniform on S²" in str(explorer._history_figure().layout.annotations[0].text)


@pytest.mark.parametrize("control, value, moved", [
    ("tau_slider", 0.5, {"penalty", "entropy", "loss", "grad"}),
    ("alpha_slider", 0.3, {"penalty", "entropy"}),
    ("lam_slider", 0.01, {"penalty"}),
    ("pos_slider", 0.5, {"loss", "grad"}),
    ("log_r_checkbox", True, {"penalty"}),
])
def test_one_message_per_figure_a_change_moves(control, value, moved):
    ex = explorer.temperature_explorer()
    figs = {"penalty": ex.fig_penalty, "entropy": ex.fig_entropy, "loss": ex.fig_loss, "grad": ex.fig_grad}
    sent = {name: 0 for name in figs}
    for name, fig in figs.items():
        fig.observe(lambda change, name=name: sent.__setitem__(name, sent[name] + 1) if change.new else None, "_py2js_update")
    getattr(ex, control).value = value
    assert {name for name, n in sent.items() if n} == moved
    assert all(n == 1 for name, n in sent.items() if name in moved), sent
