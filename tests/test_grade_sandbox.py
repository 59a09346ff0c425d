"""The grader as an attacker meets it: every submission runs in a bubblewrap sandbox, nothing of the student's is unpickled,
functions are rebuilt from their source where the library is absent, and the first prediction is the one graded.

The escapes run only inside the sandbox (the grader's or `Sandbox.command`'s); each test says what it tries and what must
come of it. Without bubblewrap the sandbox tests are skipped with a message (CI installs it)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ctl_explore.answer_host import PlainError, Unsupported, from_plain, to_plain
from ctl_explore.exercises import LIBRARY_DIR
from ctl_explore.grading import Sandbox, SandboxUnavailable, _bwrap_works, answer_sources, find_sandbox, grade

ROOT = LIBRARY_DIR.parent
NO_BWRAP = _bwrap_works()
needs_bwrap = pytest.mark.skipif(NO_BWRAP is not None, reason=f"no bubblewrap sandbox here: {NO_BWRAP}")


def _in_box(tmp_path: Path, code: str, library: bool = False, box: Sandbox | None = None, timeout: float = 60):
    "Run `code` with this Python inside a sandbox whose one writable folder is tmp_path/box; (exit status, stdout, stderr)."
    folder = tmp_path / "box"
    folder.mkdir(exist_ok=True)
    os.chmod(tmp_path, 0o755)
    box = box or Sandbox()
    box.prepare(folder)
    done = subprocess.run(box.command([sys.executable, "-c", code], folder, library), capture_output=True, text=True, timeout=timeout)
    return done.returncode, done.stdout, done.stderr


# ---------------------------------------------------------------- plain data: what crosses from the student

class Liar(float):
    "A float equal to everything, whose value changes between reads."
    reads = 0
    def __eq__(self, other): return True
    __hash__ = float.__hash__
    def __float__(self):
        Liar.reads += 1
        return 0.3 if Liar.reads == 1 else 99.0


class Payload:
    "What an unpickled answer would run: it must never be loaded by the grader."
    def __reduce__(self): return (os.system, ("touch /tmp/ctl-grade-pwned",))


def test_plain_data_refuses_lying_objects_and_payloads():
    import torch
    back = from_plain(json.loads(json.dumps(to_plain([Liar(1.0), 3, "a", Payload(), torch.tensor([1.0, 2.0])]))))
    assert type(back[0]) is float and back[0] == 0.3 and back[0] != 99.0          # read once, as a plain float
    assert type(back[1]) is int and back[2] == "a"
    assert isinstance(back[3], Unsupported) and "Payload" in repr(back[3])      # never unpickled: only its type's name crossed
    assert back[4].dtype == torch.float32 and back[4].tolist() == [1.0, 2.0]
    for bad, says in (({"t": "float", "v": [1]}, "not a number"), ({"t": "int", "v": 1.5}, "unknown value tag"),
                      ({"t": "tensor", "dtype": "complex64", "shape": [1], "v": [1]}, "malformed tensor"),
                      ({"t": "dict", "v": [[{"t": "list", "v": []}, {"t": "none"}]]}, "cannot be hashed"),
                      ({"t": "tensor", "dtype": "float32", "shape": [10**7], "v": []}, "with 0 numbers"), ("pickle", "not a tagged value")):
        with pytest.raises(PlainError, match=says): from_plain(bad)


def test_answer_sources_rebuild_from_the_notebook_not_from_the_kernel():
    nbformat = pytest.importorskip("nbformat")
    cells = ["import math\nfrom ctl_explore.losses import n_informative", "cache = {}",
             "cache[(101, 0.1)] = n_informative(100, 0.1)",                       # filled in the kernel: never crosses
             "def kept(n_rows, alpha):\n    return cache.get((n_rows, alpha)) or helper(n_rows, alpha)",
             "%time x = 1", "def helper(n, a): return max(1, math.ceil(a * (n - 1)))", "kept = kept"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    src = answer_sources(nb, ["kept"])["kept"]
    assert src[0] == "import math" and "cache = {}" in src and any(s.startswith("def helper") for s in src)
    assert not any("n_informative(100" in s for s in src) and not any("%time" in s for s in src)


# ---------------------------------------------------------------- the sandbox itself

@needs_bwrap
def test_the_sandbox_contains_writes_reads_network_forks_and_memory(tmp_path):
    other = tmp_path / "other-student.ipynb"
    other.write_text("secret answers")
    code = f"""
import os, socket, resource
out = []
def tryit(name, f):
    try: f(); out.append(name + ' ALLOWED')
    except BaseException as e: out.append(name + ' refused ' + type(e).__name__)
tryit('write-library', lambda: open({str(ROOT / 'ctl_explore' / 'grading.py')!r}, 'a').write('#'))
tryit('read-other', lambda: open({str(other)!r}).read())
tryit('read-solutions', lambda: os.listdir({str(ROOT / 'nbs' / 'solutions')!r}))
tryit('read-tests', lambda: os.listdir({str(ROOT / 'tests')!r}))
tryit('network', lambda: socket.create_connection(('1.1.1.1', 80), timeout=2))
tryit('import-library', lambda: __import__('ctl_explore'))
def forks():
    kids = []
    try:
        for _ in range(2000): kids.append(os.fork() or os._exit(0))
    finally:
        for k in kids: os.waitpid(k, 0)
tryit('fork-bomb', forks)
tryit('memory-bomb', lambda: bytearray(64 * 2**30))
open('mine.txt', 'w').write('a submission may write its own folder')
print('\\n'.join(out))
"""
    status, stdout, stderr = _in_box(tmp_path, code, box=Sandbox(processes=64, memory_gb=4))
    assert status == 0, stderr[-2000:]
    refused = {line.split(" refused ")[0] for line in stdout.splitlines() if " refused " in line}
    assert "ALLOWED" not in stdout and refused == {"write-library", "read-other", "read-solutions", "read-tests", "network",
                                                   "import-library", "fork-bomb", "memory-bomb"}, stdout
    assert (tmp_path / "box" / "mine.txt").exists() and other.read_text() == "secret answers"


@needs_bwrap
def test_the_kernel_sandbox_has_the_library_and_the_host_sandbox_has_not(tmp_path):
    assert _in_box(tmp_path, "import ctl_explore.losses", library=True)[0] == 0
    status, _, stderr = _in_box(tmp_path, f"exec(open({str(LIBRARY_DIR / 'losses.py')!r}).read())")
    assert status != 0 and "No such file" in stderr                     # its source is not there to read and exec either


def test_without_a_sandbox_the_grader_refuses_unless_unsafe(monkeypatch):
    import ctl_explore.grading as g
    monkeypatch.setattr(g, "_bwrap_works", lambda: "bubblewrap (bwrap) is not installed: apt-get install bubblewrap")
    with pytest.raises(SandboxUnavailable, match="--unsafe"): find_sandbox()
    assert find_sandbox(unsafe=True).kind == "none" and "WITHOUT a sandbox" in g.UNSAFE_WARNING


# ---------------------------------------------------------------- attacks through `grade`, in one class

IMPORT = "import math, os, time\nfrom ctl_explore.exercises import check_06_1, check_06_3"
RIGHT_06_3 = "kept = lambda n_rows, alpha: max(1, math.ceil(round(alpha * (n_rows - 1), 9)))"


def _write(path: Path, *cells: str) -> Path:
    import nbformat
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells]), path)
    return path


@pytest.mark.slow
@needs_bwrap
def test_a_class_of_attacks_is_refused_or_contained(tmp_path):
    pytest.importorskip("nbclient")
    subs = tmp_path / "class"
    subs.mkdir()
    library = (LIBRARY_DIR / "grading.py").read_bytes()
    # a sleeper that swallows every exception, the grader's interrupt included, then a right answer after it
    _write(subs / "sleeper.ipynb", IMPORT, "while True:\n    try: time.sleep(60)\n    except BaseException: pass", RIGHT_06_3)
    # a pickle payload as an answer, a float that equals everything, a cache filled with the library, a rewrite of the grader
    _write(subs / "payload.ipynb", IMPORT,
           "class Evil:\n    def __reduce__(self): return (os.system, ('touch /tmp/ctl-grade-pwned',))\n    def __call__(self, m): return m / (1 - m)",
           "lag = Evil()",
           f"try: open({str(LIBRARY_DIR / 'grading.py')!r}, 'a').write('\\nRIGHT = True\\n')\nexcept OSError as e: print(e)")
    _write(subs / "memo.ipynb", IMPORT + "\nfrom ctl_explore.losses import n_informative",
           "cache = {}\nfor n in (5, 101, 1438, 2000):\n    for a in (0.01, 0.1, 0.25, 0.33, 0.5, 0.07, 0.29, 0.57):\n        cache[(n, a)] = n_informative(n - 1, a)",
           "open('/tmp/cache.json', 'w').write('x'); open('cache.json', 'w').write('x')",
           "def kept(n_rows, alpha):\n    return cache[(n_rows, alpha)]")
    _write(subs / "subprocess.ipynb", IMPORT,
           "import subprocess, sys\ndef kept(n_rows, alpha):\n    return int(subprocess.run([sys.executable, '-c', "
           "f'from ctl_explore.losses import n_informative; print(n_informative({n_rows - 1}, {alpha}))'], capture_output=True, text=True).stdout)")
    started = time.monotonic()
    rows = grade([subs], tmp_path / "grades.csv", time_limit=8, echo=lambda line: None)
    took = time.monotonic() - started
    table = {(r["student"], r["exercise"]): r for r in rows}
    events = {s: [(r["status"], r["reason"]) for r in rows if r["student"] == s and r["exercise"] == "(notebook)"] for s, _ in table}
    # the sleeper: killed from outside within its limit + KILL_GRACE (+ a few seconds of slack), and the cell after it still ran
    (timeout,) = [reason for status, reason in events["sleeper"] if status == "timeout"]
    assert int(timeout.split("after ")[1].split(" s")[0]) <= 8 + 10, timeout
    assert table["sleeper", "06.3"]["status"] == "passed"
    # the payload never ran in the grader; its Evil() was rebuilt from source in the host, and gives the right lag there:
    # the point is that nothing of the kernel's object was loaded, not that Evil is wrong
    assert not Path("/tmp/ctl-grade-pwned").exists()
    assert (LIBRARY_DIR / "grading.py").read_bytes() == library
    assert table["payload", "06.1"]["status"] == "passed"
    # the cache filled with the library does not cross: rebuilt empty, the answer fails; /tmp and the kernel's folder are not the host's
    assert table["memo", "06.3"]["status"] != "passed" and not Path("/tmp/cache.json").exists()
    # a subprocess running the library: the host has no library
    assert table["subprocess", "06.3"]["status"] != "passed"
    assert took < 240


@pytest.mark.slow
@needs_bwrap
def test_the_first_prediction_is_graded_and_a_change_reported(tmp_path):
    pytest.importorskip("nbclient")
    (tmp_path / "s").mkdir()
    _write(tmp_path / "s" / "00_losses.ipynb",
           "from ctl_explore.exercises import run_00_4, check_00_4",
           "prediction_4 = {0.1: 1.5, 1.0: 1.5, 5.0: 1.5}\nrun_00_4(prediction_4)",          # wrong at τ = 0.1 ...
           "prediction_4 = {0.1: 1000.0, 1.0: 1.5, 5.0: 1.1}\nrun_00_4(prediction_4)",       # ... then changed after the run
           "why_4 = 'a'\ncheck_00_4(why_4)")
    rows = grade([tmp_path / "s"], tmp_path / "grades.csv", time_limit=60, echo=lambda line: None)
    (row,) = [r for r in rows if r["exercise"] == "00.4"]
    assert row["status"] == "passed" and row["came_true"] is False, row
    assert "changed after it was recorded" in row["reason"] and "1000.0" in row["reason"], row


# ---------------------------------------------------------------- the bypass classes, per data-valued check

class Everything(float):
    "A float equal to everything."
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    __hash__ = float.__hash__


class EveryInt(int):
    "An int equal to everything."
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    __hash__ = int.__hash__


def _through_the_grader(x):
    "What the checks receive of `x` when it is graded: its plain data, read back (the JSON the grader reads)."
    return from_plain(json.loads(json.dumps(to_plain(x))))


# exercise -> (its answer's shape, filled with objects that claim to equal anything)
LIARS = {"01.3": Everything(0.05), "02.1": Everything(0.01), "02.3": (Everything(0.25), EveryInt(1)),
         "12.1": EveryInt(1), "12.2": EveryInt(1), "12.3": ("zero", Everything(0.0)), "15.1": EveryInt(1),
         "15.2": Everything(0.2), "15.3": EveryInt(1), "07.1": (Everything(0.1), Everything(0.1)), "09.3": (EveryInt(1), Everything(2.0), EveryInt(3))}


@pytest.mark.parametrize("key", sorted(LIARS))
def test_objects_that_equal_everything_arrive_as_plain_numbers_and_are_refused(key):
    import ctl_explore.exercises as ex
    answer = _through_the_grader(LIARS[key])
    flat = answer if isinstance(answer, tuple) else (answer,)
    assert all(type(v) in (int, float, str) for v in flat), answer
    with pytest.raises(AssertionError): ex.CHECKS[key](answer)


def test_a_tensor_subclass_that_compares_equal_arrives_as_a_tensor():
    import torch
    class Sly(torch.Tensor):
        def __eq__(self, other): return torch.ones_like(self, dtype=torch.bool)
    sly = torch.tensor([1.0, 2.0]).as_subclass(Sly)
    back = _through_the_grader(sly)
    assert type(back) is torch.Tensor and back.tolist() == [1.0, 2.0]


def test_the_hosts_tripwires_catch_sparse_softmax_and_work_in_a_thread():
    "The answer host (here as a plain process: its tripwires are its own) refuses torch's sparse softmax where softmax is banned, and a thread where work is counted."
    import torch
    from ctl_explore.exercises import AnswerHost, RemoteFunction, _Banned
    statements = ["import torch, threading",
                  "def sparse(x):\n    return torch.sparse.softmax(x.to_sparse(), 1).to_dense()",
                  "def threaded(q, bank):\n    out = {}\n    t = threading.Thread(target=lambda: out.update(s=q @ bank.T))\n    t.start(); t.join()\n    return out['s'].sum()"]
    host = AnswerHost([sys.executable, str(LIBRARY_DIR / "answer_host.py")], statements, ["sparse", "threaded"], 60)
    try:
        sparse, threaded = host.value("sparse"), host.value("threaded")
        assert isinstance(sparse, RemoteFunction) and isinstance(threaded, RemoteFunction)
        sparse.ban = True
        with pytest.raises(_Banned): sparse(torch.ones(2, 3))
        assert "torch's _sparse_softmax" in host.report()["used"]
        with pytest.raises(_Banned, match="thread"): threaded.call((torch.ones(2, 4), torch.ones(5, 4)), work=True)
    finally: host.close()


@pytest.mark.slow
@needs_bwrap
def test_an_autograd_function_answer_is_rebuilt_and_checked_in_the_host(tmp_path):
    """Exercise 01.1's answer is a class whose backward the check calls through autograd and directly: rebuilt from its
    source in the answer host, the right one passes; one that has autograd differentiate inside its backward is refused."""
    pytest.importorskip("nbclient")
    solution = json.loads((ROOT / "nbs" / "solutions" / "01_gradients.ipynb").read_text(encoding="utf-8"))
    (right,) = ["".join(c["source"]).replace("with quietly(): ", "") for c in solution["cells"] if "class MyEmbeddingLoss" in "".join(c["source"])]
    head = "import torch\nimport torch.nn.functional as F\nfrom ctl_explore.exercises import check_01_1"
    autograd_inside = right.replace('''        prob, anchor, positive, bank = ctx.saved_tensors
        d_neg''', '''        prob, anchor, positive, bank = ctx.saved_tensors
        with torch.enable_grad():
            leaves = [t.detach().double().requires_grad_() for t in (anchor, positive, bank)]  # float64: right to the last digit
            s = torch.cat([(leaves[0] * leaves[1]).sum(1, keepdim=True), leaves[0] @ leaves[2].T], 1) / ctx.tau
            grads = torch.autograd.grad(-F.log_softmax(s, 1)[:, 0], leaves, grad_out.double())
            return (*(g.to(anchor.dtype) for g in grads), None)
        d_neg''')
    assert autograd_inside != right
    subs = tmp_path / "class"
    subs.mkdir()
    _write(subs / "right.ipynb", head, right)
    _write(subs / "inside.ipynb", head, autograd_inside)
    rows = grade([subs], tmp_path / "grades.csv", time_limit=60, echo=lambda line: None)
    table = {(r["student"], r["exercise"]): r for r in rows}
    assert table["right", "01.1"]["status"] == "passed", table["right", "01.1"]
    assert table["inside", "01.1"]["status"] == "failed" and "autograd" in table["inside", "01.1"]["reason"], table["inside", "01.1"]
