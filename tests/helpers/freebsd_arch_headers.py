"""FreeBSD 14.3's installed headers for arm64 and riscv, from the ziglang wheel on PyPI, as a kernel include tree.

No FreeBSD tree can be downloaded where kinstkit is developed, but the PyPI
package ``ziglang`` 0.15.1 ships FreeBSD 14.3's installed headers for
cross-compiling: the machine-independent ones (``generic-freebsd/``: sys/,
vm/, ...) and each architecture's ``machine/`` (``aarch64-freebsd-none/``,
``riscv64-freebsd-none/``).  The wheel is downloaded once with ``pip
download`` (never installed; the same cache the amd64 header tests use) and
laid out as a kernel build sees its headers: ``<tree>/sys``, ``<tree>/vm``
... and ``<tree>/machine`` for the ISA (bsd.kmod.mk's ``machine`` link),
the architecture's files over the generic ones.
Zig deletes the ``__FreeBSD_version`` define from sys/param.h (its compiler
defines the macro); it is put back with 14.3's value.

``sys_tree(arch)`` makes of that include tree what a kernel module build
sees as ``$SYSDIR``, the way ``helpers.freebsd_headers`` does for amd64: the
kernel's directories (``sys/``, ``vm/``, ... linked, not copied) and the
same stand-ins, each marked as one, for what FreeBSD does not install (the
CDDL ``sys/dtrace.h``, the OpenSolaris compatibility headers, OpenZFS's
``ccompile.h``); ``prepare_objdir()`` gives the object directory kmod.mk
would (the ``machine`` link, an empty ``opt_global.h``), so that
``helpers.kmod.kmod_cflags`` gives bsd.kmod.mk's compile line for the whole
module, kinst.c included.  A wheel that cannot be downloaded skips the
caller, naming it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from generator.common.paths import CACHE
from helpers.skips import missing

ZIGLANG = "0.15.1"  # carries FreeBSD 14.3's installed headers
OSRELDATE = 1403000
HEADER_CACHE = CACHE / "freebsd-headers"
_INCLUDE = "ziglang/lib/libc/include/"
_MACHINE = {"arm64": "aarch64-freebsd-none", "riscv": "riscv64-freebsd-none"}
_ZIG_PARAM = "/* zig patch: __FreeBSD_version is defined by the compiler */"


def wheel() -> Path:
    """The ziglang wheel, downloaded once; else skip naming it."""
    where = HEADER_CACHE / "wheels"
    where.mkdir(parents=True, exist_ok=True)
    with open(where / f".ziglang-{ZIGLANG}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = sorted(where.glob(f"ziglang-{ZIGLANG}-*.whl"))
        if found:
            return found[0]
        with tempfile.TemporaryDirectory(dir=HEADER_CACHE) as tmp:
            proc = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                                   "--only-binary=:all:", "--platform", "manylinux_2_12_x86_64",
                                   f"ziglang=={ZIGLANG}", "-d", tmp], capture_output=True, text=True, timeout=900)
            got = sorted(Path(tmp).glob("ziglang-*.whl"))
            if proc.returncode != 0 or not got:
                missing(f"ziglang=={ZIGLANG} wheel not downloadable from PyPI: FreeBSD 14.3's headers come from it")
            shutil.move(str(got[0]), where / got[0].name)
            return where / got[0].name


def include_tree(arch: str) -> Path:
    """The include directory of FreeBSD 14.3's headers with ``machine/`` for ``arch``."""
    root = HEADER_CACHE / f"14.3-{arch}-include"
    HEADER_CACHE.mkdir(parents=True, exist_ok=True)
    with open(HEADER_CACHE / f".14.3-{arch}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (root / ".complete").exists():
            return root
        tmp = Path(tempfile.mkdtemp(dir=HEADER_CACHE, prefix=f".{arch}-"))
        try:
            with zipfile.ZipFile(wheel()) as z:
                # generic first, the architecture's over it: zig keeps in generic-freebsd/machine/ one
                # architecture's copy of the machine headers the others override.
                for layer in ("generic-freebsd", _MACHINE[arch]):
                    for info in z.infolist():
                        rel = info.filename[len(_INCLUDE):].split("/", 1)
                        if (info.is_dir() or not info.filename.startswith(_INCLUDE) or len(rel) != 2
                                or rel[0] != layer or ".." in rel[1].split("/")):
                            continue
                        dest = tmp / rel[1]  # sys/..., vm/..., machine/... (and arm/... for arm64)
                        dest.parent.mkdir(parents=True, exist_ok=True)
                        dest.write_bytes(z.read(info))
            param = tmp / "sys" / "param.h"
            text = param.read_text()
            if text.count(_ZIG_PARAM) != 1:
                raise AssertionError(f"{param}: zig's marker for the deleted __FreeBSD_version is not there once")
            param.write_text(text.replace(_ZIG_PARAM, f"#define __FreeBSD_version {OSRELDATE}\t/* restored */"))
            (tmp / ".complete").touch()
            if root.exists():
                shutil.rmtree(root)
            tmp.rename(root)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp)
    return root


def _standin_key() -> str:
    """The stand-ins' contents, so that a changed stand-in makes a new tree."""
    from helpers.freebsd_headers import STANDINS
    from helpers.paths import KO_STANDIN

    h = hashlib.sha256(b"arch-sys-2")
    for rel in STANDINS:
        h.update(rel.encode() + b"\0" + (KO_STANDIN / rel).read_bytes())
    return h.hexdigest()[:12]


def sys_tree(arch: str) -> Path:
    """FreeBSD 14.3's headers for ``arch`` as a kernel ``sys/`` tree with the amd64 tree's stand-ins."""
    from helpers.freebsd_headers import EMPTY_DIRS, KERNEL_DIRS, STANDINS
    from helpers.paths import KO_STANDIN

    include = include_tree(arch)
    root = HEADER_CACHE / f"14.3-{arch}-sys-{_standin_key()}"
    with open(HEADER_CACHE / f".14.3-{arch}-sys.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (root / ".complete").exists():
            return root / "sys"
        tmp = Path(tempfile.mkdtemp(dir=HEADER_CACHE, prefix=f".{arch}-sys-"))
        try:
            sysdir = tmp / "sys"
            sysdir.mkdir()
            for d in KERNEL_DIRS:
                if (include / d).is_dir():
                    (sysdir / d).symlink_to(include / d)
            # Where a source tree keeps the ISA's machine/ headers, and kmod.mk's machine link points.
            (sysdir / arch).mkdir()
            (sysdir / arch / "include").symlink_to(include / "machine")
            for standin in STANDINS:
                dest = sysdir / standin
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(KO_STANDIN / standin, dest)
            for d in EMPTY_DIRS:
                (sysdir / d).mkdir(parents=True, exist_ok=True)
            for old in HEADER_CACHE.glob(f"14.3-{arch}-sys-*"):
                shutil.rmtree(old, ignore_errors=True)
            os.rename(tmp, root)
            (root / ".complete").touch()
        finally:
            if tmp.exists():
                shutil.rmtree(tmp)
    return root / "sys"


def prepare_objdir(arch: str, objdir: Path) -> None:
    """The object directory as kmod.mk fills it for ``arch``: the ``machine`` link to the ISA's headers
    and an empty opt_global.h (no KERNBUILDDIR)."""
    objdir.mkdir(parents=True, exist_ok=True)
    if not (objdir / "machine").exists():
        (objdir / "machine").symlink_to(include_tree(arch) / "machine")
    (objdir / "opt_global.h").write_text("")
