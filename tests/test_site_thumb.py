"""The site's explorables under a thumb and on every screen: headless Chromium at 390 × 844 and 768 × 1024 (touch),
1280 × 720 and 1920 × 1080, on the pages that ``browser_setup.built_site`` builds once per session.

- a one-finger vertical swipe over the playground's 3-D sphere scrolls the page and leaves the sphere as it was (the
  choice made here: on a touch screen the page scrolls, the sphere does not turn);
- the replay's first frame shows both starting points whole, inside the plot area;
- on a touch screen no plotly toolbar lies over a plot's title;
- no title, axis title, legend or label of the explorables' plots reaches past its figure;
- on a touch screen every control of the explorables, and every link of the index's navigation, is at least 44 px
  wide and tall;
- the negatives' histogram has the bins of ``torch.histc`` at every K from 2 to the set's largest, for each set;
- the page's address and the menu agree (``#explorer?source=digits`` sets s_ii as choosing "digits" does), the preset
  menu stops naming a preset once a control moved, and a value the address gets wrong is said on the page;
- ▶ play takes the replay's designed time (its frames × ``frame_ms``), also with the CPU slowed 4× (frames are
  dropped, not delayed).
"""
from __future__ import annotations

import json
import time

import pytest
import torch

from browser_setup import built_site, launch_browser, needs_browser

pytestmark = needs_browser("the site's touch and screen-size tests") + [pytest.mark.slow]

SIZES = {"phone": (390, 844), "tablet": (768, 1024), "laptop": (1280, 720), "projector": (1920, 1080)}
TOUCH = ("phone", "tablet")
EXPLORER = ".ctl-explorable[data-ctl-explorable='temperature-explorer']"
REPLAY = ".ctl-explorable[data-ctl-explorable='hypersphere-replay']"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return built_site(tmp_path_factory)


@pytest.fixture(scope="module")
def browser():
    yield from launch_browser()


def _open(browser, path, size: str, hash: str = ""):
    w, h = SIZES[size]
    touch = size in TOUCH
    context = browser.new_context(viewport={"width": w, "height": h}, has_touch=touch, is_mobile=touch, device_scale_factor=1)
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file://") else r.abort())
    page.goto(path.as_uri() + hash)
    page.wait_for_function("window.ctlSite && (window.ctlSite.done || window.ctlSite.errors.length > 0)", timeout=180_000)
    return context, page


@pytest.fixture(scope="module")
def explorables_at(site, browser):
    "explorables.html opened once per size for the tests that read it or scroll it: `explorables_at(size)` -> page."
    out, _, _ = site
    opened = {}

    def page_at(size: str):
        if size not in opened: opened[size] = _open(browser, out / "explorables.html", size)
        return opened[size][1]
    yield page_at
    for context, _ in opened.values():
        context.close()


def _swipe(page, x: float, y0: float, dy: float = -200):
    "One finger from (x, y0) moving dy px in ten steps, through Chrome's touch input (as a thumb does)."
    cdp = page.context.new_cdp_session(page)
    points = lambda y: [{"x": x, "y": y, "id": 1}]
    cdp.send("Input.dispatchTouchEvent", {"type": "touchStart", "touchPoints": points(y0)})
    for i in range(1, 11):
        cdp.send("Input.dispatchTouchEvent", {"type": "touchMove", "touchPoints": points(y0 + dy * i / 10)})
    cdp.send("Input.dispatchTouchEvent", {"type": "touchEnd", "touchPoints": []})
    page.wait_for_timeout(400)
    cdp.detach()


@pytest.mark.parametrize("size", TOUCH)
def test_a_swipe_over_the_sphere_scrolls_the_page(explorables_at, size):
    page = explorables_at(size)
    sphere = page.locator(f"{REPLAY} [data-ctl-plot=sphere]")
    sphere.scroll_into_view_if_needed()
    page.evaluate("() => window.scrollBy(0, -100)")  # room to scroll both ways
    box = sphere.bounding_box()
    x, y0 = box["x"] + box["width"] / 2, min(box["y"] + box["height"] * 0.6, SIZES[size][1] - 20)
    camera = "d => JSON.stringify(d._fullLayout.scene.camera)"
    before, eye = page.evaluate("() => window.scrollY"), sphere.evaluate(camera)
    _swipe(page, x, y0)
    after = page.evaluate("() => window.scrollY")
    assert after > before + 50, f"a 200 px swipe over the sphere scrolled the page by {after - before} px at {size}"
    assert sphere.evaluate(camera) == eye, "the swipe turned the sphere"


_FIRST_POINTS = """h => {
  const d = h.querySelector('[data-ctl-plot=history]'), area = d.querySelector('.nsewdrag').getBoundingClientRect();
  return [...d.querySelectorAll('.scatterlayer .trace')].slice(0, 2).map(t => {
    const p = t.querySelector('.points path');
    if (!p) return null;
    const r = p.getBoundingClientRect();
    return {inside: r.left >= area.left - 0.5 && r.right <= area.right + 0.5 && r.top >= area.top - 0.5 && r.bottom <= area.bottom + 0.5,
            point: [r.left, r.top, r.right, r.bottom].map(Math.round), area: [area.left, area.top, area.right, area.bottom].map(Math.round)};
  });
}"""


@pytest.mark.parametrize("size", list(SIZES))
def test_the_replays_first_frame_shows_both_starting_points(explorables_at, size):
    page = explorables_at(size)
    host = page.locator(REPLAY).first
    assert host.evaluate("h => h.ctlState.step") == 0
    points = host.evaluate(_FIRST_POINTS)
    assert len(points) == 2 and all(points), f"the two starting points are not drawn at {size}: {points}"
    assert all(p["inside"] for p in points), f"a starting point reaches past the plot area at {size}: {points}"


_TOOLBAR_OVER_TITLE = """() => [...document.querySelectorAll('.js-plotly-plot')].flatMap(d => {
  const bar = d.querySelector('.modebar'), title = d.querySelector('.gtitle');
  if (!bar || !title) return [];
  const a = bar.getBoundingClientRect(), b = title.getBoundingClientRect();
  const overlap = a.width > 0 && a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
  return overlap ? [title.textContent.slice(0, 60)] : [];
})"""


@pytest.mark.parametrize("size", TOUCH)
def test_no_toolbar_over_a_title_on_touch(site, browser, explorables_at, size):
    out, _, _ = site
    page = explorables_at(size)
    page.locator(f"{EXPLORER} [data-ctl-plot=penalty]").tap()  # a tap is what shows plotly's toolbar on a phone
    assert not page.evaluate(_TOOLBAR_OVER_TITLE), f"plotly's toolbar over titles on explorables.html at {size}"
    context, lesson = _open(browser, out / "92_static_explorables.html", size)  # the site's own plotly figures too
    try:
        assert lesson.locator(".ctl-plotly .js-plotly-plot").count() > 0
        assert not lesson.evaluate(_TOOLBAR_OVER_TITLE), f"plotly's toolbar over titles on a lesson's page at {size}"
    finally:
        context.close()


_CLIPPED = """() => [...document.querySelectorAll('.ctl-explorable .js-plotly-plot')].flatMap(d => {
  const svg = d.querySelector('svg.main-svg').getBoundingClientRect(), out = [];
  d.querySelectorAll('.gtitle, .g-xtitle text, .g-ytitle text, .g-y2title text, .annotation, .legend .legendtext, .xtick text, .ytick text')
   .forEach(e => {
    const r = e.getBoundingClientRect();
    if (r.width === 0 || getComputedStyle(e).visibility === 'hidden' || e.closest('[visibility=hidden], [display=none]')) return;
    if (r.left < svg.left - 1 || r.right > svg.right + 1 || r.top < svg.top - 1 || r.bottom > svg.bottom + 1)
      out.push([d.closest('[data-ctl-plot]') ? d.closest('[data-ctl-plot]').dataset.ctlPlot : '?', e.textContent.slice(0, 50),
                Math.round(r.left - svg.left), Math.round(svg.right - r.right)]);
  });
  return out;
})"""


@pytest.mark.parametrize("size", list(SIZES))
def test_no_label_is_clipped(explorables_at, size):
    "Each label's box (plot, left edge from the figure's left, right edge from the figure's right) must lie inside its figure."
    page = explorables_at(size)
    clipped = page.evaluate(_CLIPPED)
    assert not clipped, f"labels reaching past their figure at {size}: {clipped}"


_SMALL = """() => [...document.querySelectorAll('.ctl-explorable input, .ctl-explorable select, .ctl-explorable button, .modebar-btn')]
  .map(e => [e.tagName + (e.type ? ':' + e.type : '') + ' ' + (e.dataset.ctlControl || e.dataset.ctlBox || e.dataset.ctlTau || e.textContent.slice(0, 12)),
             Math.round(e.getBoundingClientRect().width), Math.round(e.getBoundingClientRect().height)])
  .filter(r => r[1] < 44 || r[2] < 44)"""


@pytest.mark.parametrize("size", TOUCH)
def test_every_control_is_a_thumb_wide_on_touch(site, browser, explorables_at, size):
    page = explorables_at(size)
    assert page.locator(".ctl-explorable button").count() > 4
    small = page.evaluate(_SMALL)
    assert not small, f"controls under 44 × 44 px at {size}: {small}"
    out, _, _ = site
    context, index = _open(browser, out / "index.html", size)
    try:
        links = index.evaluate("""() => [...document.querySelectorAll('nav a')].map(a => [a.textContent.trim().slice(0, 30),
                                   Math.round(a.getBoundingClientRect().height)])""")
        assert links, "the index has no navigation links"
        small = [l for l in links if l[1] < 44]
        assert not small, f"index links under 44 px tall at {size}: {small[:5]} ({len(small)} of {len(links)})"
    finally:
        context.close()


_HISTOGRAMS = """([source, kmax]) => {
  const h = document.querySelector("%s"), x = h.ctlExplorable, M = window.ctlExplorables.math, out = [];
  const state = x.state, saved = [state.source, state.k];
  state.source = source;
  for (let k = 2; k <= kmax; k++) { state.k = k; out.push(M.histc(x.negatives(), x.spec.n_bins, -1, 1)); }
  [state.source, state.k] = saved;
  return out;
}""" % EXPLORER


def test_the_histogram_is_torch_histc_at_every_k(explorables_at):
    from ctl_explore.explorer import N_BINS, max_negatives, similarity_set
    page = explorables_at("laptop")
    spec = page.locator(EXPLORER).first.evaluate("h => ({sources: Object.fromEntries(Object.entries(h.ctlExplorable.spec.sources)"
                                                 ".map(([k, v]) => [k, {max_k: v.max_k, draws: v.draws || null}])), n_bins: h.ctlExplorable.spec.n_bins})")
    assert spec["n_bins"] == N_BINS
    seed = page.locator(EXPLORER).first.evaluate("h => h.ctlExplorable.spec.state.seed")
    for source, src in spec["sources"].items():
        kmax = src["max_k"]
        assert kmax == min(4096, max_negatives(source)), (source, kmax)
        got = page.evaluate(_HISTOGRAMS, [source, kmax])
        draws = None if source == "spread" else torch.tensor(src["draws"], dtype=torch.float64)  # the page's own draws
        for k in (2, 11, 1000, kmax // 2 + 1, kmax):  # the page's negatives are the library's, to the last bit
            shown = page.locator(EXPLORER).first.evaluate(
                "(h, [source, k]) => { const x = h.ctlExplorable, st = x.state, saved = [st.source, st.k];"
                " st.source = source; st.k = k; const neg = x.negatives(); [st.source, st.k] = saved; return neg; }", [source, k])
            want = similarity_set(source, k, seed)[1]  # the digits' products may round in their last bit with the threads
            assert (torch.equal if source == "spread" else lambda a, b: torch.allclose(a, b, rtol=0, atol=1e-12))(
                torch.tensor(shown, dtype=torch.float64), want), (source, k)
        wrong = []
        for k in range(2, kmax + 1):
            neg = torch.linspace(-1, 1, k, dtype=torch.float64) if draws is None else draws[:k].sort().values
            want = torch.histc(neg, bins=N_BINS, min=-1, max=1).to(torch.int64).tolist()
            if got[k - 2] != want: wrong.append(k)
        assert not wrong, f"{source}: the page's histogram differs from torch.histc at {len(wrong)} of {kmax - 1} K, e.g. {wrong[:8]}"


def _state(page) -> dict:
    return page.locator(EXPLORER).first.evaluate("h => Object.assign({}, h.ctlState)")


def _wait_update(page, before: int):
    page.wait_for_function(f"() => (document.querySelector(\"{EXPLORER}\").ctlState.updates || 0) > {before}", timeout=60_000)


def test_the_address_sets_what_the_menu_sets(site, browser, explorables_at):
    out, _, _ = site
    page = explorables_at("laptop")
    before = _state(page).get("updates", 0)
    page.locator(f"{EXPLORER} [data-ctl-control=source]").select_option("digits")
    _wait_update(page, before)
    by_menu = _state(page)
    context, linked = _open(browser, out / "explorables.html", "laptop", hash="#explorer?source=digits")
    try:
        by_url = _state(linked)
        for key in ("source", "pos", "k", "tau", "alpha", "lam"):
            assert by_url[key] == pytest.approx(by_menu[key]), f"{key}: {by_url[key]} from the address, {by_menu[key]} from the menu"
        assert linked.locator(f"{EXPLORER} [data-ctl-box=pos]").input_value() == page.locator(f"{EXPLORER} [data-ctl-box=pos]").input_value()
        assert linked.locator(f"{EXPLORER} .ctl-x-refused").count() == 0, "a correct address was refused"
    finally:
        context.close()
    # the preset menu names a preset only while the explorer shows it
    preset = page.locator(f"{EXPLORER} [data-ctl-control=preset]")
    before = _state(page)["updates"]
    preset.select_option(label="Exercise 2: H(r_i) near log K (τ = 10)")
    _wait_update(page, before)
    assert preset.input_value() != ""
    before = _state(page)["updates"]
    box = page.locator(f"{EXPLORER} [data-ctl-box=alpha]")
    box.fill("0.3"); box.press("Enter")
    _wait_update(page, before)
    assert preset.input_value() == "", "the preset menu still names a preset after α moved"
    before = _state(page)["updates"]
    page.locator(f"{EXPLORER} [data-ctl-control=reset]").click()
    _wait_update(page, before)


def test_a_bad_address_value_is_said(site, browser):
    out, _, _ = site
    context, page = _open(browser, out / "explorables.html", "phone", hash="#explorer?tau=abc&k=99999&source=cats&alpha=0.3")
    try:
        state = _state(page)
        assert state["tau"] == 0.2 and state["source"] == "spread" and state["alpha"] == pytest.approx(0.3)  # the good value kept
        note = page.locator(f"{EXPLORER} .ctl-x-refused")
        assert note.count() == 1 and note.is_visible(), "an address with wrong values gave no message"
        text = note.inner_text()
        for said in ("tau", "abc", "k", "99999", "source", "cats"):
            assert said in text, f"the message does not name {said!r}: {text}"
        assert "alpha=" not in text, f"a correct value was refused: {text}"
    finally:
        context.close()


def test_play_keeps_its_designed_pace(site, browser):
    """▶ play from the first frame to the last takes (frames − 1) × frame_ms, with the CPU slowed 4×: not less, and not
    more by over two of its slowest frames' drawing plus 0.3 s (the last frame starts by the time the one before it,
    begun when it was due, ends; then it is drawn). A replay that waited frame_ms after each frame would instead be
    late by the sum of every frame's drawing: a slow machine must drop frames, not stretch the replay."""
    out, _, _ = site
    context, page = _open(browser, out / "explorables.html", "laptop")
    try:
        host = page.locator(REPLAY).first
        frames, frame_ms = host.evaluate("h => [h.ctlExplorable.spec.frame_steps.length, h.ctlExplorable.spec.frame_ms]")
        design = (frames - 1) * frame_ms / 1000
        cdp = context.new_cdp_session(page)
        cdp.send("Emulation.setCPUThrottlingRate", {"rate": 4})
        start = time.monotonic()
        page.locator(f"{REPLAY} [data-ctl-control=play]").click()
        page.wait_for_function(f"() => !document.querySelector(\"{REPLAY}\").ctlState.playing", timeout=60_000, polling=20)
        took = host.evaluate("h => h.ctlState.played_ms") / 1000  # from the click's handler to the last frame drawn
        assert took <= time.monotonic() - start
        cdp.send("Emulation.setCPUThrottlingRate", {"rate": 1})
        state = host.evaluate("h => Object.assign({}, h.ctlState)")
        assert state["frame"] == frames - 1, state
        slowest = state["longest_frame_ms"] / 1000  # how long the slowest frame took to draw, on this machine now
        assert 0.9 * design <= took <= design + 2 * slowest + 0.3, \
            f"play took {took:.2f} s for a {design:.2f}-s design, its slowest frame {slowest:.2f} s (CPU 4× slower)"
    finally:
        context.close()
