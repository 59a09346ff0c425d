"""The explorer's figures read the loss registry when they are built and label what they shade; the page draws them
from the sliders it is linked to in the browser, so a change of one control sends it no figure from the kernel; the
playground's first figure, sent by its relay, shows its starting point; every widget's front end is small."""
from __future__ import annotations

import dataclasses
import json

import anywidget
import comm
import comm.base_comm
import ipywidgets as widgets
import plotly.graph_objects as go
import pytest
from plotly.offline import get_plotlyjs

import ctl_explore.explorer as explorer
from ctl_explore.explorer import _plain
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
    "The page draws the figures and the readout from the sliders it is linked to: a change sends one message, the kernel's numbers that confirm the readout (by the figures' relay), and no figure."
    ex = explorer.temperature_explorer()
    sent = []
    monkeypatch.setattr(widgets.Widget, "_send", lambda self, msg, buffers=None: sent.append((self, sorted(msg.get("state", {})))))
    getattr(ex, control).value = value
    others = [(w, keys) for w, keys in sent if w is not getattr(ex, control)]  # the control's own value aside
    assert others == ([(ex.figures._relay, ["value"])] if readout else []), others  # by the relay (appendix 17)
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


@pytest.fixture
def sent(monkeypatch) -> list[tuple[str, str, str | None, dict]]:
    "Every message the widgets made in the test send to the page: (comm id, message type, method, state), in order."
    log = []
    class Recording(comm.base_comm.BaseComm):
        def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys):
            data = data or {}
            log.append((self.comm_id, msg_type, data.get("method"), data.get("state", {})))
    monkeypatch.setattr(comm, "create_comm", lambda **kwargs: Recording(**kwargs))
    return log


def _to(sent: list, widget) -> list[tuple[str, str | None, dict]]:
    "The messages `widget` sent: (message type, method, state)."
    return [(kind, method, state) for comm_id, kind, method, state in sent if comm_id == widget.model_id]


def _relayed(sent: list, widget) -> list:
    "Every value the page got through `widget`'s relay, in order (its opening value first, if it had one)."
    return [state["value"] for _, _, state in _to(sent, widget._relay) if state.get("value") is not None]


def test_the_playground_shows_its_starting_point(sent):
    "The first figure the page gets for the history plot: one point per curve, on axes that show it, the N steps to come and the uniform limit."
    pg = explorer.hypersphere_playground()
    shown = json.loads(_relayed(sent, pg.fig_history)[0])
    assert [len(_plain(t["x"])) for t in shown["data"][:2]] == [1, 1]
    x, y, y2 = (shown["layout"][k]["range"] for k in ("xaxis", "yaxis", "yaxis2"))
    assert x[0] < 0 < pg.steps_input.value < x[1]
    assert y[0] < pg.history["uniformity"][0] < explorer.sphere_uniformity_limit(3) < y[1]
    assert y2[0] < pg.history["tolerance"][0] < y2[1]
    sphere = json.loads(_relayed(sent, pg.fig_sphere)[0])
    assert sum(len(_plain(t["x"])) for t in sphere["data"][:-1]) == len(pg.z)  # every point, in the first figure sent
    pg.step(3)
    assert list(pg.fig_history.data[0].x) == [0, 1, 2, 3] and pg.fig_history.layout.xaxis.range[1] > 50
    assert _plain(json.loads(_relayed(sent, pg.fig_history)[-1])["data"][0]["x"]) == [0, 1, 2, 3]  # each is the whole figure
    # the figures' own anywidget models got their opening state and nothing after it: nothing that anywidget could drop
    for fig in (pg.fig_history, pg.fig_sphere):
        assert [kind for kind, _, _ in _to(sent, fig)] == ["comm_open"], _to(sent, fig)


def test_the_kernel_confirms_the_explorer_through_the_relay(sent):
    ex = explorer.temperature_explorer()
    ex.tau_slider.value = 0.5
    assert _relayed(sent, ex.figures)[-1]["tau"] == pytest.approx(0.5) == ex.figures.kernel["tau"]
    assert [kind for kind, _, _ in _to(sent, ex.figures)] == ["comm_open"]  # none to the anywidget itself


def _widgets(root) -> list:
    "`root` and every widget inside it."
    found, todo = [], [root]
    while todo:
        w = todo.pop()
        found.append(w)
        todo.extend(getattr(w, "children", ()))
    return found


# anywidget gives a model about 2 s to import its front end, and drops every message to a model that took longer;
# plotly's FigureWidget and the first ExplorerFigures carried all of plotly.js in it (near 5 MB), which took 0.85-2.1 s
# to import in JupyterLab on 2 quiet cores. The package's widgets keep theirs small; plotly.js travels in a trait.
FRONT_END_LIMIT = 200_000


def test_every_widget_of_the_lessons_has_a_small_front_end(tmp_path):
    from ctl_explore.suppression import SuppressionExplorer
    shown = [explorer.temperature_explorer(), explorer.hypersphere_playground(), SuppressionExplorer(tmp_path)]
    any_widgets = [w for root in shown for w in _widgets(root) if isinstance(w, anywidget.AnyWidget)]
    kinds = {type(w).__name__ for w in any_widgets}
    assert kinds == {"ExplorerFigures", "LiveFigure"}, kinds  # no plotly FigureWidget among them
    for w in any_widgets:
        state = w.get_state()
        assert len(state["_esm"]) < FRONT_END_LIMIT, f"{type(w).__name__}'s front end is {len(state['_esm'])} characters"
        assert "ctlPlotly(model)" in state["_esm"] and state["_plotly_js"] == get_plotlyjs()


def test_a_live_figure_is_shown_as_its_widget():
    "A LiveFigure displayed alone is the widget (the page draws it from the kernel's updates), not a static copy of the figure."
    from IPython.core.formatters import DisplayFormatter
    lf = explorer.LiveFigure([go.Scatter(x=[0, 1], y=[1, 0])])
    data, _ = DisplayFormatter().format(lf)  # what IPython's display() shows (a go.Figure would show itself, statically)
    assert data["application/vnd.jupyter.widget-view+json"]["model_id"] == lf.model_id
    assert "application/vnd.plotly.v1+json" not in data and "text/html" not in data
