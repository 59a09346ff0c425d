"""The site on a phone, a tablet and a projector: headless Chromium at 390 × 844 (touch), 768 × 1024 (touch) and
1920 × 1080, on the pages that ``browser_setup.built_site`` builds once per session.

At every size: no page scrolls sideways, every page says it fits the screen (a viewport tag), the explorer's controls
are at least 44 px tall, its figures take one column on a phone and two where the width allows. On a touch screen a
vertical swipe over a plot scrolls the page (no drag-zoom). The explorer's presets and reset set what they name, its
state goes into the page's address and comes back from it, a λ change redraws one figure, and a redraw under 4× CPU
throttling (Chrome DevTools' ``Emulation.setCPUThrottlingRate``) stays under a generous bound. The figure page fills
a 1920 × 1080 screen's height with each figure. Timing numbers are recorded by ``benchmarks/bench_explorer_browser.py``,
not here.
"""
from __future__ import annotations

import statistics

import pytest

from browser_setup import built_site, launch_browser, needs_browser, open_page

pytestmark = needs_browser("the site's screen-size tests") + [pytest.mark.slow]

SIZES = {"phone": (390, 844), "tablet": (768, 1024), "projector": (1920, 1080)}
TOUCH = {"phone", "tablet"}
PAGES = ["explorables.html", "02_explorer.html", "index.html", "instructors.html", "figures.html"]
WIDE_PAGES = PAGES[:2]  # on the wider screens, the two pages with controls (every page is checked on the phone)
EXPLORER = ".ctl-explorable[data-ctl-explorable='temperature-explorer']"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return built_site(tmp_path_factory)


@pytest.fixture(scope="module")
def browser():
    yield from launch_browser()


def _open(browser, path, size: str, hash: str = ""):
    w, h = SIZES[size]
    touch = size in TOUCH
    context = browser.new_context(viewport={"width": w, "height": h}, has_touch=touch, is_mobile=touch,
                                  device_scale_factor=1)
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file://") else r.abort())
    page.goto(path.as_uri() + hash)
    page.wait_for_function("window.ctlSite && (window.ctlSite.done || window.ctlSite.errors.length > 0)", timeout=180_000)
    page.errors = errors
    return context, page


@pytest.fixture(scope="module")
def explorables_at(site, browser):
    """explorables.html opened once per screen size for the tests that only read it or scroll it (each load is seconds
    of plotly and MathJax): `explorables_at(size)` -> page. The tests that change the explorer's state open their own."""
    out, _, _ = site
    opened = {}

    def page_at(size: str):
        if size not in opened: opened[size] = _open(browser, out / "explorables.html", size)
        return opened[size][1]
    yield page_at
    for context, _ in opened.values():
        context.close()


def _wait_update(page, before: int):
    page.wait_for_function(f"() => (document.querySelector(\"{EXPLORER}\").ctlState.updates || 0) > {before}", timeout=60_000)


def _updates(page) -> int:
    return page.locator(EXPLORER).first.evaluate("h => h.ctlState.updates || 0")


@pytest.mark.parametrize("size", list(SIZES))
def test_pages_fit_the_screen(site, browser, explorables_at, size):
    out, _, _ = site
    for name in PAGES if size == "phone" else WIDE_PAGES:
        if not (out / name).exists(): continue
        shared = name == "explorables.html"
        context, page = (None, explorables_at(size)) if shared else _open(browser, out / name, size)
        try:
            assert page.locator("meta[name=viewport]").count() >= 1, f"{name} has no viewport tag"
            widths = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
            assert widths[0] <= widths[1] + 1, f"{name} at {size}: {widths[0]} px wide in a {widths[1]} px screen"
            assert not page.errors, page.errors
        finally:
            if context is not None: context.close()


@pytest.mark.parametrize("size", list(SIZES))
def test_explorer_controls_and_columns(explorables_at, size):
    page = explorables_at(size)
    host = page.locator(EXPLORER).first
    small = host.evaluate("""h => [...h.querySelectorAll('.ctl-x-control input[type=range], .ctl-x-control input[type=number],'
                               + ' .ctl-x-control select, .ctl-x-control button, .ctl-x-control')]
        .map(e => [e.tagName + (e.type ? ':' + e.type : '') + (e.dataset.ctlControl || e.dataset.ctlBox || ''),
                   e.getBoundingClientRect().height]).filter(r => r[1] < 44)""")
    assert not small, f"controls under 44 px tall at {size}: {small}"
    lefts = host.evaluate("h => [...h.querySelectorAll('[data-ctl-plot]')].map(d => Math.round(d.getBoundingClientRect().left))")
    columns = len(set(lefts))
    assert columns == (1 if size == "phone" else 2), f"{columns} columns of figures at {size}"
    labels = host.evaluate("h => [...h.querySelectorAll('input, select')].filter(e => !e.getAttribute('aria-label')).length")
    assert labels == 0, "a control without an accessible name"
    valuetext = host.locator("[data-ctl-control=tau]").get_attribute("aria-valuetext")
    assert valuetext and valuetext.startswith("τ = 0.2")


@pytest.mark.parametrize("size", sorted(TOUCH))
def test_a_swipe_over_a_plot_scrolls_the_page(explorables_at, size):
    page = explorables_at(size)
    context = page.context
    plot = page.locator(f"{EXPLORER} [data-ctl-plot=loss]")
    plot.scroll_into_view_if_needed()
    box = plot.bounding_box()
    x, y0 = box["x"] + box["width"] / 2, min(box["y"] + box["height"] * 0.7, SIZES[size][1] - 20)
    before = page.evaluate("() => window.scrollY")
    ranges = plot.evaluate("d => JSON.stringify([d._fullLayout.xaxis.range, d._fullLayout.yaxis.range])")
    cdp = context.new_cdp_session(page)
    points = lambda y: [{"x": x, "y": y, "id": 1}]
    cdp.send("Input.dispatchTouchEvent", {"type": "touchStart", "touchPoints": points(y0)})
    for i in range(1, 11):
        cdp.send("Input.dispatchTouchEvent", {"type": "touchMove", "touchPoints": points(y0 - 20 * i)})
    cdp.send("Input.dispatchTouchEvent", {"type": "touchEnd", "touchPoints": []})
    page.wait_for_timeout(400)
    after = page.evaluate("() => window.scrollY")
    assert after > before + 50, f"a 200 px swipe over the plot scrolled the page by {after - before} px at {size}"
    assert plot.evaluate("d => JSON.stringify([d._fullLayout.xaxis.range, d._fullLayout.yaxis.range])") == ranges, \
        "the swipe zoomed the plot"


def test_a_change_redraws_only_what_it_moves_and_fast_enough_throttled(explorables_at):
    page = explorables_at("tablet")  # as loaded (the tests before it only read it and scroll it)
    context = page.context
    host = page.locator(EXPLORER).first
    for name, value, redrawn in (("lam", 0.01, ["penalty"]), ("alpha", 0.3, ["penalty", "entropy"]),
                                 ("pos", 0.5, ["loss", "gradient"]), ("tau", 0.5, ["penalty", "entropy", "loss", "gradient"])):
        before = _updates(page)
        box = page.locator(f"{EXPLORER} [data-ctl-box={name}]")
        box.fill(str(value)); box.press("Enter")
        _wait_update(page, before)
        assert host.evaluate("h => h.ctlState.redrawn") == redrawn, name
    cdp = context.new_cdp_session(page)
    cdp.send("Emulation.setCPUThrottlingRate", {"rate": 4})
    start = len(host.evaluate("h => h.ctlTimings"))
    slider = page.locator(f"{EXPLORER} [data-ctl-control=tau]")
    for _ in range(8):
        before = _updates(page)
        slider.focus(); page.keyboard.press("ArrowLeft")
        _wait_update(page, before)
    timings = host.evaluate("h => h.ctlTimings")[start:]
    cdp.send("Emulation.setCPUThrottlingRate", {"rate": 1})
    assert len(timings) >= 8
    assert statistics.median(timings) < 3000, f"a τ redraw took {statistics.median(timings):.0f} ms (median) at 4× throttling"


def test_presets_reset_and_the_address_round_trip(site, browser, explorables_at):
    """On the tablet's explorables page that the test above left moved (a preset and the reset start from the page's
    defaults, not from the state they find: one load fewer), then on a projector's page opened at the address it wrote."""
    from test_explorables import _check_explorer, _read
    out, _, _ = site
    page = explorables_at("tablet")
    before = _updates(page)
    page.locator(f"{EXPLORER} [data-ctl-control=preset]").select_option(label="Exercise 2: H(r_i) near log K (τ = 10)")
    _wait_update(page, before)
    shown = _read(page)
    assert shown["state"]["tau"] == 10 and shown["state"]["k"] == 256
    _check_explorer(shown)
    before = _updates(page)
    box = page.locator(f"{EXPLORER} [data-ctl-box=alpha]")
    box.fill("0.37"); box.press("Enter")
    _wait_update(page, before)
    url = page.url
    assert "#explorer?" in url and "tau=10" in url and "alpha=0.37" in url
    state = _read(page)["state"]
    other, page2 = _open(browser, out / "explorables.html", "projector", hash=url[url.index("#"):])
    try:
        again = _read(page2)
        for key in ("tau", "alpha", "lam", "k", "pos"):
            assert again["state"][key] == pytest.approx(state[key], rel=1e-5), key
        assert (again["state"]["source"], again["state"]["log_r"]) == (state["source"], state["log_r"])
        _check_explorer(again)
        assert page2.locator(f"{EXPLORER} [data-ctl-box=alpha]").input_value() == "0.37"
    finally:
        other.close()
    before = _updates(page)
    page.locator(f"{EXPLORER} [data-ctl-control=reset]").click()
    _wait_update(page, before)
    shown = _read(page)
    assert shown["state"]["tau"] == 0.2 and shown["state"]["alpha"] == 0.1
    _check_explorer(shown)


def test_the_figure_page_fills_a_projector(site, browser, tmp_path):
    "The figure page, made from the pages this build has (appendix 92's figures stand in for a core lesson's)."
    from ctl_explore.course import KEY_FIGURE_LESSONS, figures_page
    out, _, _ = site
    donor = (out / "92_static_explorables.html").read_text(encoding="utf-8")
    (tmp_path / "assets").symlink_to(out / "assets", target_is_directory=True)
    (tmp_path / "figures.html").write_text(figures_page({KEY_FIGURE_LESSONS[0]: donor}, {}), encoding="utf-8")
    context, page = _open(browser, tmp_path / "figures.html", "projector")
    try:
        heights = page.evaluate("() => [...document.querySelectorAll('section.ctl-slide .ctl-plotly')]"
                                ".map(d => d.querySelector('.main-svg').getBoundingClientRect().height)")
        assert len(heights) == 1
        assert min(heights) >= 0.8 * 1080, f"figure heights {heights} on a 1080 px screen"
        widths = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
        assert widths[0] <= widths[1] + 1
        titles = page.evaluate("() => [...document.querySelectorAll('section.ctl-slide')].map(s => s.querySelectorAll('h2').length)")
        assert set(titles) == {1}
    finally:
        context.close()
