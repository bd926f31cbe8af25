"""The embedded default sample kernel image.

kinstkit needs an amd64 kernel image whenever the user names none, and the
tests need one that is always there and whose contents are known.  A real
FreeBSD kernel is large, licensed separately and not on every machine, and a
checked-in binary would be opaque and tied to one toolchain.  So the sample is
a small freestanding C and assembly code base under ``samples/kernel/``,
compiled on first use with the FreeBSD amd64 kernel flags (frame pointers,
kernel code model, no red zone, no FPU) so that its code looks like a kernel's.

The result is cached under ``<cache>/sample/<key>/kernel``.  ``key`` is a
short sha256 over the sources, the exact command lines and the tools'
``--version`` output: a changed source, flag or compiler gets a new key, and a
cache hit compiles nothing.

Toolchains, in order of preference:

* ``clang --target=x86_64-unknown-freebsd14.0`` with ``ld.lld -m
  elf_x86_64_fbsd`` -- what FreeBSD itself builds its kernel with, and the
  image then carries the FreeBSD OSABI;
* ``gcc`` with GNU ``ld`` -- the fallback when clang or ld.lld is missing.

The environment variable ``KINSTKIT_SAMPLE_CC=clang`` or ``=gcc`` forces one of
them (it is part of the key through the command lines).  That is how the gcc
path is exercised on machines that also have clang.

The image carries the constants a real release compiles into its kernel --
``osreldate`` (``__FreeBSD_version``), the ``version`` string and the
``ks_version`` of its malloc types (``M_VERSION``) -- so that modules built
against that release's ``sys/`` tree compile (dtmalloc's CTASSERTs) and pass
check-ko's kernel version check against it.  FreeBSD 14.3 by default;
``KINSTKIT_SAMPLE_RELEASE=15.0`` (or ``sample --release``) selects 15.0.  The
values reach the C as ``-D`` flags, so the release is part of the key.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from .. import isa
from ..common.ccache import compile_cached, content_key
from ..common.errors import UserError
from ..common.paths import CACHE, SAMPLES
from ..common.tools import checked, run_tool, tool_version

SOURCE_DIR = SAMPLES / "kernel"
BUILD_DIR = CACHE / "sample"
LINKER_SCRIPT = "kernel.ld"

# Where the first segment of an amd64 kernel is linked (KERNBASE plus the
# 2 MiB load offset); kernel.ld places the ELF headers there.
TEXT_BASE = 0xFFFFFFFF80200000

ENV_TOOLCHAIN = "KINSTKIT_SAMPLE_CC"
ENV_RELEASE = "KINSTKIT_SAMPLE_RELEASE"


@dataclass(frozen=True)
class SampleRelease:
    """The constants a FreeBSD release compiles into its kernel, as the sample carries them."""

    name: str  # "14.3"
    osreldate: int  # __FreeBSD_version of the release (sys/sys/param.h)
    m_version: int  # M_VERSION of the release (sys/sys/malloc.h): every MALLOC_DEFINE's ks_version

    def cflags(self) -> List[str]:
        """The -D flags kern_malloc_types.c reads them from."""
        return [f"-DSAMPLE_OSRELDATE={self.osreldate}", f"-DSAMPLE_M_VERSION={self.m_version}UL",
                f'-DSAMPLE_RELEASE="{self.name}"']


# M_VERSION is 2020110501 on every 14.x branch and 2024073001 on 15.x.
SAMPLE_RELEASES: Dict[str, SampleRelease] = {
    "14.3": SampleRelease("14.3", 1403000, 2020110501),
    "15.0": SampleRelease("15.0", 1500068, 2024073001),
}
DEFAULT_RELEASE = "14.3"


def sample_release(name: Optional[str] = None) -> SampleRelease:
    """The release the sample is built for: ``name``, else ``$KINSTKIT_SAMPLE_RELEASE``, else 14.3."""
    chosen = name or os.environ.get(ENV_RELEASE) or DEFAULT_RELEASE
    if chosen not in SAMPLE_RELEASES:
        where = f"{ENV_RELEASE}={chosen!r}" if not name else f"--release {chosen}"
        raise UserError(f"{where}: the sample kernel is built for FreeBSD {' or '.join(SAMPLE_RELEASES)}")
    return SAMPLE_RELEASES[chosen]

# Bumped when the build recipe changes in a way the command lines do not show.
_RECIPE_VERSION = "1"

# The ISA the sample kernel's C is written for (its trap frame, its asm).
SAMPLE_ISA = "amd64"
_KMOD = isa.by_name(SAMPLE_ISA).kmod

# FreeBSD's kernel flags (sys/conf/kern.mk, kern.pre.mk) for the sample's ISA,
# minus the ones that would change what the analysis sees: no
# -fstack-protector (the image has no __stack_chk_guard) and no -mretpoline
# (indirect calls stay real calls).  -fno-stack-protector and
# -fcf-protection=none are spelled out because some distributions' compilers
# turn those features on by default, and an endbr64 would move "push %rbp"
# away from offset 0 of every function.
_CFLAGS: Tuple[str, ...] = (
    "-O2",
    "-std=gnu17",
    "-nostdinc",
    "-ffreestanding",
    "-fwrapv",
    "-fno-common",
    "-fno-omit-frame-pointer",
    "-mno-omit-leaf-frame-pointer",
    *_KMOD.cflags,
    "-fno-pic",
    "-fno-stack-protector",
    "-fcf-protection=none",
    "-D_KERNEL",
    "-g",
    "-Wall",
    "-Werror",
)
_CLANG_ONLY: Tuple[str, ...] = (f"--target={_KMOD.clang_arch}-unknown-freebsd14.0", *_KMOD.clang_cflags)

# GCC's post-reload scheduler moves argument copies in between "push %rbp" and
# "mov %rsp,%rbp" (clang never does), which would make the fallback image's
# prologues differ from the clang image's that the tests and docs describe.
_GCC_ONLY: Tuple[str, ...] = ("-fno-schedule-insns2",)

_LDFLAGS: Tuple[str, ...] = ("-static", "-nostdlib", "--build-id=sha1")


@dataclass(frozen=True)
class Toolchain:
    """A C compiler and the linker that goes with it, as resolved paths."""

    name: str  # "clang" or "gcc"
    cc: str
    ld: str

    def cflags(self) -> List[str]:
        """Compiler flags: the common set plus the toolchain's own (see _CLANG_ONLY, _GCC_ONLY)."""
        extra = _CLANG_ONLY if self.name == "clang" else _GCC_ONLY
        return [*extra, *_CFLAGS]

    def ldflags(self) -> List[str]:
        """Linker flags; ld.lld gets the FreeBSD emulation (GNU ld builds usually lack it, and take the
        objects' own)."""
        emulation = ["-m", _KMOD.ld_emulation] if self.name == "clang" else []
        return [*emulation, *_LDFLAGS]


# name -> (compiler, linker), in order of preference.
_TOOLCHAINS: Dict[str, Tuple[str, str]] = {
    "clang": ("clang", "ld.lld"),
    "gcc": ("gcc", "ld"),
}


def find_toolchain(name: Optional[str] = None) -> Toolchain:
    """Resolve the toolchain to build with.

    ``name`` (or, when None, ``$KINSTKIT_SAMPLE_CC``) forces one; otherwise the
    first complete one in order of preference.  A missing tool raises
    UserError naming it, so callers (and test skips) can say what to install.
    """
    if name is None:
        name = os.environ.get(ENV_TOOLCHAIN) or None
    if name is not None and name not in _TOOLCHAINS:
        raise UserError(f"{ENV_TOOLCHAIN}={name!r}: expected one of {', '.join(_TOOLCHAINS)}")
    candidates = [name] if name is not None else list(_TOOLCHAINS)
    missing: List[str] = []
    for candidate in candidates:
        cc, ld = _TOOLCHAINS[candidate]
        cc_path, ld_path = shutil.which(cc), shutil.which(ld)
        if cc_path and ld_path:
            return Toolchain(candidate, cc_path, ld_path)
        missing += [tool for tool, path in ((cc, cc_path), (ld, ld_path)) if path is None]
    if name is not None:
        raise UserError(f"cannot build the sample kernel with the {name} toolchain: missing {', '.join(missing)}")
    raise UserError(
        "cannot build the sample kernel: found neither clang + ld.lld nor gcc + ld"
        f" (missing: {', '.join(missing)})"
    )


def _sources() -> List[Path]:
    """The files the image is built from, in link order: assembly (btext) first."""
    files = [p for p in SOURCE_DIR.iterdir() if p.is_file() and p.suffix in (".c", ".h", ".S", ".ld")]
    return sorted(files, key=lambda p: (p.suffix != ".S", p.name))


def _commands(tc: Toolchain, rel: SampleRelease, srcdir: str, objdir: str) -> List[List[str]]:
    """Every command of the build, in order: one compile per .c/.S, then the link.

    The compiles run in ``srcdir`` with relative source names, so the debug
    info names the real sources rather than a temporary directory.  Called
    with placeholder directories to form the cache key, so that the key does
    not depend on where the repository or the temporary directory is.
    """
    objects: List[str] = []
    commands: List[List[str]] = []
    for src in _sources():
        if src.suffix not in (".c", ".S"):
            continue
        obj = f"{objdir}/{src.stem}.o"
        objects.append(obj)
        commands.append([tc.cc, *tc.cflags(), *rel.cflags(), "-c", src.name, "-o", obj])
    commands.append(
        [tc.ld, *tc.ldflags(), "-T", f"{srcdir}/{LINKER_SCRIPT}", "-o", f"{objdir}/kernel", *objects]
    )
    return commands


def _cache_key(tc: Toolchain, rel: SampleRelease) -> str:
    """The content key over recipe, tool versions, command lines (the release's among them) and sources, and
    the sources' folder: the DWARF names it, so a kernel built from another checkout points elsewhere."""
    material = {
        "recipe": _RECIPE_VERSION,
        "sources": str(SOURCE_DIR),
        "toolchain": tc.name,
        "versions": [tool_version(tc.cc), tool_version(tc.ld)],
        "commands": _commands(tc, rel, "$SRC", "$OBJ"),
    }
    return content_key([json.dumps(material, sort_keys=True), *(p.name.encode() + b"\0" + p.read_bytes()
                                                                 for p in _sources())])


def _build(tc: Toolchain, rel: SampleRelease, objdir: Path, final: Path) -> None:
    """Compile and link into ``objdir``.

    Also leaves ``commands.sh`` next to the kernel: the same commands as they
    would run against ``final``, so that a person debugging the sample can
    rerun them by hand.
    """
    for argv in _commands(tc, rel, str(SOURCE_DIR), str(objdir)):
        what = argv[argv.index("-c") + 1] if "-c" in argv else "link"
        checked(run_tool, argv, f"sample kernel ({what})", SOURCE_DIR)
    script = [f"cd {shlex.quote(str(SOURCE_DIR))}"]
    script += [shlex.join(c) for c in _commands(tc, rel, str(SOURCE_DIR), str(final))]
    (objdir / "commands.sh").write_text("".join(line + "\n" for line in script))


def sample_kernel(*, rebuild: bool = False, release: Optional[str] = None) -> Path:
    """Path of the sample kernel image, building it first if it is not cached.

    ``release`` picks the FreeBSD release whose constants it carries
    (``sample_release``).  ``rebuild`` forces a fresh build even on a cache hit.  The build happens in
    a temporary directory next to the cache and is renamed into place only
    once complete, so an interrupted build leaves nothing half-written.
    Raises UserError when no toolchain is found or a tool fails.
    """
    tc = find_toolchain()
    rel = sample_release(release)
    key = _cache_key(tc, rel)
    final = BUILD_DIR / key
    built = compile_cached(BUILD_DIR, key, lambda tmp: _build(tc, rel, tmp, final), marker="kernel", rebuild=rebuild)
    return built / "kernel"
