"""The large library of a foreign ISA that ``bench.arch`` measures: Debian's ``libLLVM-15.so.1`` of that ISA.

Debian builds LLVM for every release architecture, and its one shared
library holds tens of megabytes of text: the size of a kernel, which the
cross C library's largest file (``libasan``, under a megabyte) is not.  The
package is fetched with ``apt-get download`` (the machine must have the
ISA's Debian architecture added: ``dpkg --add-architecture``), unpacked
with ``dpkg-deb -x`` into the cache under its version (``compile_cached``:
a temporary directory renamed into place), and only the library is kept.
Where the archive has no such package for the ISA (Debian 12 has no
riscv64), ``None``: the bench falls back to the cross C library.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Optional

from ..common import apt
from ..common.ccache import compile_cached
from ..common.files import locked
from ..common.paths import CACHE
from ..isa.contract import Isa

PACKAGE = "libllvm15"
LIBRARY = "libLLVM-15.so.1"
CACHE_DIR = CACHE / "bigimage"


def _candidate(name: str) -> str:
    """The version apt would install of ``name`` ("": the archive has none)."""
    proc = subprocess.run(["apt-cache", "policy", name], capture_output=True, text=True,
                          env={"LC_ALL": "C", "PATH": "/usr/bin:/bin"})
    for line in proc.stdout.splitlines():
        key, _, value = line.strip().partition(":")
        if key == "Candidate":
            value = value.strip()
            return "" if value == "(none)" else value
    return ""


def library(isa: Isa) -> Optional[Path]:
    """The ISA's ``libLLVM-15.so.1`` from the cache, fetched and unpacked if need be; None when apt has none."""
    arch, triple = isa.oracle.debian_arch, isa.oracle.gnu_triple
    if not arch or shutil.which("apt-cache") is None:
        return None
    name = f"{PACKAGE}:{arch}"
    version = _candidate(name)
    if not version:
        return None
    key = f"{PACKAGE}_{arch}_{version.replace(':', '%')}"

    def make(tmp: Path) -> None:
        deb = apt.download_binary(name, version, tmp)
        unpacked = tmp / "root"
        apt.run(["dpkg-deb", "-x", str(deb), str(unpacked)], tmp, f"unpacking {deb.name}")
        (unpacked / "usr" / "lib" / triple / LIBRARY).rename(tmp / LIBRARY)
        shutil.rmtree(unpacked)
        deb.unlink()

    with locked(CACHE_DIR, key):
        return compile_cached(CACHE_DIR, key, make, marker=LIBRARY) / LIBRARY
