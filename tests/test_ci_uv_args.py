""".ci/uv_args.py turns pip's configuration into uv's options, so that CI's uv install resolves from the same sources as
README's pip command: every index, wheel folder and constraint kept, pip's environment variables winning over its files."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / ".ci" / "uv_args.py"
CONFIG = """global.cert='/etc/ssl/certs/ca-certificates.crt'
global.constraint='/etc/pip/constraints.txt'
global.extra-index-url='file:///srv/a/simple file:///srv/b/simple'
global.find-links='/srv/wheels'
:env:.find-links='/srv/wheels'
user.index-url='https://mirror.example/simple'
"""


def _args(config: str, **env: str) -> list[str]:
    clean = {"PATH": "/usr/bin:/bin", **env}
    out = subprocess.run([sys.executable, str(SCRIPT)], input=config, capture_output=True, text=True, env=clean, check=True)
    return out.stdout.splitlines()


def _pairs(args: list[str]) -> list[tuple[str, str]]:
    assert len(args) % 2 == 0, args
    return list(zip(args[::2], args[1::2]))


def test_every_source_of_pips_configuration_is_passed_once():
    pairs = _pairs(_args(CONFIG))
    assert pairs[0] == ("--index-strategy", "unsafe-best-match")  # pip's rule: the best version over all indexes
    assert set(pairs[1:]) == {("--constraint", "/etc/pip/constraints.txt"), ("--extra-index-url", "file:///srv/a/simple"),
                              ("--extra-index-url", "file:///srv/b/simple"), ("--find-links", "/srv/wheels"),
                              ("--index-url", "https://mirror.example/simple")}
    assert len(pairs) == 6  # the wheel folder named twice is passed once; the certificate is not a source


def test_pips_environment_wins_and_an_empty_configuration_adds_nothing():
    pairs = _pairs(_args(CONFIG, PIP_FIND_LINKS="/elsewhere /more", PIP_CONSTRAINT="/c.txt"))
    assert ("--find-links", "/srv/wheels") not in pairs and {("--find-links", "/elsewhere"), ("--find-links", "/more")} <= set(pairs)
    assert [p for p in pairs if p[0] == "--constraint"] == [("--constraint", "/c.txt")]
    assert _pairs(_args("")) == [("--index-strategy", "unsafe-best-match")]
