"""The package's import graph, read from its source with `ast`: every `import` and `from … import` of one of its modules,
at module level and inside functions, relative imports resolved, submodules of packages included. No cycle, no module of
the study package over 500 lines, no module-level `__getattr__` (a module's names are the ones it defines or imports), and no
name imported through `ctl_explore.train` that train only imports itself."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "ctl_explore"
MAX_STUDY_LINES = 500
# the flat study modules that the package ctl_explore/study/ replaces (issue 31): judged only once that package exists
PRE_SPLIT = {"ctl_explore.study", "ctl_explore.study_runs", "ctl_explore.study_plan"}


def module_files(root: Path, package: str) -> dict[str, Path]:
    "Every module of the package in folder `root`, by dotted name (a package by the name of its folder, from its __init__.py)."
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__": parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imported(node: ast.AST, module: str, is_package: bool, modules: set[str]) -> set[str]:
    "The package's modules that one import statement of `module` loads."
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names if alias.name in modules}
    base = module if is_package else module.rpartition(".")[0]
    if node.level:
        for _ in range(node.level - 1): base = base.rpartition(".")[0]
        source = f"{base}.{node.module}" if node.module else base
    else: source = node.module or ""
    found = set()
    for alias in node.names:
        if f"{source}.{alias.name}" in modules: found.add(f"{source}.{alias.name}")  # a submodule: `from pkg import mod`
        elif source in modules: found.add(source)
    return found


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    "module -> the package's modules it imports anywhere in its source (module level, functions, methods)."
    files = module_files(root, package)
    graph = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        edges = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges |= _imported(node, module, path.name == "__init__.py", set(files))
        graph[module] = edges - {module}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    "One import cycle as [a, b, …, a], or None: a depth-first search that meets a module still on its path."
    state, path = {}, []  # state: 1 on the current path, 2 done
    def visit(m: str) -> list[str] | None:
        state[m] = 1; path.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1: return path[path.index(n):] + [n]
            if n not in state and (found := visit(n)): return found
        state[m] = 2; path.pop()
        return None
    for m in sorted(graph):
        if m not in state and (found := visit(m)): return found
    return None


def module_getattr(path: Path) -> int | None:
    "The line of a module-level `def __getattr__` in the file (also under a module-level if/try), or None."
    def scan(body):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "__getattr__": return node.lineno
            if isinstance(node, (ast.If, ast.Try, ast.With)):
                for block in (node.body, getattr(node, "orelse", []), getattr(node, "finalbody", []),
                              *[h.body for h in getattr(node, "handlers", [])]):
                    if (line := scan(block)) is not None: return line
        return None
    return scan(ast.parse(path.read_text()).body)


def _judged(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    if (PACKAGE / "study").is_dir(): return graph
    return {m: deps - PRE_SPLIT for m, deps in graph.items() if m not in PRE_SPLIT}


# ---------------------------------------------------------------- the graph code finds what it must (a planted package)

def _plant(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "fakepkg"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_graph_finds_a_planted_cycle_through_a_function_and_a_subpackage(tmp_path):
    root = _plant(tmp_path, {
        "__init__.py": "",
        "a.py": "from .sub import c\n",                                 # relative, to a submodule of a subpackage
        "b.py": "import os\n\ndef later():\n    from . import a\n",    # inside a function
        "sub/__init__.py": "",
        "sub/c.py": "from ..b import later\n",                          # two levels up
        "d.py": "import fakepkg.a\nfrom fakepkg import b\n",           # absolute, outside the cycle
    })
    graph = import_graph(root, "fakepkg")
    assert graph["fakepkg.a"] == {"fakepkg.sub.c"} and graph["fakepkg.b"] == {"fakepkg.a"}
    assert graph["fakepkg.sub.c"] == {"fakepkg.b"} and graph["fakepkg.d"] == {"fakepkg.a", "fakepkg.b"}
    cycle = find_cycle(graph)
    assert cycle is not None and cycle[0] == cycle[-1] and set(cycle) == {"fakepkg.a", "fakepkg.b", "fakepkg.sub.c"}
    (root / "b.py").write_text("import os\n")  # the function-level import removed: no cycle left
    assert find_cycle(import_graph(root, "fakepkg")) is None


def test_module_getattr_is_found_at_module_level_only(tmp_path):
    root = _plant(tmp_path, {"__init__.py": "", "m.py": "import sys\nif sys:\n    def __getattr__(name): raise AttributeError(name)\n",
                             "k.py": "class K:\n    def __getattr__(self, name): return 1\n"})
    assert module_getattr(root / "m.py") == 3 and module_getattr(root / "k.py") is None


# ---------------------------------------------------------------- the package itself

def test_the_package_has_no_import_cycle():
    graph = _judged(import_graph(PACKAGE, "ctl_explore"))
    assert "ctl_explore.train" in graph and "ctl_explore.run_folders" in graph["ctl_explore.train"]  # the graph is not empty
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_module_level_getattr_in_the_package():
    files = module_files(PACKAGE, "ctl_explore")
    found = {m: line for m, p in files.items() if (m not in PRE_SPLIT or (PACKAGE / "study").is_dir())
             and (line := module_getattr(p)) is not None}
    assert not found, f"module-level __getattr__ (forwarding names hides where they live): {found}"


def test_no_study_module_is_longer_than_500_lines():
    folder = PACKAGE / "study"
    if not folder.is_dir(): pytest.skip("ctl_explore/study/ does not exist on this branch yet (issue 31 splits the study into it)")
    long = {str(p.relative_to(PACKAGE)): n for p in sorted(folder.rglob("*.py")) if (n := len(p.read_text().splitlines())) > MAX_STUDY_LINES}
    assert not long, f"modules of ctl_explore/study/ over {MAX_STUDY_LINES} lines: {long}"


def test_nothing_is_imported_through_train():
    "A name imported from ctl_explore.train is one train defines: the run folders' and processes' names come from their own modules."
    train = ast.parse((PACKAGE / "train.py").read_text())
    only_imported = {a.asname or a.name for node in train.body if isinstance(node, (ast.Import, ast.ImportFrom)) for a in node.names}
    sources = [*PACKAGE.rglob("*.py"), *(PACKAGE.parent / "tests").glob("*.py"), *(PACKAGE.parent / "benchmarks").glob("*.py")]
    through = []
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module == "ctl_explore.train" or (node.level == 1 and node.module == "train")):
                through += [f"{path.name}: {a.name}" for a in node.names if a.name in only_imported]
    assert not through, f"imported through ctl_explore.train, not from the module that defines them: {through}"
