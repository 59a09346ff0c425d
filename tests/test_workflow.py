"""The site's publishing workflow is a valid GitHub Actions file: actionlint (from PyPI, a dev extra) finds nothing, and
the workflow builds with this package's site builder and deploys to GitHub Pages on a push to main."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "site.yml"


def _actionlint() -> str:
    exe = shutil.which("actionlint") or str(Path(sys.executable).parent / "actionlint")
    if not Path(exe).exists(): pytest.fail("actionlint is missing: install the development extras, pip install -e \".[dev]\"")
    return exe


def test_actionlint_finds_nothing():
    out = subprocess.run([_actionlint(), "-no-color", str(WORKFLOW)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_actionlint_is_not_blind(tmp_path):
    "The linter refuses a broken workflow (a step with neither `run` nor `uses`), so a pass above means something."
    bad = tmp_path / "bad.yml"
    bad.write_text(WORKFLOW.read_text().replace("run: python -m ctl_explore.site --out _site", "shell: bash"))
    out = subprocess.run([_actionlint(), "-no-color", str(bad)], capture_output=True, text=True)
    assert out.returncode != 0 and "run" in out.stdout


def test_the_workflow_builds_the_site_and_deploys_it_from_main():
    text = WORKFLOW.read_text()
    assert "branches: [main]" in text and "python -m ctl_explore.site --out _site" in text
    assert "actions/upload-pages-artifact@" in text and "actions/deploy-pages@" in text and "pages: write" in text
    assert '".[site]"' in text  # the site's extra, declared in pyproject.toml
