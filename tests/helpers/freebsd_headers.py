"""FreeBSD's own installed headers as a test ``sys/`` tree, taken from the ziglang wheels on PyPI.

No FreeBSD tree can be downloaded where kinstkit is developed, but the PyPI
package ``ziglang`` ships FreeBSD's installed headers (``make
installincludes``: ``sys/``, ``vm/``, ``x86/``, amd64's ``machine/``, ...)
for cross-compiling: 0.15.1 those of FreeBSD 14.3, 0.17.x those of the 15
branch.  This module downloads a wheel once (``pip download``, never
installed: it is not used as a compiler), keeps it under ``<cache>/`` and
lays its headers out the way a kernel source tree has them:

======================  ==============================================
tree                    from the wheel's ``lib/libc/include/``
======================  ==============================================
``sys/``, ``vm/``, ...  ``generic-freebsd/<dir>`` (the kernel's directories only)
``x86/include/``        ``generic-freebsd/x86/``
``amd64/include/``      ``generic-freebsd/machine/``, then ``x86_64-freebsd-none/machine/`` over it
``i386/include/``       ``x86_64-freebsd-none/i386/``
======================  ==============================================

Zig edits the headers in two ways that are undone here: it deletes the
``__FreeBSD_version`` define from ``sys/param.h`` (its compiler defines the
macro), which is put back with the release's value; and it wraps what a
release added in ``#if __FreeBSD_version >= N`` blocks (each after a ``//
zig patch:`` comment) with ``N`` in its own encoding of a release
(``<major><minor:02>500``: 15.0 is 1500500), which are resolved for the
release so that the text is what that release installed.

What FreeBSD does not install stays a stand-in, each file marked as one, from
``tests/fixtures/ko/standin/``: the build machinery (``conf/kmod.mk``,
``conf/kern.mk``, ``conf/ldscript.kmod.amd64``, ``kern/vnode_if.src``,
``tools/vnode_if.awk``), the CDDL ``sys/dtrace.h``, the OpenSolaris
compatibility ``sys/cpuvar.h`` and ``sys/types.h`` (which wraps FreeBSD's
with ``#include_next``, as the real one does, so the include order of
``OPENZFS_CFLAGS`` matters here as on a real tree), ``debug_compat.h`` and
OpenZFS's ``ccompile.h``.  The
include directories of ``OPENZFS_CFLAGS`` that nothing here fills exist,
empty, because kern.mk's ``-Wmissing-include-dirs`` would otherwise fail the
build.

A wheel that cannot be downloaded skips the calling test, naming the wheel
and what it is for (``helpers.skips.missing``).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List

from generator.common.files import locked
from helpers.paths import HEADER_CACHE, KO_STANDIN
from helpers.skips import missing

# Bumped when the layout below changes in a way the stand-ins' contents do not show.
_RECIPE = "1"
_WHEEL_PLATFORM = "manylinux_2_12_x86_64"  # the headers are the same in every platform's wheel
_INCLUDE = "ziglang/lib/libc/include/"
_GENERIC = "generic-freebsd"
_AMD64 = "x86_64-freebsd-none"

# Top-level directories of the installed headers that a kernel tree also has
# under the same name (userland-only ones -- arpa, rpc, ssp, xlocale, ... --
# and the loose libc headers are left out).
KERNEL_DIRS = (
    "bsm", "cam", "crypto", "dev", "fs", "geom", "isofs", "net", "net80211", "netgraph", "netinet", "netinet6",
    "netipsec", "netlink", "netpfil", "netsmb", "nfs", "nfsclient", "nfsserver", "security", "sys", "teken", "ufs",
    "vm",
)

# The stand-ins, relative to tests/fixtures/ko/standin/ and to the tree.
STANDINS = (
    "conf/kmod.mk", "conf/kern.mk", "conf/ldscript.kmod.amd64", "kern/vnode_if.src", "tools/vnode_if.awk",
    "cddl/contrib/opensolaris/uts/common/sys/dtrace.h", "cddl/compat/opensolaris/sys/cpuvar.h",
    "cddl/compat/opensolaris/sys/types.h", "cddl/compat/opensolaris/sys/debug_compat.h", "contrib/openzfs/include/os/freebsd/spl/sys/ccompile.h",
)
EMPTY_DIRS = ("contrib/ck/include", "contrib/openzfs/include/os/freebsd/zfs")

_ZIG_PARAM = "/* zig patch: __FreeBSD_version is defined by the compiler */"
_ZIG_GATE = re.compile(r"^#if __FreeBSD_version (>=|<) (\d+)$")


@dataclass(frozen=True)
class HeaderRelease:
    """A FreeBSD release whose installed headers a ziglang wheel carries."""

    name: str  # "14.3"
    ziglang: str  # the wheel's version
    osreldate: int  # __FreeBSD_version of the release (sys/sys/param.h), put back into param.h
    m_version: int  # M_VERSION of the release's sys/sys/malloc.h: checked, so a wrong wheel is noticed

    @property
    def major(self) -> int:
        return self.osreldate // 100000

    @property
    def triple(self) -> str:
        return f"x86_64-unknown-freebsd{self.name}"

    def zig_version(self) -> int:
        """The release as zig's header patches encode it: <major><minor:02>500."""
        major, minor = (int(x) for x in self.name.split("."))
        return major * 100000 + minor * 1000 + 500


RELEASES: Dict[str, HeaderRelease] = {
    "14.3": HeaderRelease("14.3", "0.15.1", 1403000, 2020110501),
    "15.0": HeaderRelease("15.0", "0.17.1", 1500068, 2024073001),
}


def wheel(rel: HeaderRelease) -> Path:
    """The ziglang wheel carrying ``rel``'s headers, downloaded once into the cache; else skip naming it."""
    where = HEADER_CACHE / "wheels"
    with locked(HEADER_CACHE, f"ziglang-{rel.ziglang}"):
        found = sorted(where.glob(f"ziglang-{rel.ziglang}-*.whl"))
        if found:
            return found[0]
        where.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=HEADER_CACHE, prefix=".download-") as tmp:
            argv = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
                    "--only-binary=:all:", "--platform", _WHEEL_PLATFORM, "--timeout", "60",
                    f"ziglang=={rel.ziglang}", "-d", tmp]
            try:
                proc = subprocess.run(argv, capture_output=True, text=True, timeout=900)
                failed = proc.returncode != 0
                why = next((ln for ln in proc.stderr.splitlines() if ln.startswith("ERROR")), proc.stderr.strip())
            except subprocess.TimeoutExpired:
                failed, why = True, "no answer within 900 s"
            got = sorted(Path(tmp).glob("ziglang-*.whl"))
            if failed or not got:
                missing(f"ziglang=={rel.ziglang} wheel not downloadable from PyPI (pip download: "
                        f"{why[:200] or 'no wheel'}): FreeBSD {rel.name}'s installed headers come from it")
            os.replace(got[0], where / got[0].name)
        return where / got[0].name


def _extract(whl: Path, dest: Path) -> None:
    """The wheel's FreeBSD generic and amd64 headers into ``dest`` (``generic-freebsd/``, ``x86_64-freebsd-none/``)."""
    with zipfile.ZipFile(whl) as z:
        for info in z.infolist():
            if info.is_dir() or not info.filename.startswith(_INCLUDE):
                continue
            rel = info.filename[len(_INCLUDE):]
            if rel.split("/", 1)[0] not in (_GENERIC, _AMD64) or ".." in rel.split("/"):
                continue
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(z.read(info))


def _restore(sysdir: Path, rel: HeaderRelease) -> List[str]:
    """Undo zig's edits for ``rel`` in the tree ``sysdir``: the __FreeBSD_version define, and its version
    gates; what was done, as lines."""
    param = sysdir / "sys" / "param.h"
    text = param.read_text()
    if text.count(_ZIG_PARAM) != 1:
        raise AssertionError(f"{param}: zig's marker for the deleted __FreeBSD_version define is not there once")
    param.write_text(text.replace(_ZIG_PARAM, f"#define __FreeBSD_version {rel.osreldate}\t/* restored */"))
    done = [f"sys/param.h: __FreeBSD_version {rel.osreldate} restored"]
    have = rel.zig_version()
    for path in sorted(sysdir.rglob("*.h")):
        lines = path.read_text(errors="surrogateescape").split("\n")
        changed = False
        for i in range(1, len(lines)):
            m = _ZIG_GATE.match(lines[i])
            if m and lines[i - 1].startswith("// zig patch:"):
                holds = have >= int(m.group(2)) if m.group(1) == ">=" else have < int(m.group(2))
                lines[i] = f"#if {int(holds)}\t/* zig's gate, resolved for {rel.name} */"
                changed = True
        if changed:
            path.write_text("\n".join(lines), errors="surrogateescape")
            done.append(f"{path.relative_to(sysdir)}: zig's version gates resolved for {rel.name}")
    return done


def _layout(include: Path, sysdir: Path) -> None:
    """The installed headers in a kernel tree's places (module docstring)."""
    generic, amd64 = include / _GENERIC, include / _AMD64
    for d in KERNEL_DIRS:
        if (generic / d).is_dir():
            shutil.copytree(generic / d, sysdir / d)
    shutil.copytree(generic / "x86", sysdir / "x86" / "include")
    shutil.copytree(generic / "machine", sysdir / "amd64" / "include")
    shutil.copytree(amd64 / "machine", sysdir / "amd64" / "include", dirs_exist_ok=True)
    shutil.copytree(amd64 / "i386", sysdir / "i386" / "include")


def _key() -> str:
    """What the tree is made of besides the wheel: the recipe and the stand-ins' contents."""
    h = hashlib.sha256(_RECIPE.encode())
    for rel in STANDINS:
        h.update(rel.encode() + b"\0" + (KO_STANDIN / rel).read_bytes())
    return h.hexdigest()[:12]


def sys_tree(name: str) -> Path:
    """The test ``sys/`` tree of FreeBSD ``name`` ("14.3" or "15.0"), built once per wheel and stand-ins."""
    rel = RELEASES[name]
    whl = wheel(rel)
    root = HEADER_CACHE / f"{name}-{_key()}"
    sysdir = root / "sys"
    with locked(HEADER_CACHE, f"tree-{name}"):
        if (root / ".complete").is_file():
            return sysdir
        tmp = Path(tempfile.mkdtemp(dir=HEADER_CACHE, prefix=f".{name}-"))
        try:
            _extract(whl, tmp / "include")
            _layout(tmp / "include", tmp / "sys")
            notes = _restore(tmp / "sys", rel)
            malloc_h = (tmp / "sys" / "sys" / "malloc.h").read_text()
            if not re.search(rf"^#define\s+M_VERSION\s+{rel.m_version}\b", malloc_h, re.M):
                raise AssertionError(f"{whl.name}: sys/malloc.h is not FreeBSD {name}'s (M_VERSION {rel.m_version})")
            for standin in STANDINS:
                dest = tmp / "sys" / standin
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(KO_STANDIN / standin, dest)
            for d in EMPTY_DIRS:
                (tmp / "sys" / d).mkdir(parents=True, exist_ok=True)
            (tmp / "README").write_text(
                f"FreeBSD {name} installed headers from {whl.name}, laid out as a kernel sys/ tree by "
                "tests/helpers/freebsd_headers.py; stand-ins (marked as such) for what FreeBSD does not install:\n"
                + "".join(f"  {s}\n" for s in STANDINS) + "".join(f"{n}\n" for n in notes))
            shutil.rmtree(tmp / "include")
            for old in HEADER_CACHE.glob(f"{name}-*"):  # trees of other stand-ins or recipes
                shutil.rmtree(old, ignore_errors=True)
            os.rename(tmp, root)
            (root / ".complete").touch()
        finally:
            if tmp.exists():
                shutil.rmtree(tmp)
    return sysdir
