"""pyproject.toml declares exactly what the library imports: every third-party module the package imports comes from a
declared distribution (the base dependencies, or the extra of the module that needs it), and every base dependency is
imported somewhere."""
from __future__ import annotations

import ast
import re
import sys
import tomllib
from functools import cache
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ctl_explore"
# Modules whose extra imports are allowed, and which extra supplies them.
MODULE_EXTRAS = {"site": "site", "selection": "fast", "grading": "site"}  # grading: nbclient and mistune, as the site
# Distributions a declared one relies on only through another's import name, or pulls in for a reason the import
# scan cannot see.
NOT_IMPORTED_BY_NAME = {"ipykernel": "the kernel the site's nbclient starts", "jupyter-server-mathjax": "files the site copies",
                        "nbconvert": "imported", "pillow": "imported as PIL"}


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _imports(path: Path) -> set[str]:
    "Top-level names of every module `path` imports, at any depth (functions import lazily)."
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import): names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module: names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"ctl_explore", "__future__"}


packages_distributions = cache(packages_distributions)  # it reads every installed distribution's files


def _distributions(module: str) -> set[str]:
    return {d.lower().replace("_", "-") for d in packages_distributions().get(module, [])}


def test_every_import_is_declared():
    project = _project()
    base = {_name(r) for r in project["dependencies"]}
    extras = {k: {_name(r) for r in v} for k, v in project["optional-dependencies"].items()}
    missing = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        allowed = base | extras.get(MODULE_EXTRAS.get(path.stem, ""), set())
        for module in _imports(path):
            dists = _distributions(module)
            assert dists, f"{path.name} imports {module!r}, which no installed distribution provides"
            if not dists & allowed: missing.setdefault(path.name, set()).add(f"{module} ({', '.join(sorted(dists))})")
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"


def test_every_base_dependency_is_imported():
    imported = set()
    for path in PACKAGE.rglob("*.py"):
        if path.stem in MODULE_EXTRAS: continue
        for module in _imports(path): imported |= _distributions(module)
    unused = {_name(r) for r in _project()["dependencies"]} - imported - set(NOT_IMPORTED_BY_NAME)
    assert not unused, f"declared in pyproject.toml's dependencies but imported by no module of the package: {unused}"


def test_the_dev_extras_take_the_course_the_site_and_the_fast_path():
    dev = _project()["optional-dependencies"]["dev"]
    assert any(r.startswith("ctl-explore[") and {"course", "site", "fast"} <= set(r[r.index("[") + 1:r.index("]")].split(","))
               for r in dev), dev


def test_figure_widgets_work():
    "The figure widgets lessons 02 and 12 draw with (LiveFigure, appendix 17), and plotly's FigureWidget that appendix 17 measures, build."
    import plotly.graph_objects as go
    from ctl_explore.explorer import LiveFigure
    go.FigureWidget([go.Scatter(x=[0, 1], y=[0, 1])])
    assert list(LiveFigure([go.Scatter(x=[0, 1], y=[0, 1])]).data[0].y) == [0, 1]


# Private torch names the library leans on, each because torch has no public equivalent; pyproject pins torch below
# the next minor version, and this list is what to check when that pin moves. Any other private name is a defect.
PRIVATE_TORCH = {
    "torch.utils._python_dispatch": "TorchDispatchMode, to count host syncs (ctl_explore.debug): torch exports no public home for it",
    "torch.ops.aten._softmax": "the one-pass bank loss's in-place softmax (ctl_explore.fast): torch.softmax has no out= variant",
    "_BatchNorm": "GlobalBatchNorm's base (several processes): the common base of torch's batch norms",
    "torch._dynamo": "compile_step (ctl_explore.train): its config.trace_autograd_ops, set while the compiled step runs, makes the "
                     "backward part of the one graph; torch.compile has no public option for it",
}


def test_private_torch_names_are_the_listed_ones():
    import re
    pattern = re.compile(r"torch(?:\.\w+)*\._[a-z]\w*|\b_BatchNorm\b")  # a private module or attribute reached from torch
    seen = {m.group(0) for p in PACKAGE.rglob("*.py") if p.name != "_modidx.py" for m in pattern.finditer(p.read_text())}
    unlisted = sorted(seen - set(PRIVATE_TORCH))
    assert not unlisted, f"private torch names not in PRIVATE_TORCH (use a public API, or list it with the reason): {unlisted}"
    torch_pin = next(d for d in __import__("tomllib").loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
                     if d.startswith("torch>") or d.startswith("torch="))
    assert "<" in torch_pin, f"torch must be pinned below its next minor version while the library uses private names: {torch_pin}"
