"""Real inputs that nobody on this project wrote, fetched once and cached.

Tests built only on binaries we compiled ourselves prove only that we agree
with ourselves.  These helpers hand tests third-party images instead: the
Debian kernel's modules (ET_REL, ~4000 of them), its ``vmlinux`` with symbols
(ET_EXEC, from the ``-dbg`` package) and system shared libraries (ET_DYN).  Downloads are cached under ``<cache>/corpus/`` (gitignored).

When an input cannot be had (no apt, no network) the helper skips the test
(``helpers.skips.missing``) with a reason that names the missing input, so a
skipped test says exactly what it did not check; a missing system library is
``helpers.skips.require_system_library``'s to report.
"""

from __future__ import annotations

import lzma
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import List, Optional

from generator.common.files import locked
from helpers.paths import CORPUS_CACHE
from helpers.skips import missing

META_PACKAGE = "linux-image-amd64"
LIBRARY_DIRS = ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/lib64", "/usr/lib")


def _run(cmd: List[str], cwd: Optional[Path] = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, LC_ALL="C", DEBIAN_FRONTEND="noninteractive")
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)


def _first_line(proc: subprocess.CompletedProcess) -> str:
    text = (proc.stderr or proc.stdout or "").strip()
    lines = [line for line in text.splitlines() if line.startswith(("E:", "error"))] or text.splitlines()
    return lines[0] if lines else f"exit status {proc.returncode}"


def kernel_package() -> str:
    """The versioned package ``linux-image-amd64`` depends on (linux-image-<ver>-amd64)."""
    if shutil.which("apt-cache") is None:
        missing("linux-image package not downloadable: apt-cache is not installed (not a Debian system)")
    name = _depends_on_image()
    if name is None and _apt_update():
        name = _depends_on_image()
    if name is None:
        missing(f"linux-image package not downloadable: apt-cache knows no dependency of {META_PACKAGE}")
    return name


def _depends_on_image() -> Optional[str]:
    proc = _run(["apt-cache", "depends", META_PACKAGE])
    for line in proc.stdout.splitlines():
        key, _, value = line.strip().lstrip("|").partition(": ")
        if key == "Depends" and value.startswith("linux-image-") and value != META_PACKAGE:
            return value.strip()
    return None


def _apt_update() -> bool:
    """Refresh apt's lists once, when we are root; True when it worked."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return False
    return _run(["apt-get", "update", "-qq"]).returncode == 0


def _download(package: str, into: Path) -> Path:
    """``apt-get download`` one package into ``into``; skip on failure."""
    if shutil.which("apt-get") is None:
        missing(f"linux-image package not downloadable: apt-get is not installed ({package})")
    proc = _run(["apt-get", "download", package], cwd=into)
    if proc.returncode != 0 and _apt_update():
        proc = _run(["apt-get", "download", package], cwd=into)
    debs = sorted(into.glob(f"{package}_*.deb"))
    if proc.returncode != 0 or not debs:
        missing(f"linux-image package not downloadable: apt-get download {package}: {_first_line(proc)}")
    return debs[0]


def _extract(deb: Path, dest: Path) -> None:
    """``dpkg -x`` into a temporary directory, then rename: never half a tree."""
    if shutil.which("dpkg") is None:
        missing(f"linux-image package not extractable: dpkg is not installed ({deb.name})")
    tmp = Path(tempfile.mkdtemp(dir=CORPUS_CACHE, prefix=".extract-"))
    try:
        proc = _run(["dpkg", "-x", str(deb), str(tmp)])
        if proc.returncode != 0:
            missing(f"linux-image package not extractable: dpkg -x {deb.name}: {_first_line(proc)}")
        _decompress_modules(tmp)
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def _decompress_modules(root: Path) -> None:
    """Newer Debian kernels ship ``.ko.xz``; tests want plain ELF files."""
    for packed in root.rglob("*.ko.xz"):
        packed.with_suffix("").write_bytes(lzma.decompress(packed.read_bytes()))
        packed.unlink()


def kernel_tree() -> Path:
    """The extracted linux-image package (downloaded on first use)."""
    package = kernel_package()
    dest = CORPUS_CACHE / package
    with locked(CORPUS_CACHE, package):
        if not (dest / ".complete").exists():
            with tempfile.TemporaryDirectory(dir=CORPUS_CACHE, prefix=".download-") as tmp:
                deb = _download(package, Path(tmp))
                _extract(deb, dest)
            (dest / ".complete").touch()
    return dest


def debian_vmlinux() -> Path:
    """The Debian kernel's ``vmlinux`` with its symbols, from the ``-dbg`` package (downloaded on first use).

    The package is large (about 860 MB); only the one file is kept, under
    ``<cache>/corpus/<package>/``, and the ``.deb`` is deleted once it is out.
    """
    package = kernel_package() + "-dbg"
    dest = CORPUS_CACHE / package
    with locked(CORPUS_CACHE, package):
        found = sorted(dest.glob("vmlinux-*"))
        if not (dest / ".complete").exists() or not found:
            if shutil.which("dpkg") is None or shutil.which("tar") is None:
                missing(f"{package} not extractable: dpkg or tar is not installed")
            with tempfile.TemporaryDirectory(dir=CORPUS_CACHE, prefix=".download-") as tmp:
                deb = _download(package, Path(tmp))
                pipe = f"dpkg --fsys-tarfile {shlex.quote(str(deb))} | tar -x -C {shlex.quote(tmp)} --wildcards " \
                       "'./usr/lib/debug/boot/vmlinux-*'"
                proc = _run(["sh", "-c", pipe])
                got = sorted(Path(tmp).glob("usr/lib/debug/boot/vmlinux-*"))
                if proc.returncode != 0 or not got:
                    missing(f"{package} has no usr/lib/debug/boot/vmlinux-*: {_first_line(proc)}")
                dest.mkdir(parents=True, exist_ok=True)
                os.replace(got[0], dest / got[0].name)
            (dest / ".complete").touch()
            found = sorted(dest.glob("vmlinux-*"))
    return found[0]


def debian_kernel_modules(limit: Optional[int] = None) -> List[Path]:
    """The Debian kernel's ``.ko`` files, sorted by path; the first ``limit``."""
    tree = kernel_tree()
    kos = sorted(tree.rglob("*.ko"))
    if not kos:
        missing(f"linux-image package has no .ko modules under {tree}")
    return kos[:limit] if limit else kos


def find_system_library(name: str) -> Optional[Path]:
    """A 64-bit ELF shared library of this system (e.g. ``libcrypto.so.3``), resolved; None when there is none."""
    for d in LIBRARY_DIRS:
        p = Path(d) / name
        if p.exists():
            real = p.resolve()
            with open(real, "rb") as f:
                head = f.read(5)
            if head[:4] == b"\x7fELF" and head[4] == 2:
                return real
    return None
