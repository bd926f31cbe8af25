"""A module's object directory, and the record a compile-and-link leaves for the manifest.

Every backend of ``kmod/backends/`` -- ``cross`` (clang and ld.lld,
spelling out kmod.mk) and ``native`` (``make`` with ``bsd.kmod.mk`` on
FreeBSD) -- starts from an empty object directory, so that nothing from an
earlier build is linked in or listed as an input, and each hands the same ``Built`` record to the manifest.  The headers the compiler
read come from its ``-MD`` dependency files in that directory: they are
manifest inputs, so a changed header rebuilds.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List


@dataclass(frozen=True)
class Built:
    """What compiling and linking one module produced: the manifest's fields for it."""

    ko_built: Path  # the .ko in the object directory (build/<id>/<m>.ko is a copy)
    commands: List[List[str]]  # every command line, as run
    cflags: List[str]  # the compile line's flags (sources and -MD aside)
    ldflags: List[str]  # the link line's flags
    tools: Dict[str, str]  # tool -> its version line
    headers: List[str]  # every header the compiler read, resolved, sorted
    profile: Dict[str, object]  # what was read from the tree and what was assumed
    mode: str  # "cross (clang + ld.lld)" or "native (make with bsd.kmod.mk)"
    tree_files: List[str] = field(default_factory=list)  # the sys/ tree's build files the flags came from


def fresh(objdir: Path) -> Path:
    """``objdir``, emptied: what an earlier build left there is neither linked nor recorded."""
    if objdir.exists():
        shutil.rmtree(objdir)
    objdir.mkdir(parents=True)
    return objdir


def depfile_headers(path: Path) -> List[str]:
    """Prerequisites listed in a ``-MD`` dependency file (the first is the source itself)."""
    try:
        text = path.read_text()
    except OSError:
        return []
    body = text.replace("\\\n", " ")
    out: List[str] = []
    for line in body.splitlines():
        if ":" not in line:
            continue
        _, deps = line.split(":", 1)
        out += [d.replace("\\ ", " ") for d in re.split(r"(?<!\\)\s+", deps.strip()) if d]
    return out


def headers_read(objdir: Path, depfiles: Iterable[Path]) -> List[str]:
    """The existing ``.h`` files the dependency files name (relative to ``objdir``), resolved and sorted."""
    headers = []
    for depfile in depfiles:
        for dep in depfile_headers(depfile):
            p = Path(dep) if os.path.isabs(dep) else objdir / dep
            if p.suffix == ".h" and p.is_file():
                headers.append(str(p.resolve()))
    return sorted(set(headers))
