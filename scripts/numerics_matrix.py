"""The numerics matrix: run the lessons (and the numeric tests) under several CPU kernel settings and threads, and
report which checks change outcome.

torch picks its CPU kernels by instruction set (`ATEN_CPU_CAPABILITY`: default, avx2, avx512), oneDNN by
`ONEDNN_MAX_CPU_ISA`, MKL by its own dispatch (which on some machines takes another path than on others: `MKL_CBWR`
pins one), and the number of threads changes the order of a reduction. Each gives other rounding, and a check on a
trained number that holds under one and fails under another holds only on the machine it was written on. This script
imitates other machines on one machine:

    python scripts/numerics_matrix.py                                   # every lesson, the default settings
    python scripts/numerics_matrix.py --notebooks nbs/90_cli.ipynb --settings native,mkl-compatible
    python scripts/numerics_matrix.py --tests tests/test_pretrain.py --settings avx2,default

Each setting runs in fresh processes (the variables must be set before torch starts). It writes a JSON record (per
setting: each notebook's and each test's outcome, seconds and, on failure, the last lines of the error) and a Markdown
table of the notebooks and tests whose outcome is not the same under every setting (`--out`, default
benchmarks/results/numerics_matrix.{json,md}). Exit status 1 when any check failed under any setting.

The settings (`SETTINGS`) and what each imitates:
* native: what torch picks here, one thread per process (README's test command: OMP_NUM_THREADS=1);
* threads2: the same kernels with two threads, as a student's kernel in JupyterLab runs by default;
* avx2: a CPU without AVX-512 (torch's and oneDNN's kernels capped at AVX2, MKL's AVX2 path);
* default: an old or unknown CPU (torch's portable kernels, oneDNN at SSE4.1, MKL's portable path);
* mkl-compatible: torch's native kernels with MKL's portable path, the setting that reproduced, on an AMD EPYC, the
  failure first seen on an Intel Xeon (issue 39: lesson 90's λ = 1 run);
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SETTINGS = {
    "native": {},
    "threads2": {"OMP_NUM_THREADS": "2"},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "AVX2"},
    "default": {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41", "MKL_CBWR": "COMPATIBLE"},
    "mkl-compatible": {"MKL_CBWR": "COMPATIBLE"},
}
KERNEL_VARS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_CBWR", "OMP_NUM_THREADS", "MKL_ENABLE_INSTRUCTIONS")

# The tests whose assertions rest on numbers computed by training or by float kernels (the rest check files, errors,
# options and pages): the matrix's default pytest set.
NUMERIC_TESTS = ("tests/test_pretrain.py", "tests/test_linear_eval.py", "tests/test_suppression.py", "tests/test_generalized.py",
                 "tests/test_fast.py", "tests/test_losses.py", "tests/test_gradients.py", "tests/test_metrics.py",
                 "tests/test_memory_bank.py", "tests/test_selection.py", "tests/test_study_runs.py")


def cpu_model() -> str:
    "The CPU as the kernel reports it: model name, family and model, and its widest vector instructions (or the platform's string)."
    info = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
    if not info: return platform.processor() or "unknown CPU"
    flags = set(info.get("flags", "").split())
    widest = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    return f"{info.get('model name', 'unknown CPU')} (family {info.get('cpu family', '?')}, model {info.get('model', '?')}; {widest})"


def _one_notebook(path: str) -> dict:
    "Run one notebook as nbdev-test does (in this worker process); its outcome, seconds and the error's last lines."
    from nbdev.test import test_nb
    from nbdev.config import get_config
    cfg = get_config(Path(path).resolve().parent)
    flags = cfg.tst_flags.split() if isinstance(cfg.tst_flags, str) else list(cfg.tst_flags or [])
    err = io.StringIO()
    real_err, sys.__stderr__ = sys.__stderr__, err  # test_nb writes a failure's traceback to sys.__stderr__
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            ok, seconds = test_nb(path, skip_flags=flags, basepath=cfg.config_path, cell_timeout=cfg.cell_timeout or None)
    finally:
        sys.__stderr__ = real_err
    tail = [line for line in err.getvalue().splitlines() if line.strip()][-6:]
    return {"passed": bool(ok), "seconds": round(seconds, 1), "error": "\n".join(tail) if not ok else ""}


def run_notebooks(notebooks: list[str], workers: int) -> dict:
    "Every notebook in a pool of `workers` processes, in this process's environment (one setting)."
    import torch
    info = {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    results = {}
    with ProcessPoolExecutor(workers) as pool:
        for nb, res in zip(notebooks, pool.map(_one_notebook, notebooks)):
            name = str(Path(nb).resolve().relative_to(ROOT / "nbs"))  # solutions/07_pretrain.ipynb beside 07_pretrain.ipynb
            results[name] = res
            print(f"  {name}: {'passed' if res['passed'] else 'FAILED'} ({res['seconds']} s)", flush=True)
    return {"info": info, "notebooks": results}


def run_tests(tests: list[str], env: dict, scratch: Path) -> dict:
    "pytest on `tests` in the setting's environment; each test's outcome from its JUnit record."
    xml = scratch / "junit.xml"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadfile", f"--junitxml={xml}", *tests]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    outcomes = {}
    if xml.exists():
        for case in ET.parse(xml).getroot().iter("testcase"):
            name = f"{case.get('classname')}::{case.get('name')}"
            bad = case.find("failure") if case.find("failure") is not None else case.find("error")
            skipped = case.find("skipped") is not None
            outcomes[name] = {"outcome": "failed" if bad is not None else "skipped" if skipped else "passed",
                              "seconds": round(float(case.get("time") or 0), 2),
                              "error": (bad.get("message") or "")[:400] if bad is not None else ""}
    return {"exit_status": proc.returncode, "tests": outcomes, "tail": proc.stdout.splitlines()[-3:]}


def changed(record: dict, kind: str) -> dict[str, dict[str, str]]:
    "The checks (notebooks or tests) whose outcome is not the same under every setting that ran them."
    seen: dict[str, dict[str, str]] = {}
    for setting, res in record["settings"].items():
        for name, r in res.get(kind, {}).items():
            seen.setdefault(name, {})[setting] = r.get("outcome") or ("passed" if r["passed"] else "failed")
    return {name: by for name, by in seen.items() if len(set(by.values())) > 1 or "failed" in by.values()}


def markdown(record: dict) -> str:
    "The record as the table benchmarks/results keeps: one row per notebook, one column per setting."
    settings = list(record["settings"])
    lines = [f"# Numerics matrix", "",
             f"Machine: {record['machine']['cpu']}, {record['machine']['cores']} cores; torch {record['machine']['torch']}; "
             f"{record['date']}. Command: `{record['command']}`.", "",
             "| setting | variables | torch's kernels | wall s |", "|---|---|---|---:|"]
    for s in settings:
        res = record["settings"][s]
        lines.append(f"| {s} | {' '.join(f'{k}={v}' for k, v in SETTINGS[s].items()) or '(none)'} | "
                     f"{res.get('info', {}).get('cpu_capability', '?')} | {res.get('wall_s', '?')} |")
    nbs = sorted({n for s in settings for n in record["settings"][s].get("notebooks", {})})
    if nbs:
        lines += ["", "## Lessons (nbdev-test, one notebook per process pool task)", "",
                  "| notebook | " + " | ".join(settings) + " |", "|---|" + "---|" * len(settings)]
        for n in nbs:
            cells = []
            for s in settings:
                r = record["settings"][s].get("notebooks", {}).get(n)
                cells.append("—" if r is None else ("pass" if r["passed"] else "**FAIL**") + f" ({r['seconds']:.0f} s)")
            lines.append(f"| {n} | " + " | ".join(cells) + " |")
    tests = changed(record, "tests")
    n_tests = {s: len(record["settings"][s].get("tests", {})) for s in settings}
    if any(n_tests.values()):
        lines += ["", f"## Numeric tests ({', '.join(f'{s}: {n}' for s, n in n_tests.items())} tests run)", ""]
        if tests:
            lines += ["| test | " + " | ".join(settings) + " |", "|---|" + "---|" * len(settings)]
            lines += [f"| {t} | " + " | ".join(by.get(s, "—") for s in settings) + " |" for t, by in sorted(tests.items())]
        else:
            lines.append("Every test had the same outcome under every setting, and none failed.")
    flips = changed(record, "notebooks")
    lines += ["", "## Checks that changed outcome", ""]
    if not flips and not tests: lines.append("None: every check passed under every setting.")
    for n, by in sorted({**flips, **tests}.items()):
        errs = [record["settings"][s].get("notebooks", {}).get(n, {}).get("error") or
                record["settings"][s].get("tests", {}).get(n, {}).get("error") for s in settings if by.get(s) == "failed"]
        lines.append(f"* {n}: " + ", ".join(f"{s} {o}" for s, o in by.items()) + (f" — `{(errs[0] or '').splitlines()[-1][:200]}`" if errs and errs[0] else ""))
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--settings", default="native,threads2,avx2,default,mkl-compatible",
                   help=f"comma-separated, from {', '.join(SETTINGS)}")
    p.add_argument("--notebooks", nargs="*", default=None, help="notebooks to run (default: every nbs/*.ipynb; none: --notebooks with no name)")
    p.add_argument("--tests", nargs="*", default=None, help=f"test files to run (default: none; --tests alone: {len(NUMERIC_TESTS)} numeric files)")
    p.add_argument("--workers", type=int, default=2, help="notebooks run at once (default 2)")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "numerics_matrix", help="record's path without suffix")
    p.add_argument("--_one-setting", dest="one", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    unknown = [s for s in a.settings.split(",") if s not in SETTINGS]
    if unknown: p.error(f"--settings: unknown setting(s) {', '.join(unknown)}; choose from {', '.join(SETTINGS)}")
    notebooks = sorted(str(x) for x in (ROOT / "nbs").rglob("*.ipynb") if not any(part[0] in "_." for part in x.relative_to(ROOT / "nbs").parts)) if a.notebooks is None else [str(Path(x).resolve()) for x in a.notebooks]
    missing = [x for x in notebooks if not Path(x).is_file()]
    if missing: p.error(f"--notebooks: no such notebook {', '.join(missing)}")
    tests = [] if a.tests is None else (list(NUMERIC_TESTS) if not a.tests else a.tests)

    if a.one:  # inside one setting's process: the variables are already set
        # a notebook's IPython shell replaces sys.modules["__main__"], so the pool's workers must find the function in a
        # module of its own name
        sys.path.insert(0, str(Path(__file__).parent))
        import numerics_matrix
        print(json.dumps(numerics_matrix.run_notebooks(notebooks, a.workers)), file=open(os.environ["CTL_MATRIX_OUT"], "w"))
        return 0

    import torch
    record = {"machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "torch": torch.__version__, "python": platform.python_version()},
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "command": "python scripts/numerics_matrix.py " + " ".join(argv if argv is not None else sys.argv[1:]), "settings": {}}
    scratch = Path(os.environ.get("TMPDIR", "/tmp")) / f"ctl-matrix-{os.getpid()}"
    scratch.mkdir(parents=True, exist_ok=True)
    for s in a.settings.split(","):
        env = {k: v for k, v in os.environ.items() if k not in KERNEL_VARS}
        env.update({"OMP_NUM_THREADS": "1", **SETTINGS[s], "CTL_MATRIX_OUT": str(scratch / f"{s}.json")})
        print(f"{s}: {' '.join(f'{k}={v}' for k, v in SETTINGS[s].items()) or '(no variable)'}", flush=True)
        t0 = time.time()
        res = {}
        if notebooks:
            subprocess.run([sys.executable, __file__, "--_one-setting", s, "--workers", str(a.workers), "--notebooks", *notebooks],
                           env=env, check=True)
            res = json.loads((scratch / f"{s}.json").read_text())
        if tests:
            if not notebooks:  # the kernels torch picks under this setting, as run_notebooks records them
                probe = "import json, torch; print(json.dumps({'torch': torch.__version__, 'cpu_capability': torch.backends.cpu.get_cpu_capability()}))"
                res["info"] = json.loads(subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True).stdout)
            res.update(run_tests(tests, env, scratch))
            print(f"  pytest: {sum(t['outcome'] == 'failed' for t in res['tests'].values())} failed of {len(res['tests'])}", flush=True)
        res["wall_s"] = round(time.time() - t0)
        record["settings"][s] = res
        a.out.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")  # after each setting: a kill keeps what ran
        a.out.with_suffix(".md").write_text(markdown(record))
    failed = changed(record, "notebooks") | changed(record, "tests")
    print(markdown(record).split("## Checks that changed outcome")[-1].strip())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
