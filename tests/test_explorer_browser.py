"""The temperature explorer in a real browser: JupyterLab on loopback, driven by headless Chromium through Playwright.

The test opens ``nbs/02_explorer.ipynb``, runs all its cells with every anywidget model made to miss anywidget's
2-second window to load (the worst case a busy machine can bring; the widgets must work all the same), checks that no cell shows an error, moves the τ slider
with the keyboard and checks that the ``r_i`` curve plotted in the page is ``relative_penalty`` at the new τ. It saves
screenshots of the explorer and the playground when ``CTL_ARTIFACTS`` names a folder (and one of the page, in a
temporary folder, when it fails), and measures the key-press-to-redrawn-curve latency; it writes it only when
``benchmarks/bench_explorer_browser.py`` asks (``CTL_BENCH_OUT``), never into the checkout by itself.

Needs the ``playwright`` Python package and a system Chromium (Debian: ``apt-get install chromium``); it never
downloads a browser. Set ``CTL_CHROMIUM`` to use a Chromium binary elsewhere. Without them, the test is skipped.
"""
from __future__ import annotations

import json
import os
import platform
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch

from browser_setup import ARTIFACTS, SCREENSHOTS, launch_browser, needs_browser
from ctl_explore.explorer import similarity_set, temperature_explorer
from ctl_explore.gradients import relative_penalty
from test_explorables import READ_EXPLORER, _check_explorer

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = "nbs/02_explorer.ipynb"
# The latency is written only when a benchmark asks for it (benchmarks/bench_explorer_browser.py sets CTL_BENCH_OUT)
BENCH_OUT = os.environ.get("CTL_BENCH_OUT")
# Presses timed, on τ's slider and then α's: 20 and 10 for the benchmark; 6 and 4 in the test, whose checks (one redraw
# per press, of the figures it moves; a loose ceiling on the median) hold the same on fewer presses, each of which costs
# a redraw and a 150 ms watch for a second one
LATENCY_PRESSES = {"tau": 20, "alpha": 10} if BENCH_OUT else {"tau": 6, "alpha": 4}
# A loose ceiling on the median key-press-to-redraw time, to catch a redraw path gone badly wrong on a busy machine;
# the 60-frames-a-second goal (median 16 ms, 90th percentile 50 ms) is the benchmark's
# (benchmarks/bench_explorer_browser.py --lab), measured with the load it ran under.
SANITY_CEILING_MS = 1500
GOAL_MS = {"median": 16, "p90": 50}
RUN_ALL_TIMEOUT_S = 240


pytestmark = needs_browser("the explorer's browser tests") + [pytest.mark.slow]  # JupyterLab and a browser

# JupyterLab user settings for the throw-away settings directory: render every cell (no virtual windowing), record
# cells' timing, never write to the notebook (no autosave), and make no network requests of its own.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none", "recordTiming": True},
    "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
    "@jupyterlab/apputils-extension/notification": {"checkForUpdates": False, "fetchNews": "false"},
    "@jupyterlab/extensionmanager-extension/plugin": {"enabled": False},
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop_server(proc: subprocess.Popen, url: str, token: str) -> None:
    "Ask the server to shut down (it stops its kernels), then terminate and kill its process group if it lingers."
    try:
        urllib.request.urlopen(urllib.request.Request(f"{url}/api/shutdown", method="POST",
                                                      headers={"Authorization": f"token {token}"}), timeout=5)
    except Exception:
        pass
    for sig, wait_s in ((None, 10), (signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        if sig is not None:
            try: os.killpg(proc.pid, sig)  # the group this test started, with the server and its kernel
            except ProcessLookupError: break
        try:
            proc.wait(timeout=wait_s)
            break
        except subprocess.TimeoutExpired:
            continue


_NO_IRI_GRAMMAR = "import sys; sys.modules.setdefault('rfc3987_syntax', None)"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    "A JupyterLab server on 127.0.0.1 with its own token and throw-away config, data, runtime and settings dirs."
    tmp = tmp_path_factory.mktemp("jupyterlab")
    for name, values in LAB_SETTINGS.items():
        path = tmp / "settings" / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(tmp / "config"), JUPYTER_DATA_DIR=str(tmp / "data"),
               JUPYTER_RUNTIME_DIR=str(tmp / "runtime"), JUPYTERLAB_SETTINGS_DIR=str(tmp / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"), IPYTHONDIR=str(tmp / "ipython"),
               JUPYTER_PLATFORM_DIRS="0")
    # The server (through jupyter_events) and the lesson's kernel (through plotly.io and nbformat) import jsonschema, which
    # imports rfc3987-syntax for its optional `iri` format check: three Earley parsers built on import, about 3 CPU-s in
    # each process. Nothing here validates that format, so in both its import fails and jsonschema goes on without it:
    # the server is `python -m jupyterlab` run after that line, the kernel reads it from this IPython dir's startup file.
    startup = tmp / "ipython" / "profile_default" / "startup" / "00-no-iri-grammar.py"
    startup.parent.mkdir(parents=True)
    startup.write_text(_NO_IRI_GRAMMAR + "\n")
    port, token = _free_port(), secrets.token_hex(16)
    url = f"http://127.0.0.1:{port}"
    log = open(tmp / "server.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-c", f"{_NO_IRI_GRAMMAR}; import runpy; runpy.run_module('jupyterlab', run_name='__main__', alter_sys=True)",
         "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
         "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={REPO}",
         "--LabApp.expose_app_in_browser=True", "--LabApp.extension_manager=readonly", "--ServerApp.terminals_enabled=False",
         *(["--ServerApp.allow_root=True"] if os.geteuid() == 0 else [])],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"JupyterLab exited with code {proc.returncode}:\n{(tmp / 'server.log').read_text()[-3000:]}")
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
                break
            except Exception:
                if time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not answer within 60 s:\n{(tmp / 'server.log').read_text()[-3000:]}")
                time.sleep(0.3)
        yield url, token
    finally:
        _stop_server(proc, url, token)
        log.close()


@pytest.fixture(scope="module")
def browser():
    yield from launch_browser()


# --- JavaScript run in the page --------------------------------------------------------------------------------

NOTEBOOK_READY = """async () => {
  const panel = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  if (!panel || !panel.sessionContext) return false;
  await panel.context.ready;
  await panel.sessionContext.ready;
  return !!(panel.sessionContext.session && panel.sessionContext.session.kernel);
}"""

RUN_ALL = "() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }"

# The worst case for the lesson's widgets, made on purpose: anywidget gives each widget model 2 s (an
# AbortSignal.timeout(2000)) to import its front end, and drops every message the kernel sends to a model that missed
# it; on a busy machine a model misses it now and then (appendix 17). Here every model misses it: the window is made
# 0 ms, and the page counts the windows it shrank. The lesson's widgets must work all the same, since what the kernel
# sends them after they open goes through their relays (bare ipywidgets models), never in the anywidgets' messages.
# The page also lists the scripts it imports from blobs (anywidget's front ends, and plotly.js by the package's loader):
# their sizes, and how long each took from its blob's making to its release once it ran.
NO_ANYWIDGET_WINDOW = """() => {
  const timeout = AbortSignal.timeout.bind(AbortSignal);
  window.ctlWindowsShrunk = 0;
  AbortSignal.timeout = (ms) => { if (ms !== 2000) return timeout(ms); window.ctlWindowsShrunk += 1; return timeout(0); };
  const create = URL.createObjectURL.bind(URL), revoke = URL.revokeObjectURL.bind(URL), made = new Map();
  window.ctlImports = [];
  URL.createObjectURL = (blob) => {
    const url = create(blob);
    if (blob && blob.type === "text/javascript") made.set(url, [performance.now(), blob.size]);
    return url;
  };
  URL.revokeObjectURL = (url) => {
    const m = made.get(url);
    if (m) { window.ctlImports.push({bytes: m[1], ms: Math.round(performance.now() - m[0])}); made.delete(url); }
    return revoke(url);
  };
}"""

# Progress of "run all": how many code cells ran, which outputs are errors, and whether the kernel is idle.
RUN_STATE = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const cells = panel.content.widgets.filter(c => c.model.type === 'code');
  const errors = [];
  cells.forEach((c, i) => {
    for (const out of c.model.outputs.toJSON())
      if (out.output_type === 'error') errors.push(`code cell ${i}: ${out.ename}: ${out.evalue}`);
  });
  const widgetErrors = [...document.querySelectorAll('.jp-OutputArea-output')]
    .map(e => e.innerText).filter(t => t.includes('Error displaying widget') || t.includes('Failed to load model'));
  return {ran: cells.filter(c => c.model.executionCount !== null).length, total: cells.length,
          busy: cells.some(c => c.promptNode && c.promptNode.textContent.includes('*')),
          status: panel.sessionContext.session.kernel.status, errors: errors.concat(widgetErrors)};
}"""

# The r_i trace of the explorer's first figure, as the page holds it, and its path in the SVG.
CURVE = """(explorer) => {
  const gd = explorer.querySelector('.js-plotly-plot');
  if (!gd || !gd.data || !gd.data[0] || !gd.data[0].y || !gd.data[0].meta) return null;  // not drawn yet
  const path = gd.querySelector('.scatterlayer .trace path.js-line');
  return {tau: gd.data[0].meta.tau, x: Array.from(gd.data[0].x), y: Array.from(gd.data[0].y),
          d: path ? path.getAttribute('d') : null};
}"""

TRACE_NAMES = "(explorer) => [...explorer.querySelectorAll('.js-plotly-plot')].map(gd => gd.data.map(t => t.name ?? null))"

# The three slowest code cells of the run (JupyterLab records each cell's timing with "recordTiming").
SLOWEST_CELLS = """() => window.jupyterapp.shell.currentWidget.content.widgets.filter(c => c.model.type === 'code')
  .map((c, i) => { const e = c.model.getMetadata('execution') || {};
                   return [i, (Date.parse(e['shell.execute_reply']) - Date.parse(e['iopub.execute_input'])) / 1000]; })
  .filter(r => r[1] >= 0).sort((a, b) => b[1] - a[1]).slice(0, 3)"""

# Arm a watcher that resolves with the time from the next keydown to the frame that shows the explorer redrawn.
# End to end: from the key press (the event's own time stamp) to the next frame after the redraw that the press caused
# has drawn every figure it moves and the readout (the explorer's update resolves once each figure is drawn; the
# readout is written in the same update): checked at each frame's start (requestAnimationFrame, which runs before that
# frame is painted), and timed just after that frame (a task queued from its requestAnimationFrame runs after the
# paint): the time a reader waits to see the whole explorer at the new τ or α.
ARM_LATENCY = """([explorer, key]) => {
  const h = explorer.querySelector('.ctl-live-figures'), n = h.ctlState.updates || 0, v0 = h.ctlState[key];
  window.__ctlLatency = new Promise((resolve) => {
    document.addEventListener('keydown', (e) => {
      const t0 = e.timeStamp;
      const frame = () => {
        if ((h.ctlState.updates || 0) > n && !h.ctlExplorable.busy)
          setTimeout(() => resolve({ms: performance.now() - t0, value: h.ctlState[key], before: v0,
                                    readout: h.querySelector('.ctl-x-readout').innerText}));
        else requestAnimationFrame(frame);
      };
      requestAnimationFrame(frame);
    }, {capture: true, once: true});
  });
}"""


# The playground's uniformity-tolerance plot as drawn: points per curve, the first values, the axes' ranges.
HISTORY = """(playground) => {
  const gds = playground.querySelectorAll('.js-plotly-plot'), gd = gds[gds.length - 1];
  if (!gd || !gd._fullLayout || !gd._fullData || gd._fullData.length < 2) return null;
  const L = gd._fullLayout, d = gd._fullData;  // the arrays decoded (the data came as plotly's typed arrays)
  return {points: d.slice(0, 2).map(t => t.x.length), u0: d[0].y[0], t0: d[1].y[0],
          x: L.xaxis.range, y: L.yaxis.range, y2: L.yaxis2.range};
}"""

# The kernel's numbers for the τ shown have come and agree with the page's readout.
CONFIRMED = "(e) => { const h = e.querySelector('.ctl-live-figures'); return h.dataset.ctlConfirmed === 'yes' && +h.dataset.ctlConfirmedTau === h.ctlState.tau; }"
# What the page holds when the kernel's confirmation does not come: said in the failure, so that a rare miss can be told
# apart (a draw that never ended, numbers for another τ, a kernel still busy).
CONFIRM_STATE = """(e) => { const h = e.querySelector('.ctl-live-figures'), x = h.ctlExplorable, s = h.ctlState;
  const k = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
  return {confirmed: h.dataset.ctlConfirmed || null, confirmed_tau: h.dataset.ctlConfirmedTau || null, tau: s.tau,
          busy: !!x.busy, pending: x.pending || null, sync_waiting: !!x.syncTimer, updates: s.updates || 0,
          note: x.checkNote ? x.checkNote.textContent : null, kernel_status: k ? k.status : null}; }"""

# How many redraws the explorer's figures made so far, which figures the last one moved, and how each was drawn: by
# writing the SVG attributes the change moves ("direct") or by one plotly redraw ("plotly").
DRAWS = """(explorer) => { const h = explorer.querySelector('.ctl-live-figures');
  return {updates: h.ctlState.updates || 0, redrawn: h.ctlState.redrawn, by: h.ctlState.drawnBy, fast: !!h.ctlState.fast}; }"""

# A burst of τ, α and λ changes drawn as the sliders draw them (the explorer's state set, then its request), each
# awaited; then, before the explorer's own catch-up redraw comes (it waits for the controls to rest), the SVG of every
# figure drawn directly is read, plotly redraws those figures from the same state (the catch-up, run now), and the
# SVG is read again. Returns the largest difference between the two readings of any number in the SVG attributes a
# direct draw writes (paths' `d`, markers' and labels' transforms), how many figures were drawn directly, and, after
# the catch-up, the largest difference between plotly's own data (what hover reads: its full data and calculated
# points) and the explorer's values.
DIRECT_VS_PLOTLY = """async (explorer) => {
  const h = explorer.querySelector('.ctl-live-figures'), x = h.ctlExplorable, s = x.state;
  const idle = () => new Promise((res) => { const w = () => (x.busy || x.pending) ? setTimeout(w, 2) : res(); w(); });
  const read = () => Object.fromEntries(Object.entries(x.divs).map(([name, div]) => [name,
    [...div.querySelectorAll('g.trace path.js-line, g.trace path.point, g.trace g.point path, .shapelayer path, ' +
                             '.annotation-text-g, .annotation .cursor-pointer')].map((e) => e.getAttribute('d') || e.getAttribute('transform'))]));
  const NUM = /-?\\d+(\\.\\d+)?(e-?\\d+)?/g;
  const start = {tau: s.tau, alpha: s.alpha, lam: s.lam}, changes = [['tau', 0.3], ['alpha', 0.15], ['tau', 0.25],
    ['alpha', 0.2], ['lam', 0.01], ['tau', 0.18], ['tau', 0.17], ['alpha', 0.17]];
  let direct = 0, out = {worst: 0, where: null};
  for (const [key, value] of changes) {
    await idle(); clearTimeout(x.syncTimer); x.syncTimer = null;
    s[key] = value; x.request(key); await idle();
    const mine = read(), stale = Object.keys(x.stale).filter((n) => x.stale[n]);
    direct += stale.length;
    clearTimeout(x.syncTimer); x.syncTimer = null;
    for (;;) { await idle(); if (!(await x.sync()) && !Object.values(x.stale).some(Boolean)) break; }
    await idle();
    const theirs = read();
    for (const name of stale) {
      if (mine[name].length !== theirs[name].length) return {error: `${name}: ${mine[name].length} SVG elements drawn, plotly draws ${theirs[name].length}`};
      mine[name].forEach((a, i) => {
        const b = theirs[name][i], na = a.match(NUM) || [], nb = b.match(NUM) || [];
        if (a.replace(NUM, '#') !== b.replace(NUM, '#')) { out = {worst: Infinity, where: [key, name, a.slice(0, 80), b.slice(0, 80)]}; return; }
        na.forEach((v, j) => { const d = Math.abs(+v - +nb[j]); if (d > out.worst) out = {worst: d, where: [key, name, i, v, nb[j]]}; });
      });
    }
  }
  // plotly's own data, after the catch-up: its full data and calculated points hold the values drawn
  let model = 0;
  for (const [name, div] of Object.entries(x.divs)) div.data.forEach((t, i) => {
    const full = div._fullData[i], cd = div.calcdata[i];
    (t.y || []).forEach((v, j) => {
      model = Math.max(model, Math.abs(full.y[j] - v));
      if (full.type === 'scatter') model = Math.max(model, Math.abs(cd[j].y - v));
    });
    if (full.type === 'bar') model = Math.max(model, Math.abs(cd[0].s - t.y[0]));
  });
  Object.assign(s, start); x.request('tau'); x.request('alpha'); x.request('lam'); await idle();  // back to the sliders' values
  return Object.assign(out, {direct, model, synced: s.synced || 0});
}"""


# The floor under the explorer (benchmark only): the same key presses timed with the explorer drawing nothing. "slider"
# keeps the ipywidgets sliders and their link (each press still moves the slider, its own readout and the kernel's copy;
# the explorer's update only counts); "native" is a bare <input type=range> put in the explorer's place with nothing on
# its input but the count: what one moved control costs in this page before anything is drawn. "native_drawn" puts two
# such inputs (τ's, one step 0.01 decades, and α's, one step 0.01) in the place of the sliders and lets the explorer
# draw each step as it does now: what the explorer would reach with controls of its own. Undone by FLOOR_OFF.
FLOOR_ON = """([explorer, how]) => {
  const h = explorer.querySelector('.ctl-live-figures'), x = h.ctlExplorable;
  const probe = (name, onInput) => {  // a bare range input at the explorer's top, no notebook shortcut on its keys
    const r = document.createElement('input');
    Object.assign(r, {type: 'range', min: 0, max: 1000, value: 0, className: 'ctl-floor-probe ctl-floor-probe-' + name});
    r.setAttribute('aria-label', name + ' probe');
    r.addEventListener('keydown', (e) => e.stopPropagation());  // as the widgets' controls do
    r.addEventListener('input', () => onInput(+r.value));
    h.prepend(r);
  };
  x.__floor = {update: x.update, confirm: x.confirm, tau: x.state.tau, alpha: x.state.alpha};
  x.confirm = function () { return null; };
  if (how === 'native_drawn') {
    const t0 = x.state.tau, a0 = x.state.alpha;
    probe('tau', (v) => { x.state.tau = t0 * Math.pow(10, 0.01 * v); x.request('tau'); });
    probe('alpha', (v) => { x.state.alpha = a0 + 0.01 * v; x.request('alpha'); });
    return;
  }
  x.update = function () { this.state.updates = (this.state.updates || 0) + 1; return Promise.resolve(); };
  if (how === 'native') probe('count', (v) => { x.state.updates = (x.state.updates || 0) + 1; x.state.probe = v; });
}"""
FLOOR_OFF = """(explorer) => {
  const h = explorer.querySelector('.ctl-live-figures'), x = h.ctlExplorable;
  x.update = x.__floor.update; x.confirm = x.__floor.confirm; x.state.tau = x.__floor.tau; x.state.alpha = x.__floor.alpha;
  delete x.__floor;
  h.querySelectorAll('.ctl-floor-probe').forEach((e) => e.remove());
  x.request('tau'); x.request('alpha');  // drawn again at the sliders' values; the kernel then confirms them
}"""


def _wait_for(page, script, arg=None, timeout_s=30.0, what="condition"):
    deadline = time.monotonic() + timeout_s
    while True:
        value = page.evaluate(script, arg) if arg is not None else page.evaluate(script)
        if value: return value
        if time.monotonic() > deadline: raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.2)


def _expected_curve(x: list[float], tau: float) -> list[float]:
    return relative_penalty(torch.tensor([x], dtype=torch.float64), tau)[0].tolist()


def _machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else platform.processor()
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__}


def _confirmed(page, explorer, what: str) -> None:
    "Wait (60 s at most) for the kernel's numbers for the τ shown to come and agree with the page's readout."
    try:
        page.wait_for_function(CONFIRMED, arg=explorer.element_handle(), timeout=60_000)
    except Exception as e:
        if "Timeout" not in type(e).__name__: raise
        raise AssertionError(f"the kernel's confirmation {what} did not come within 60 s; the page holds "
                             f"{page.evaluate(CONFIRM_STATE, explorer.element_handle())}") from None


def _floor(page, explorer) -> dict[str, list[float]]:
    """The same presses as the benchmark's (τ's slider, then α's), timed the same way with the explorer drawing nothing
    ("slider"), on a bare range input with nothing on its input ("native"), and on two such inputs that the explorer
    draws from ("native_drawn"); the explorer drawn again at the sliders' values after."""
    out = {}
    for how in ("slider", "native", "native_drawn"):
        page.evaluate(FLOOR_ON, [explorer.element_handle(), how])
        ms = []
        try:
            for key, presses in LATENCY_PRESSES.items():
                for _ in range(presses):
                    page.evaluate(ARM_LATENCY, [explorer.element_handle(), "probe" if how == "native" else key])
                    target = explorer.locator({"slider": f".ctl-{key}-slider .noUi-handle", "native": ".ctl-floor-probe-count",
                                               "native_drawn": f".ctl-floor-probe-{key}"}[how]).first
                    target.focus()
                    page.keyboard.press("ArrowRight")
                    done = page.evaluate("() => Promise.race([window.__ctlLatency, new Promise(r => setTimeout(() => r(null), 10000))])")
                    assert done is not None and done["value"] != done["before"], f"{how}: a key press moved nothing"
                    ms.append(round(done["ms"], 2))
                    page.wait_for_timeout(150)
        finally:
            page.evaluate(FLOOR_OFF, explorer.element_handle())
        out[how] = ms
    _confirmed(page, explorer, "after the floor's presses")  # drawn again, and the kernel agrees
    return out


def test_explorer_in_browser(lab, browser):
    url, token = lab
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport={"width": 1400, "height": 1700})
    page = context.new_page()
    console_errors, started, passed = [], time.monotonic(), False
    def phase(name): print(f"\n[{time.monotonic() - started:6.1f} s] {name}", end="")
    page.on("console", lambda msg: console_errors.append(msg.text) if msg.type == "error" else None)
    try:
        page.goto(f"{url}/lab/tree/{NOTEBOOK}?token={token}&reset", wait_until="domcontentloaded", timeout=60_000)
        _wait_for(page, NOTEBOOK_READY, timeout_s=90, what="the notebook and its kernel")
        phase("notebook open, kernel ready; running all cells")
        page.evaluate(NO_ANYWIDGET_WINDOW)
        page.evaluate(RUN_ALL)

        # --- every cell runs, none shows an error ---
        deadline, state = time.monotonic() + RUN_ALL_TIMEOUT_S, None
        while time.monotonic() < deadline:
            state = page.evaluate(RUN_STATE)
            if state["errors"] or (state["ran"] == state["total"] and not state["busy"] and state["status"] == "idle"): break
            time.sleep(0.2)
        assert state is not None and not state["errors"], f"cells show errors: {state['errors']}"
        assert state["ran"] == state["total"], f"only {state['ran']} of {state['total']} code cells ran within {RUN_ALL_TIMEOUT_S} s"

        slowest = ", ".join(f"cell {i}: {t:.1f} s" for i, t in page.evaluate(SLOWEST_CELLS))
        # the explorer's figures and the playground's two: each model's window was shrunk to nothing (below, they work)
        shrunk = page.evaluate("() => window.ctlWindowsShrunk")
        assert shrunk >= 3, f"anywidget set {shrunk} windows of 2 s for its models: it no longer times them so, and this test no longer makes every model miss its window"
        phase(f"all {state['total']} code cells ran without errors (slowest: {slowest})")
        # --- the displayed explorer: its r_i curve is relative_penalty at its τ ---
        explorer = page.locator(".ctl-temperature-explorer").first
        explorer.scroll_into_view_if_needed()
        before = _wait_for(page, CURVE, explorer.element_handle(), timeout_s=90, what="the explorer's r_i curve")
        # the notebook displays temperature_explorer() with its defaults (τ = 0.2, which the log slider in the page
        # snaps to its grid of 0.01 decades), and no later cell touches it
        assert abs(torch.log10(torch.tensor(before["tau"] / 0.2)).item()) <= 0.005
        assert before["x"] == pytest.approx(similarity_set("spread", 256)[1].tolist(), abs=1e-12)
        assert before["y"] == pytest.approx(_expected_curve(before["x"], before["tau"]), rel=1e-9, abs=1e-15)
        reference = temperature_explorer()
        expected_names = [[t.name for t in fig.data] for fig in
                          (reference.fig_penalty, reference.fig_entropy, reference.fig_loss, reference.fig_grad)]
        page_names = page.evaluate(TRACE_NAMES, explorer.element_handle())
        assert page_names == expected_names, "the figures in the page lost or changed trace properties"

        # --- move τ with the keyboard: one step right on the log slider ---
        handle = explorer.locator(".ctl-tau-slider .noUi-handle").first
        handle.focus()
        page.keyboard.press("ArrowRight")
        after = _wait_for(page, f"(e) => {{ const c = ({CURVE})(e); return c && c.tau !== {before['tau']!r} ? c : null; }}",
                          explorer.element_handle(), timeout_s=15, what="the r_i curve to change after the key press")
        assert after["tau"] > before["tau"]
        assert 0.004 < torch.log10(torch.tensor(after["tau"] / before["tau"])).item() < 0.016  # one step of 0.01 decades
        assert after["y"] == pytest.approx(_expected_curve(after["x"], after["tau"]), rel=1e-9, abs=1e-15)
        assert after["y"] != pytest.approx(before["y"], rel=1e-6)
        assert after["d"] != before["d"], "the SVG path of the r_i curve was not redrawn"
        # the readout is drawn in the page with the figures; the kernel's numbers for the same τ then confirm it
        readout = explorer.locator(".ctl-live-figures .ctl-x-readout").first.inner_text()
        assert f"τ = {after['tau']:.3g}" in readout, readout
        _confirmed(page, explorer, "after the first key press")
        assert explorer.locator(".widget-html-content").count() == 0, "a readout from the kernel is still shown"

        # --- latency: key press to the explorer redrawn, over LATENCY_PRESSES presses of τ's and α's sliders; each press
        # is one redraw of the figures it moves (all four for τ, r_i's and H(r_i)'s for α), made in the browser (the
        # figures' widget, linked to the sliders there): each figure drawn once, by writing the SVG attributes the
        # change moves, or by one plotly redraw when an axis range changes ---
        latencies, load, how = {"tau": [], "alpha": []}, [os.getloadavg()[0]], []
        moves = {"tau": ["penalty", "entropy", "loss", "gradient"], "alpha": ["penalty", "entropy"]}
        for key, presses in LATENCY_PRESSES.items():
            slider = explorer.locator(f".ctl-{key}-slider .noUi-handle").first
            for _ in range(presses):
                drawn = page.evaluate(DRAWS, explorer.element_handle())
                page.evaluate(ARM_LATENCY, [explorer.element_handle(), key])
                slider.focus()
                page.keyboard.press("ArrowRight")
                done = page.evaluate("() => window.__ctlLatency")
                shown = f"τ = {done['value']:.3g}" if key == "tau" else f"α = {done['value']:.2f}"
                assert done["value"] > done["before"] and shown in done["readout"], done  # figures and readout moved
                latencies[key].append(done["ms"])
                page.wait_for_timeout(150)  # a second redraw for one press would come within this
                now = page.evaluate(DRAWS, explorer.element_handle())
                assert now["updates"] == drawn["updates"] + 1, f"one key press made {now['updates'] - drawn['updates']} redraws"
                assert now["redrawn"] == moves[key] and sorted(now["by"]) == sorted(moves[key]), now  # each figure drawn once
                how.append(now["fast"])
        load.append(os.getloadavg()[0])
        every = latencies["tau"] + latencies["alpha"]
        # most presses keep the axes' ranges, and are drawn without plotly
        assert sum(how) >= len(how) // 2, f"only {sum(how)} of {len(how)} presses drawn directly"
        final = page.evaluate(CURVE, explorer.element_handle())
        assert final["y"] == pytest.approx(_expected_curve(final["x"], final["tau"]), rel=1e-9, abs=1e-15)
        _check_explorer(explorer.locator(".ctl-live-figures").evaluate(READ_EXPLORER))  # every plotted number, the library's
        assert statistics.median(every) < SANITY_CEILING_MS, f"key press → explorer redrawn: median {statistics.median(every):.0f} ms"
        _confirmed(page, explorer, "after the timed presses")  # the kernel agrees at the last τ too
        # --- what a direct draw writes is what plotly draws, to 0.01 px; after the catch-up, plotly's data (hover) too ---
        same = page.evaluate(DIRECT_VS_PLOTLY, explorer.element_handle())
        assert "error" not in same and same["direct"] >= 8 and same["synced"] >= same["direct"], same
        assert same["worst"] <= 0.01, f"a direct draw differs from plotly's by {same['worst']} px: {same['where']}"
        assert same["model"] == 0, f"plotly's data differs from the explorer's by {same['model']} after the catch-up"
        _confirmed(page, explorer, "after the direct-versus-plotly burst")
        # λ moves r_i's plot alone: one redraw, of that figure
        drawn = page.evaluate(DRAWS, explorer.element_handle())
        explorer.locator(".ctl-lam-slider .noUi-handle").first.focus()
        page.keyboard.press("ArrowRight")
        page.wait_for_function("([e, n]) => e.querySelector('.ctl-live-figures').ctlState.updates > n",
                               arg=[explorer.element_handle(), drawn["updates"]], timeout=15_000)
        page.wait_for_timeout(150)
        now = page.evaluate(DRAWS, explorer.element_handle())
        assert now["updates"] == drawn["updates"] + 1 and now["redrawn"] == ["penalty"], now
        floor = _floor(page, explorer) if BENCH_OUT else {}
        def summary(ms: list[float]) -> dict:
            return {"presses": len(ms), "median_ms": round(statistics.median(ms), 2), "p10_ms": round(float(np.percentile(ms, 10)), 2),
                    "p90_ms": round(float(np.percentile(ms, 90)), 2), "min_ms": round(min(ms), 2), "max_ms": round(max(ms), 2)}
        both = summary(every)
        if BENCH_OUT: Path(BENCH_OUT).write_text(json.dumps({
            "benchmark": "key press on the τ slider (then on α's) → the next frame after every figure it moves and the readout "
                         "are drawn (JupyterLab, headless Chromium; the readout drawn in the page, the kernel only confirming)",
            "goal_ms": GOAL_MS, **both, "goal_met": both["median_ms"] <= GOAL_MS["median"] and both["p90_ms"] <= GOAL_MS["p90"],
            "tau": summary(latencies["tau"]), "alpha": summary(latencies["alpha"]),
            "drawn_without_plotly": f"{sum(how)} of {len(how)} presses", "direct_vs_plotly_px": same["worst"],
            "scripts_imported_from_blobs": page.evaluate("() => window.ctlImports"),  # those run by now
            "floor": {name: summary(ms) for name, ms in floor.items()}, "floor_all_ms": floor,
            "all_ms": {key: [round(t, 2) for t in ms] for key, ms in latencies.items()}, "k": 256, "source": "spread",
            "load_average_1min": load, "chromium": browser.version, "machine": _machine(), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        }, indent=2, ensure_ascii=False) + "\n")
        phase(f"key press → explorer and readout drawn: median {both['median_ms']:.1f} ms, 90th percentile {both['p90_ms']:.1f} ms "
              f"over {len(every)} presses ({sum(how)} without plotly)")
        if SCREENSHOTS:
            page.wait_for_timeout(300)  # let plotly finish its transitions before the picture
            explorer.screenshot(path=str(ARTIFACTS / "explorer.png"))

        # --- the playground: run 50 steps from the browser ---
        playground = page.locator(".ctl-hypersphere-playground").first
        playground.scroll_into_view_if_needed()
        # its starting point is drawn before any step: one point per curve, on axes from step 0 to the N = 50 to come
        try: start = _wait_for(page, HISTORY, playground.element_handle(), timeout_s=90, what="the playground's history plot")
        except AssertionError as e: raise AssertionError(f"{e}; console errors: {console_errors}") from None
        assert start["points"] == [1, 1] and start["x"][0] < 0 < 50 < start["x"][1], start
        assert start["y"][0] < start["u0"] < start["y"][1] and start["y2"][0] < start["t0"] < start["y2"][1], start
        playground.locator("button", has_text="run N steps").click()
        page.wait_for_function("(e) => e.innerText.includes('step 50 ')", arg=playground.element_handle(), timeout=60_000)
        _wait_for(page, f"(e) => {{ const h = ({HISTORY})(e); return h && h.points[0] === 51 ? h : null; }}",
                  playground.element_handle(), timeout_s=90, what="the history plot to show 50 steps")
        page.wait_for_timeout(500)
        if SCREENSHOTS: playground.screenshot(path=str(ARTIFACTS / "playground.png"))
        phase("playground ran 50 steps from its button")
        # every front end is small, and plotly.js ran once for the page (appendix 17); all were drawn by now
        imports = page.evaluate("() => window.ctlImports")
        big = [i for i in imports if i["bytes"] > 200_000]
        assert len(big) == 1 and big[0]["bytes"] > 1e6 and len(imports) >= 4, f"scripts imported from blobs: {imports}"
        small = [i for i in imports if i not in big]
        phase(f"{len(small)} front ends imported (largest {max(i['bytes'] for i in small) / 1e3:.0f} kB, slowest {max(i['ms'] for i in small)} ms), "
              f"plotly.js ({big[0]['bytes'] / 1e6:.1f} MB) run once, in {big[0]['ms']} ms")
        assert not [e for e in console_errors if "widget" in e.lower() or "plotly" in e.lower()], console_errors
        passed = True
    finally:
        if SCREENSHOTS or not passed:  # the page as it was when the test failed
            try: page.screenshot(path=str(ARTIFACTS / "page.png"), full_page=False)
            except Exception: pass
        context.close()
