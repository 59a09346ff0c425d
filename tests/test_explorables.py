"""Lesson 02's explorables on the static site, in headless Chromium from ``file://``: each control moved, the plotted
numbers read back from the page's plotly divs and compared with what ``ctl_explore`` computes for that setting.

Uses the site that ``browser_setup.built_site`` builds once per session (``--only``: lessons 02, 91, 92 and the index,
plus ``explorables.html``). The temperature explorer is checked on ``explorables.html`` (τ dragged from 1 to 0.05 with
the keyboard, α, λ, K, s_ii typed, each set of negatives chosen, the log axis, a refused value) and on lesson 02's page;
both pages first get the checks ``test_site_browser`` makes on every other page of the site (``check_page_state``: each
page is loaded once per run);
the playground's replay is scrubbed, switched to other τ and losses, and played to its end; lessons 09, 10 and 12's
shipped results (one loss and τ, one loss or seed, one τ at a time) show the numbers of the library's own figure
functions for the option picked. Numbers agree to 1e-6
relative (to each number for r_i and the gradients, to the curve's largest value for the curves over τ, whose values
near zero are sums taken in another order); the replay's points are the library's rounded to int16 (within 2e-5).
Throughout, no console error, no page error and no request outside ``file://``.

The page's own timer (one update: the port's computation and the redraw of the figures it moves) is written with
the build's time to ``explorables_timing.json`` in a temporary folder (``CTL_ARTIFACTS`` names another).
"""
from __future__ import annotations

import json
import math
import platform
import statistics
from pathlib import Path

import numpy as np
import pytest
import torch

from browser_setup import (ARTIFACTS, CHROMIUM, built_site, check_page_state, launch_browser, needs_browser, open_page,
                           read_page_state)
from ctl_explore.explorer import N_BINS, REFERENCE_TAUS, TAU_GRID, entropy_curve, limit_regimes, loss_curves, similarity_set, simulate
from ctl_explore.gradients import loss_gradients, penalty_entropy, relative_penalty
from ctl_explore.losses import contrastive_loss, informative_mask

REPO = Path(__file__).resolve().parents[1]
TIMINGS = ARTIFACTS / "explorables_timing.json"
RTOL = 1e-6

pytestmark = needs_browser("the explorables' browser tests") + [pytest.mark.slow]  # a site build and a browser: minutes on 2 cores


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return built_site(tmp_path_factory)


@pytest.fixture(scope="module")
def browser():
    yield from launch_browser()


@pytest.fixture(scope="module")
def page(site, browser):
    "explorables.html, opened once for the module: the tests below move its controls in turn."
    out, _, _ = site
    context, pg, seen = open_page(browser, out / "explorables.html")
    pg.seen = seen
    yield pg
    context.close()


EXPLORER = ".ctl-explorable[data-ctl-explorable='temperature-explorer']"
REPLAY = ".ctl-explorable[data-ctl-explorable='hypersphere-replay']"

READ_EXPLORER = """host => {
  const fig = n => host.querySelector(`[data-ctl-plot=${n}]`);
  const traces = n => fig(n).data.map(t => ({x: Array.from(t.x || []), y: Array.from(t.y || [])}));
  return {state: Object.assign({}, host.ctlState), penalty: traces('penalty'), entropy: traces('entropy'),
          loss: traces('loss'), gradient: traces('gradient').map(t => t.y[0]),
          shapes: {penalty: fig('penalty').layout.shapes.map(s => [s.x0, s.x1]), loss: fig('loss').layout.shapes.map(s => [s.x0, s.x1])},
          r_axis: fig('penalty').layout.yaxis.type, readout: host.querySelector('.ctl-x-readout').textContent};
}"""


def _close(got, want, what: str, whole: bool = False) -> None:
    got, want = np.asarray(got, dtype=float), np.asarray(want, dtype=float)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, the library's {want.shape}"
    scale = np.abs(want).max() if whole else np.abs(want)
    bad = np.abs(got - want) > RTOL * scale + 1e-12 * np.abs(want).max()
    assert not bad.any(), f"{what}: {bad.sum()} of {bad.size} numbers differ, e.g. page {got[bad][:3]} library {want[bad][:3]}"


def _expected(state: dict) -> dict:
    "What the four plots must show for `state`, computed with the library."
    _, neg = similarity_set(state["source"], state["k"], state["seed"])
    row, tau, alpha = neg[None], state["tau"], state["alpha"]
    pos = torch.tensor([state["pos"]], dtype=torch.float64)
    keep = informative_mask(row, alpha)[0]
    curves = loss_curves(state["pos"], neg)
    dpos, dneg = loss_gradients(pos, row, tau)
    n_top = min(5, len(neg))
    heights = [-dpos.item()] + [dneg[0, -1 - r].item() if r < n_top else 0.0 for r in range(5)] + [dneg[0, :-n_top].sum().item()]
    return dict(neg=neg, r=relative_penalty(row, tau)[0], r_hard=relative_penalty(row, tau, alpha)[0],
                r_ref=[relative_penalty(row, t)[0] for t in REFERENCE_TAUS], counts=torch.histc(neg, bins=N_BINS, min=-1, max=1),
                s_alpha=neg[keep].min().item(), n_kept=int(keep.sum()), entropy=entropy_curve(neg),
                entropy_hard=entropy_curve(neg, alpha=alpha), h=penalty_entropy(row, tau)[0].item(),
                h_hard=penalty_entropy(row, tau, alpha)[0].item(), curves=curves, regimes=limit_regimes(curves),
                loss=contrastive_loss(pos, row, tau).item(), heights=heights)


def _check_explorer(shown: dict) -> None:
    "Every plotted number of the explorer equals the library's for the settings the page reports."
    s, e = shown["state"], _expected(shown["state"])
    where = f"at {({k: s[k] for k in ('tau', 'alpha', 'lam', 'source', 'k', 'pos')})}"
    p = shown["penalty"]
    for i in range(6):
        _close(p[i]["x"], e["neg"], f"the negatives (trace {i}) {where}")
    _close(p[0]["y"], e["r"], f"r_i {where}")
    _close(p[1]["y"], e["r_hard"], f"hard r_i {where}")
    for i, r in enumerate(e["r_ref"]):
        _close(p[2 + i]["y"], r, f"r_i at τ = {REFERENCE_TAUS[i]} {where}")
    _close(p[6]["y"], [s["lam"]] * 2, f"λ {where}")
    _close(p[7]["y"], e["counts"], f"the negatives' histogram {where}")
    _close(shown["shapes"]["penalty"][0][0], e["s_alpha"], f"s_α {where}")
    h = shown["entropy"]
    _close(h[0]["x"], TAU_GRID, "the τ axis")
    _close(h[0]["y"], e["entropy"], f"H(r_i) against τ {where}", whole=True)
    _close(h[1]["y"], e["entropy_hard"], f"hard H(r_i) against τ {where}", whole=True)
    _close(h[2]["x"] + h[2]["y"], [s["tau"], e["h"]], f"the H marker {where}")
    _close(h[3]["x"] + h[3]["y"], [s["tau"], e["h_hard"]], f"the hard H marker {where}")
    _close(h[4]["y"], [math.log(s["k"])] * 2, f"log K {where}")
    _close(h[5]["y"], [math.log(e["n_kept"])] * 2, f"log kept {where}")
    ls = shown["loss"]
    for i, name in enumerate(("loss", "triplet", "simple")):
        _close(ls[i]["y"], e["curves"][name], f"the {name} curve {where}", whole=True)
    _close(ls[3]["x"] + ls[3]["y"], [s["tau"], e["loss"]], f"the loss marker {where}")
    tau_trip, tau_simple = e["regimes"]
    low, high = TAU_GRID[0].item(), TAU_GRID[-1].item()
    _close(shown["shapes"]["loss"][0] + shown["shapes"]["loss"][1], [low, tau_trip or low, tau_simple or high, high],
           f"the limits' regimes {where}")
    _close(shown["gradient"], e["heights"], f"Eq 4's bars {where}")


def _read(page, selector: str = EXPLORER) -> dict:
    return page.locator(selector).first.evaluate(READ_EXPLORER)


def _updates(page) -> int:
    return page.locator(EXPLORER).first.evaluate("h => h.ctlState.updates || 0")


def _type(page, name: str, value, selector: str = EXPLORER) -> None:
    "Type `value` into the control's box and press Enter, then wait until the page has redrawn."
    before = _updates(page)
    box = page.locator(f"{selector} [data-ctl-box={name}]")
    box.fill(str(value))
    box.press("Enter")
    page.wait_for_function(f"() => (document.querySelector(\"{EXPLORER}\").ctlState.updates || 0) > {before}", timeout=30_000)


def _choose(page, source: str) -> None:
    before = _updates(page)
    page.locator(f"{EXPLORER} [data-ctl-control=source]").select_option(source)
    page.wait_for_function(f"() => (document.querySelector(\"{EXPLORER}\").ctlState.updates || 0) > {before}", timeout=30_000)


def test_explorables_page_reads_offline(site, page):
    "First, before any control moves: the checks test_site_browser makes on every page of the site (this page is opened once)."
    out, manifest, _ = site
    check_page_state("explorables", read_page_state(page), page.seen, out, manifest)


def test_explorer_starts_as_the_library_draws_it(page):
    shown = _read(page)
    assert shown["state"]["tau"] == 0.2 and shown["state"]["source"] == "spread" and shown["state"]["k"] == 256
    _check_explorer(shown)
    assert "H(r_i)" in shown["readout"] and "K = 256" in shown["readout"]


def test_dragging_tau_from_1_to_0_05(page):
    "τ typed to 1, then dragged down with the arrow key (0.01 in log10 a press) to 0.05: r_i is the library's on the way."
    _type(page, "tau", 1)
    _check_explorer(_read(page))
    start = len(page.locator(EXPLORER).first.evaluate("h => h.ctlTimings"))
    slider = page.locator(f"{EXPLORER} [data-ctl-control=tau]")
    slider.focus()
    r_at_1 = _read(page)["penalty"][0]["y"]
    for press in range(1, 131):  # log10 τ from 0 to -1.30
        before = _updates(page)
        page.keyboard.press("ArrowLeft")
        page.wait_for_function(f"() => document.querySelector(\"{EXPLORER}\").ctlState.updates > {before}", timeout=30_000)
        if press % 26 == 0:
            shown = _read(page)
            assert shown["state"]["tau"] == pytest.approx(10 ** (-press / 100), rel=1e-9)
            _check_explorer(shown)
    shown = _read(page)
    assert shown["state"]["tau"] == pytest.approx(0.0501187, rel=1e-6)
    assert max(shown["penalty"][0]["y"]) > 10 * max(r_at_1), "r_i did not sharpen as τ fell"
    _type(page, "tau", 0.05)
    shown = _read(page)
    assert shown["state"]["tau"] == 0.05
    _check_explorer(shown)
    timings = page.locator(EXPLORER).first.evaluate("h => h.ctlTimings")[start:]
    TIMINGS.parent.mkdir(parents=True, exist_ok=True)
    old = json.loads(TIMINGS.read_text()) if TIMINGS.exists() else {}
    old["tau_drag_k256"] = dict(steps=len(timings), median_ms=round(statistics.median(timings), 2),
                                p90_ms=round(float(np.percentile(timings, 90)), 2), max_ms=round(max(timings), 2))
    TIMINGS.write_text(json.dumps(old, indent=1) + "\n")
    assert len(timings) >= 130


def test_a_fast_drag_ends_drawn_at_the_value_reached(page):
    "Twenty key presses without waiting: redraws are merged while one is drawn, and the last one shows the last value."
    _type(page, "tau", 0.5)
    before = _updates(page)
    page.locator(f"{EXPLORER} [data-ctl-control=tau]").focus()
    for _ in range(20):
        page.keyboard.press("ArrowLeft")
    page.wait_for_function(f"() => {{ const x = document.querySelector(\"{EXPLORER}\").ctlExplorable; return !x.busy && !x.pending; }}",
                           timeout=60_000)
    shown = _read(page)
    assert shown["state"]["tau"] == pytest.approx(10 ** (round(math.log10(0.5), 2) - 0.2), rel=1e-9)
    assert 1 <= shown["state"]["updates"] - before <= 20
    _check_explorer(shown)


def test_tau_at_both_ends(page):
    for tau in (0.01, 10, 3.0):
        _type(page, "tau", tau)
        _check_explorer(_read(page))


def test_alpha(page):
    for alpha in (0.01, 0.37, 1.0, 0.1):
        _type(page, "alpha", alpha)
        shown = _read(page)
        assert shown["state"]["alpha"] == alpha
        _check_explorer(shown)


def test_lambda(page):
    for lam in (1e-4, 0.05, 1.0):
        _type(page, "lam", lam)
        shown = _read(page)
        assert shown["state"]["lam"] == lam
        _check_explorer(shown)


def test_k_and_the_sets_of_negatives(page):
    _type(page, "tau", 0.07)
    for k in (2, 17, 4096):
        _type(page, "k", k)
        _check_explorer(_read(page))
    start = len(page.locator(EXPLORER).first.evaluate("h => h.ctlTimings"))
    slider = page.locator(f"{EXPLORER} [data-ctl-control=tau]")  # the drag timing at the largest K
    slider.focus()
    for _ in range(30):
        before = _updates(page)
        page.keyboard.press("ArrowRight")
        page.wait_for_function(f"() => document.querySelector(\"{EXPLORER}\").ctlState.updates > {before}", timeout=30_000)
    _check_explorer(_read(page))
    timings = page.locator(EXPLORER).first.evaluate("h => h.ctlTimings")[start:]
    old = json.loads(TIMINGS.read_text()) if TIMINGS.exists() else {}
    old["tau_drag_k4096"] = dict(steps=len(timings), median_ms=round(statistics.median(timings), 2),
                                 p90_ms=round(float(np.percentile(timings, 90)), 2), max_ms=round(max(timings), 2))
    TIMINGS.parent.mkdir(parents=True, exist_ok=True)
    TIMINGS.write_text(json.dumps(old, indent=1) + "\n")
    _choose(page, "digits")  # 1796 negatives at most: K clamped, s_ii the digit's own
    shown = _read(page)
    assert shown["state"]["k"] == 1796 and shown["state"]["pos"] == similarity_set("digits", 10)[0]
    _check_explorer(shown)
    for k in (50, 1000):
        _type(page, "k", k)
        _check_explorer(_read(page))
    _choose(page, "near")
    shown = _read(page)
    assert shown["state"]["k"] == 1000 and shown["state"]["pos"] == 0.8
    _check_explorer(shown)
    _type(page, "k", 3000)
    _check_explorer(_read(page))
    _choose(page, "spread")
    _check_explorer(_read(page))


def test_positive_similarity_and_log_axis(page):
    for pos in (-0.5, 0.95):
        _type(page, "pos", pos)
        shown = _read(page)
        assert shown["state"]["pos"] == pos
        _check_explorer(shown)
    before = _updates(page)
    page.locator(f"{EXPLORER} [data-ctl-control=log_r]").check()
    page.wait_for_function(f"() => document.querySelector(\"{EXPLORER}\").ctlState.updates > {before}", timeout=30_000)
    assert _read(page)["r_axis"] == "log"


def test_a_value_out_of_range_is_refused_in_a_sentence(page):
    shown = _read(page)
    for bad in ("0", "11", "", "-3"):
        box = page.locator(f"{EXPLORER} [data-ctl-box=tau]")
        box.fill(bad)
        box.press("Enter")
        readout = page.locator(f"{EXPLORER} .ctl-x-readout").text_content()
        assert readout.startswith("τ must be a number in [0.01, 10]"), readout
        assert _read(page)["state"]["tau"] == shown["state"]["tau"]  # nothing changed
    box = page.locator(f"{EXPLORER} [data-ctl-box=k]")
    box.fill("2.5")
    box.press("Enter")
    assert page.locator(f"{EXPLORER} .ctl-x-readout").text_content().startswith("K must be a whole number")


# ---- the playground's replay ------------------------------------------------------------------------------------

READ_REPLAY = """host => {
  const fig = n => host.querySelector(`[data-ctl-plot=${n}]`);
  return {state: Object.assign({}, host.ctlState),
          classes: fig('sphere').data.slice(0, -1).map(t => [Array.from(t.x), Array.from(t.y), Array.from(t.z)]),
          history: fig('history').data.map(t => ({x: Array.from(t.x), y: Array.from(t.y)})),
          taus_disabled: Array.from(host.querySelectorAll('[data-ctl-tau]')).map(b => b.disabled),
          readout: host.querySelector('.ctl-x-readout').textContent};
}"""


def _check_replay(shown: dict) -> None:
    "The points and both histories shown equal `simulate`'s for the run and step the page reports."
    s = shown["state"]
    run = simulate(s["loss"], s["tau"], steps=s["step"]) if s["step"] else None
    from ctl_explore.explorer import class_clusters
    z, labels = (run["z"], class_clusters()[1]) if run else class_clusters()
    for c, (x, y, zz) in enumerate(shown["classes"]):
        want = z[labels == c].numpy()
        got = np.stack([x, y, zz], axis=1)
        assert got.shape == want.shape and np.abs(got - want).max() <= 2e-5, f"class {c} at {s}"
    unif = run["uniformity"] if run else [shown["history"][0]["y"][0]]
    tol = run["tolerance"] if run else [shown["history"][1]["y"][0]]
    _close(shown["history"][0]["x"], list(range(s["step"] + 1)), f"the steps at {s}")
    _close(shown["history"][0]["y"], unif, f"uniformity at {s}")
    _close(shown["history"][1]["y"], tol, f"tolerance at {s}")


def _shown(page) -> int:
    return page.locator(REPLAY).first.evaluate("h => h.ctlState.shown || 0")


def _scrub(page, frame: int) -> None:
    before = _shown(page)
    page.locator(f"{REPLAY} [data-ctl-control=frame]").evaluate(
        f"(r) => {{ r.value = {frame}; r.dispatchEvent(new Event('input', {{bubbles: true}})); }}")
    page.wait_for_function(f"() => document.querySelector(\"{REPLAY}\").ctlState.shown > {before}", timeout=30_000)


def test_replay_scrubs_and_switches(page):
    shown = page.locator(REPLAY).first.evaluate(READ_REPLAY)
    assert shown["state"]["step"] == 0 and shown["state"]["loss"] == "contrastive" and shown["state"]["tau"] == 0.2
    _check_replay(shown)
    _scrub(page, 10)
    shown = page.locator(REPLAY).first.evaluate(READ_REPLAY)
    assert shown["state"]["step"] == 50
    _check_replay(shown)
    for tau in ("5", "0.05"):
        before = _shown(page)
        page.locator(f"{REPLAY} [data-ctl-tau='{tau}']").click()
        page.wait_for_function(f"() => document.querySelector(\"{REPLAY}\").ctlState.shown > {before}", timeout=30_000)
        shown = page.locator(REPLAY).first.evaluate(READ_REPLAY)
        assert shown["state"]["tau"] == float(tau) and shown["state"]["step"] == 50
        _check_replay(shown)
    before = _shown(page)
    page.locator(f"{REPLAY} [data-ctl-control=loss]").select_option("hard_simple")
    page.wait_for_function(f"() => document.querySelector(\"{REPLAY}\").ctlState.shown > {before}", timeout=30_000)
    shown = page.locator(REPLAY).first.evaluate(READ_REPLAY)
    assert all(shown["taus_disabled"]), "a loss without τ still offers τ"
    assert shown["state"]["run"].startswith("hard_simple")
    _check_replay(shown)


def test_replay_plays_to_the_end(page):
    before = _shown(page)
    page.locator(f"{REPLAY} [data-ctl-control=loss]").select_option("hard_contrastive")
    page.wait_for_function(f"() => document.querySelector(\"{REPLAY}\").ctlState.shown > {before}", timeout=30_000)
    _scrub(page, 0)
    start = page.locator(REPLAY).first.evaluate("h => h.ctlShownSteps.length")
    page.locator(f"{REPLAY} [data-ctl-control=play]").click()
    page.wait_for_function(f"() => !document.querySelector(\"{REPLAY}\").ctlState.playing", timeout=60_000)
    state = page.locator(REPLAY).first.evaluate("h => Object.assign({}, h.ctlState)")
    assert state["step"] == 100, state
    drawn = page.locator(REPLAY).first.evaluate("h => h.ctlShownSteps")[start:]
    # at the designed pace (one frame every frame_ms) a slow machine drops frames rather than stretching the replay: the
    # steps drawn are kept steps, in order, from the first to the last (test_site_thumb times the pace)
    kept = list(range(0, 101, 5))
    assert drawn[0] == 0 and drawn[-1] == 100 and drawn == sorted(set(drawn)) and set(drawn) <= set(kept), \
        f"the replay did not play the kept steps in order, from the first to the last: {drawn}"
    assert page.locator(f"{REPLAY} [data-ctl-control=frame]").input_value() == "20"
    _check_replay(page.locator(REPLAY).first.evaluate(READ_REPLAY))


# ---- on lesson 02's page ----------------------------------------------------------------------------------------

def test_lesson_02_page_has_both_explorables_live(site, browser):
    out, manifest, _ = site
    context, pg, seen = open_page(browser, out / "02_explorer.html")
    try:
        state = read_page_state(pg)  # for the checks test_site_browser makes on every other page, before anything moves
        assert pg.locator(EXPLORER).count() >= 1 and pg.locator(REPLAY).count() >= 1
        _check_explorer(_read(pg))
        _type(pg, "tau", 0.05)
        _check_explorer(_read(pg))
        _type(pg, "alpha", 0.5)
        _check_explorer(_read(pg))
        _check_replay(pg.locator(REPLAY).first.evaluate(READ_REPLAY))
        old = json.loads(TIMINGS.read_text()) if TIMINGS.exists() else {}
        old["build"] = dict(seconds=manifest.get("build_seconds"), pages={p["page"]: p["seconds"] for p in manifest["pages"]},
                            explorables_page=manifest["explorables"]["seconds"])
        old["machine"] = dict(processor=platform.processor() or platform.machine(), chromium=CHROMIUM,
                              browser_version=browser.version, python=platform.python_version())
        TIMINGS.parent.mkdir(parents=True, exist_ok=True)
        TIMINGS.write_text(json.dumps(old, indent=1) + "\n")
    finally:
        context.close()
    assert not seen["network"] and not seen["failed"], seen
    assert not seen["pageerror"] and not seen["console"], seen
    check_page_state("02_explorer", state, seen, out, manifest)


# ---- lessons 09 and 12's shipped results, one setting at a time ---------------------------------------------------

STEPPER = ".ctl-explorable[data-ctl-explorable='figure-stepper']"
READ_STEPPER = """host => ({state: Object.assign({}, host.ctlState), note: host.querySelector('.ctl-x-readout').textContent,
  figures: Array.from(host.querySelectorAll('[data-ctl-plot]')).map(d => d.data.map(t => ({x: t.x == null ? null : Array.from(t.x),
                                                                                          y: t.y == null ? null : Array.from(t.y)})))})"""


def _numbers(fig) -> list:
    "Each trace's x and y of a library figure, as the page holds them (plain lists)."
    from ctl_explore.explorables import _figure_dicts
    return [{"x": t.get("x"), "y": t.get("y")} for t in _figure_dicts(fig)[1][0]["data"]]


def _same(page_traces: list, library_traces: list, what: str) -> None:
    assert len(page_traces) == len(library_traces), f"{what}: {len(page_traces)} traces, the library's {len(library_traces)}"
    for i, (a, b) in enumerate(zip(page_traces, library_traces)):
        for axis in ("x", "y"):
            if b[axis] is None or isinstance(b[axis][0], str):
                assert a[axis] == (list(b[axis]) if b[axis] is not None else None), f"{what}: trace {i} {axis}"
            else:
                _close([np.nan if v is None else v for v in a[axis]], [np.nan if v is None else v for v in b[axis]],
                       f"{what}: trace {i} {axis}")


def _pick(page, host, name: str, option: str) -> None:
    before = host.evaluate("h => h.ctlState.shown || 0")
    host.locator(f"[data-ctl-control={name}]").select_option(label=option)
    page.wait_for_function("([h, n]) => (h.ctlState.shown || 0) > n", arg=[host.element_handle(), before], timeout=30_000)


def test_study_one_cell_at_a_time(page):
    from ctl_explore.explorer import LOSSES
    from ctl_explore.study.report import trajectory_figure
    from ctl_explore.explorables import _profile_figure
    rows = json.loads((REPO / "data" / "study-digits" / "results.json").read_text())
    host = page.locator(STEPPER).nth(0)
    for loss, tau in (("hard_contrastive", 0.5), ("contrastive", 0.05), ("simple", 0.2)):
        _pick(page, host, "loss", LOSSES[loss])
        _pick(page, host, "tau", f"{tau:g}")
        shown = host.evaluate(READ_STEPPER)
        cell = [r for r in rows if r["loss"] == loss and (loss == "simple" or r["tau"] == tau) and not r.get("failed")]
        _same(shown["figures"][0], _numbers(trajectory_figure(cell)), f"trajectories of {loss} at τ = {tau}")
        label = LOSSES[loss] + ("" if loss == "simple" else f", τ = {tau:g}")
        _same(shown["figures"][1], _numbers(_profile_figure(cell, "")), f"similarity profile of {loss} at τ = {tau}")
        assert shown["note"].startswith(f"{label}: {len(cell)} runs; linear accuracy {sum(r['linear_top1'] for r in cell) / len(cell):.3f}")


def test_uniformity_tolerance_plane_one_loss_or_seed_at_a_time(page):
    from ctl_explore.explorer import LOSSES
    from ctl_explore.viz import uniformity_tolerance_plane
    rows = [r for r in json.loads((REPO / "data" / "study-digits" / "results.json").read_text()) if not r.get("failed")]
    host = page.locator(STEPPER).nth(1)
    for loss, seed in (("hard_contrastive", "0"), (None, "2"), ("simple", "every seed")):
        _pick(page, host, "loss", LOSSES[loss] if loss else "every loss")
        _pick(page, host, "seed", seed)
        mine = [r for r in rows if loss in (None, r["loss"]) and seed in ("every seed", str(r["seed"]))]
        shown = host.evaluate(READ_STEPPER)
        _same(shown["figures"][0], _numbers(uniformity_tolerance_plane(mine)), f"the plane for {loss}, seed {seed}")
        assert shown["note"] == f"{len(mine)} runs"


def test_randbit_one_tau_at_a_time(page):
    from ctl_explore.suppression import randbit_figure
    rows = json.loads((REPO / "data" / "suppression" / "randbit-digits.json").read_text())["rows"]
    host = page.locator(STEPPER).nth(2)
    for tau in sorted({r["tau"] for r in rows}, reverse=True):
        _pick(page, host, "tau", f"{tau:g}")
        shown = host.evaluate(READ_STEPPER)
        _same(shown["figures"][0], _numbers(randbit_figure([r for r in rows if r["tau"] == tau])), f"RandBit at τ = {tau}")


def test_nothing_went_wrong_on_the_page(page):
    "Over every test above: no console error, no page error, no request outside file://."
    assert not page.seen["network"], f"requests beyond file://: {page.seen['network'][:5]}"
    assert not page.seen["failed"], f"files the page asked for and did not get: {page.seen['failed'][:5]}"
    assert not page.seen["pageerror"], page.seen["pageerror"][:5]
    assert not page.seen["console"], page.seen["console"][:5]
