"""The explorer's figures read the loss registry when they are built and label what they shade; the page draws them
from the sliders it is linked to in the browser, so a change of one control sends it no figure from the kernel; the
playground shows its starting point."""
from __future__ import annotations

import dataclasses

import ipywidgets as widgets
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


@pytest.mark.parametrize("control, value, readout", [
    ("tau_slider", 0.5, True), ("alpha_slider", 0.3, True), ("lam_slider", 0.01, True), ("pos_slider", 0.5, True),
    ("log_r_checkbox", True, False),  # the log scale changes no number: no message
])
def test_a_change_sends_the_page_no_figure(monkeypatch, control, value, readout):
    "The page draws the figures and the readout from the sliders it is linked to: a change sends one message, the kernel's numbers that confirm the readout, and no figure."
    ex = explorer.temperature_explorer()
    sent = []
    monkeypatch.setattr(widgets.Widget, "_send", lambda self, msg, buffers=None: sent.append((self, sorted(msg.get("state", {})))))
    getattr(ex, control).value = value
    others = [(type(w).__name__, keys) for w, keys in sent if w is not getattr(ex, control)]  # the control's own value aside
    assert others == ([("ExplorerFigures", ["kernel"])] if readout else []), others
    if readout: assert ex.figures.kernel["tau"] == ex.tau and ex.figures.kernel["loss"] == ex.loss
    # ... while the kernel's own copy of the figures follows (the checks of appendix 17 read it)
    if control == "tau_slider": assert ex.fig_penalty.data[0].meta == {"tau": 0.5}


def test_the_sliders_drive_the_page_figures_in_the_browser():
    "Every control is linked in the browser (jslink) to the trait of the figures' widget that its value sets."
    ex = explorer.temperature_explorer()
    links = {(l.source[0], l.source[1], l.target[1]) for l in ex.links if l.target[0] is ex.figures}
    assert all(type(l).__name__ == "Link" for l in ex.links)  # jslink's: the browser moves the value, not the kernel
    assert links == {(ex.tau_slider, "value", "tau"), (ex.alpha_slider, "value", "alpha"), (ex.lam_slider, "value", "lam"),
                     (ex.pos_slider, "value", "pos"), (ex.k_slider, "value", "k"), (ex.log_r_checkbox, "value", "log_r"),
                     (ex.source_dropdown, "index", "source_index")}
    assert ex.figures in ex.children and [ex.figures.tau, ex.figures.k] == [ex.tau, 256]


def test_the_playground_shows_its_starting_point():
    "Before any step the history plot holds one point per curve, on axes that show it, the N steps to come and the uniform limit."
    pg = explorer.hypersphere_playground()
    shown = pg.fig_history.get_state()  # what the page's figure starts from, before any update message
    assert [len(t["x"]) for t in shown["_widget_data"][:2]] == [1, 1]
    x, y, y2 = (shown["_widget_layout"][k]["range"] for k in ("xaxis", "yaxis", "yaxis2"))
    assert x[0] < 0 < pg.steps_input.value < x[1]
    assert y[0] < pg.history["uniformity"][0] < explorer.sphere_uniformity_limit(3) < y[1]
    assert y2[0] < pg.history["tolerance"][0] < y2[1]
    pg.step(3)
    assert list(pg.fig_history.data[0].x) == [0, 1, 2, 3] and pg.fig_history.layout.xaxis.range[1] > 50
