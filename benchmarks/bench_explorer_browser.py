"""The explorers' redraw times in Chromium, written to benchmarks/results/ when this script is run on purpose (the
tests only assert).

* ``site``: the static site's temperature explorer (``explorables.html``, built here into a temporary folder with
  ``python -m ctl_explore.site --only '^index'``), one τ step with the keyboard → the four figures redrawn, as the
  page's own timer measures it (the port's computation and the drawing: the SVG attributes a τ or λ step moves written
  directly, or one plotly redraw of a figure whose axis range changes), at 390 × 844, 768 × 1024 and
  1920 × 1080, with no CPU throttling and with 4× (``Emulation.setCPUThrottlingRate``); and one λ step (one figure).
* ``--lab``: the JupyterLab explorer end to end, key press → the next frame after every figure the press moves and the
  readout are drawn in the page (20 presses on τ's slider, then 10 on α's: median, 10th and 90th percentiles, range,
  and the 1-minute load average before and after), by running ``tests/test_explorer_browser.py`` with
  ``CTL_BENCH_OUT`` set. Goal (issue 42 item 5, 60 frames a second): median at most 16 ms and 90th percentile at most
  50 ms on 2 cores. The same run times the floor under the explorer, the same presses with the explorer drawing
  nothing (``floor``: ``slider``, the ipywidgets sliders alone; ``native``, a bare ``<input type=range>`` alone;
  ``native_drawn``, two bare range inputs in the sliders' place with the explorer drawing each step as it does now).

Usage: ``python benchmarks/bench_explorer_browser.py [--site DIR] [--lab] [--lab-only] [--busy N] [--label KEY]``. Say
whether the machine was quiet or loaded: the script records the load average before and after. ``--busy N`` runs N
busy loops (one Python process each) beside the measurement and stops them after it: a loaded machine on purpose.
``--lab-only`` skips the static site's part and ``--label`` names the key the JupyterLab numbers are saved under; the
other keys already in ``explorer_browser.json`` are kept, so that a quiet and a loaded run sit side by side.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
RESULTS = REPO / "benchmarks" / "results"
SIZES = {"phone": (390, 844), "tablet": (768, 1024), "projector": (1920, 1080)}
EXPLORER = ".ctl-explorable[data-ctl-explorable='temperature-explorer']"
PRESSES = 15


def _machine() -> dict:
    cpu = next((l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines() if l.startswith("model name")),
               platform.processor()) if Path("/proc/cpuinfo").exists() else platform.processor()
    return {"cpu": cpu, "cores": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()],
            "python": platform.python_version()}


def _presses(page, control: str, key: str, n: int) -> list[float]:
    host = page.locator(EXPLORER).first
    start = len(host.evaluate("h => h.ctlTimings"))
    for _ in range(n):
        before = host.evaluate("h => h.ctlState.updates || 0")
        page.locator(f"{EXPLORER} [data-ctl-control={control}]").focus()
        page.keyboard.press(key)
        page.wait_for_function("([h, n]) => (h.ctlState.updates || 0) > n", arg=[host.element_handle(), before], timeout=60_000)
    return host.evaluate("h => h.ctlTimings")[start:]


def bench_site(site: Path) -> dict:
    from browser_setup import CHROMIUM, CHROMIUM_ARGS
    from playwright.sync_api import sync_playwright
    out = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        for size, (w, h) in SIZES.items():
            touch = size != "projector"
            context = browser.new_context(viewport={"width": w, "height": h}, has_touch=touch, is_mobile=touch)
            page = context.new_page()
            page.goto((site / "explorables.html").as_uri())
            page.wait_for_function("window.ctlSite && window.ctlSite.done", timeout=180_000)
            cdp = context.new_cdp_session(page)
            for rate in (1, 4):
                cdp.send("Emulation.setCPUThrottlingRate", {"rate": rate})
                tau = _presses(page, "tau", "ArrowLeft", PRESSES)
                lam = _presses(page, "lam", "ArrowLeft", PRESSES)
                out[f"{size}_throttle{rate}x"] = {
                    "tau_step_ms": {"median": round(statistics.median(tau), 1), "max": round(max(tau), 1)},
                    "lambda_step_ms": {"median": round(statistics.median(lam), 1), "max": round(max(lam), 1)}}
                print(size, f"{rate}x", out[f"{size}_throttle{rate}x"], flush=True)
            context.close()
        out["chromium"] = browser.version
        browser.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", help="a site already built (default: build the index and explorables.html here)")
    parser.add_argument("--lab", action="store_true", help="also measure the JupyterLab explorer (a minute or two)")
    parser.add_argument("--lab-only", action="store_true", help="only the JupyterLab explorer (the site's numbers in the file are kept)")
    parser.add_argument("--busy", type=int, default=0, help="busy loops to run beside the measurement (a loaded machine)")
    parser.add_argument("--label", default="jupyterlab", help="the key of the JupyterLab numbers in the results file")
    args = parser.parse_args()
    path = RESULTS / "explorer_browser.json"
    result = json.loads(path.read_text()) if args.lab_only and path.exists() else {}
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        time.sleep(20 if busy else 0)  # the load average climbs towards the busy loops' before the first press
        stamp = {"machine_before": _machine(), "date": time.strftime("%Y-%m-%d %H:%M:%S"), "busy_loops": args.busy}
        with tempfile.TemporaryDirectory() as tmp:
            if not args.lab_only:
                result.update(stamp)
                site = Path(args.site) if args.site else Path(tmp) / "_site"
                if not args.site:
                    subprocess.run([sys.executable, "-m", "ctl_explore.site", "--out", str(site), "--only", "^index"], cwd=REPO, check=True)
                result["site"] = bench_site(site)
            if args.lab or args.lab_only:
                lab_out = Path(tmp) / "lab.json"
                subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
                                "tests/test_explorer_browser.py"], cwd=REPO, env={**os.environ, "CTL_BENCH_OUT": str(lab_out)}, check=True)
                result[args.label] = {**json.loads(lab_out.read_text()), **stamp, "machine_after": _machine()}
        if not args.lab_only: result["machine_after"] = _machine()
    finally:
        for proc in busy:  # the loops this script started, and only those
            proc.terminate()
            proc.wait()
    RESULTS.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    print(f"written {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
