"""The host tools stage 5 runs (clang, ld.lld, llvm-objcopy, awk, gcc, make) and how their failures read.

Every command a module build runs goes through a ``Runner``, so that a test
can stand in for a tool the host lacks (``make`` with ``bsd.kmod.mk`` off
FreeBSD) and see the exact command lines; ``run_tool`` is the real one.  A
tool that is missing, cannot start or fails becomes one ``UserError`` line
naming it and its most telling diagnostic, never a traceback.  Tool versions
are recorded in the manifests and are part of every stamp key, so a changed
compiler or linker rebuilds.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Optional, Sequence

from .errors import UserError


@dataclass(frozen=True)
class Completed:
    """What a command left behind: the only part of subprocess the build reads."""

    returncode: int
    stdout: str
    stderr: str


# (argv, working directory, environment) -> what the command left behind.
Runner = Callable[[Sequence[str], Optional[Path], Optional[Dict[str, str]]], Completed]


def run_tool(argv: Sequence[str], cwd: Optional[Path] = None, env: Optional[Dict[str, str]] = None) -> Completed:
    """The real runner: a subprocess, its output captured.  A missing tool is a UserError."""
    try:
        proc = subprocess.run(list(argv), cwd=cwd, env=env, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise UserError(f"{argv[0]}: not installed; it is needed to build modules (./bootstrap installs it)") from None
    except OSError as e:
        raise UserError(f"cannot run {argv[0]}: {e.strerror}") from None
    return Completed(proc.returncode, proc.stdout, proc.stderr)


def first_error(text: str) -> str:
    """The most telling line of a tool's diagnostics: its first error, else its first line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if "error" in ln.lower():
            return ln
    return lines[0] if lines else "no diagnostics"


def checked(run: Runner, argv: Sequence[str], what: str, cwd: Optional[Path] = None,
            env: Optional[Dict[str, str]] = None) -> Completed:
    """Run ``argv``; a nonzero exit is a UserError saying what was being done and the tool's first error."""
    res = run(argv, cwd, env)
    if res.returncode != 0:
        raise UserError(f"{what}: {Path(argv[0]).name} failed (exit {res.returncode}): "
                        f"{first_error(res.stderr or res.stdout)}")
    return res


@functools.lru_cache(maxsize=None)
def tool_version(tool: str) -> str:
    """The first line of ``tool --version`` (recorded in manifests, part of the stamp key)."""
    path = shutil.which(tool)
    if path is None:
        return "(not installed)"
    for flag in (["--version"], ["-W", "version"]):  # mawk knows only the second
        try:
            proc = subprocess.run([path, *flag], capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
        except OSError:
            return "(cannot run)"
        lines = (proc.stdout or proc.stderr).strip().splitlines()
        if proc.returncode == 0 and lines:
            return lines[0]
    return f"{path} (version unknown)"


def require_tool(*names: str) -> str:
    """The first of ``names`` that is installed, or a UserError naming them."""
    for n in names:
        if shutil.which(n):
            return n
    raise UserError(f"{' or '.join(names)}: not installed; it is needed to build modules (./bootstrap installs it)")


def llvm_version(tool: str) -> int:
    """``14.0.6`` -> 140006, as bsd.compiler.mk/bsd.linker.mk spell COMPILER_VERSION/LINKER_VERSION."""
    m = re.search(r"(\d+)\.(\d+)\.(\d+)", tool_version(tool))
    return int(m.group(1)) * 10000 + int(m.group(2)) * 100 + int(m.group(3)) if m else 0
