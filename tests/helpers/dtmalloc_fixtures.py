"""Build the dtmalloc test fixtures from ``tests/fixtures/dtmalloc/*.c``.

The tests need FreeBSD-shaped images whose contents they know exactly: an
ET_EXEC kernel-like image and ET_REL modules with real ``struct malloc_type``,
``struct sysinit`` and ``set_sysinit_set`` data, and with the relocations a
``.ko`` carries.  They are compiled here with ``clang
--target=x86_64-unknown-freebsd14.0`` and linked with ``ld.lld``, the tools
FreeBSD builds its own kernels with; each variant is a few compiler flags
(layout, release symbols, TSLOG).  A missing tool skips the caller, naming it
(``helpers.skips``).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import pytest

from generator.common.paths import REPO
from helpers.paths import DTMALLOC_FIXTURES
from helpers.skips import require_tools

TARGET = "--target=x86_64-unknown-freebsd14.0"
CFLAGS = [
    TARGET, "-O2", "-std=c99", "-nostdinc", "-ffreestanding", "-fno-common", "-fno-pic",
    "-mcmodel=kernel", "-mno-red-zone", "-mno-sse", "-D_KERNEL", "-Wall", "-Wextra", "-Werror",
]

KERNEL_SOURCES = ("kern_malloc.c", "subr_a.c", "subr_b.c")
RELEASE_14 = ("-DFIXTURE_OSRELDATE=1400097", '-DFIXTURE_VERSION="FreeBSD 14.0-RELEASE #0 fixture"')
RELEASE_13 = ("-DFIXTURE_OSRELDATE=1302001", '-DFIXTURE_VERSION="FreeBSD 13.2-RELEASE #0 fixture"')
RELEASE_12 = ("-DFIXTURE_OSRELDATE=1204000", '-DFIXTURE_VERSION="FreeBSD 12.4-RELEASE #0 fixture"')
LAYOUT_13 = ("-DFIXTURE_STAILQ=0",)
LAYOUT_12 = ("-DFIXTURE_STAILQ=0", "-DFIXTURE_MAGIC=1")

# The types of the default kernel + module, in registration order:
# (name, probe, symbol, binding, file key)
KERNEL_TYPES = [
    ("temp", "temp", "M_TEMP", "global", "kernel"),
    ("devbuf", "devbuf", "M_DEVBUF", "global", "kernel"),
    ("BIO buffer", "BIO_buffer", "M_BIOBUF", "local", "kernel"),
    ("cache", "cache", "M_CACHE", "local", "kernel"),
    ("foo bar", "foo_bar", "M_FOOBAR", "global", "kernel"),
    ("cache", "cache", "M_CACHE", "local", "kernel"),
    ("foo_bar", "foo_bar", "M_FOO_BAR", "global", "kernel"),
    ("tab\tand newline\n", "tab_and_newline_", "M_TABS", "global", "kernel"),
    ("long " + "0123456789abcdef" * 12 + " tail", ("long_" + "0123456789abcdef" * 12 + "_tail")[:191],
     "M_LONG", "global", "kernel"),
]
MODULE_TYPES = [
    ("mod_a buffers", "mod_a_buffers", "M_MODA", "global", "module"),
    ("devbuf", "devbuf", "M_MODDEV", "local", "module"),
]


WHY = "the dtmalloc fixtures are built with clang --target=x86_64-unknown-freebsd14.0 and ld.lld"


def _run(argv: List[str]) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise AssertionError(f"fixture build failed: {' '.join(argv)}\n{proc.stderr}")


def compile_objects(out: Path, sources: Sequence[str], flags: Sequence[str]) -> List[Path]:
    objs = []
    for src in sources:
        obj = out / (Path(src).stem + ".o")
        _run(["clang", *CFLAGS, *flags, "-c", str(DTMALLOC_FIXTURES / src), "-o", str(obj)])
        objs.append(obj)
    return objs


def link_kernel(out: Path, sources: Sequence[str], flags: Sequence[str]) -> Path:
    """An ET_EXEC at the amd64 kernel address, like /boot/kernel/kernel."""
    require_tools("clang", "ld.lld", why=WHY)
    out.mkdir(parents=True, exist_ok=True)
    objs = compile_objects(out, sources, flags)
    image = out / "kernel"
    _run(["ld.lld", "-m", "elf_x86_64_fbsd", "-static", "-nostdlib", "--build-id=sha1",
          "-T", str(DTMALLOC_FIXTURES / "kernel.ld"), "-o", str(image), *map(str, objs)])
    return image


def link_module(out: Path, sources: Sequence[str], flags: Sequence[str], name: str = "mod_a.ko") -> Path:
    """An ET_REL .ko, as FreeBSD's kmod.mk links amd64 modules (ld -r)."""
    require_tools("clang", "ld.lld", why=WHY)
    out.mkdir(parents=True, exist_ok=True)
    objs = compile_objects(out, sources, ("-DKLD_MODULE", *flags))
    ko = out / name
    _run(["ld.lld", "-m", "elf_x86_64_fbsd", "-r", "--build-id=sha1", "-o", str(ko), *map(str, objs)])
    return ko


@dataclass
class Fixtures:
    """Builds each variant once per test session, on demand."""

    root: Path
    cache: Dict[Tuple[str, ...], Path] = field(default_factory=dict)

    def kernel(self, *flags: str, sources: Sequence[str] = KERNEL_SOURCES) -> Path:
        key = ("kernel", *sources, *flags)
        if key not in self.cache:
            self.cache[key] = link_kernel(self.root / f"k{len(self.cache)}", sources, flags)
        return self.cache[key]

    def module(self, *flags: str, sources: Sequence[str] = ("mod_a.c",)) -> Path:
        key = ("module", *sources, *flags)
        if key not in self.cache:
            self.cache[key] = link_module(self.root / f"m{len(self.cache)}", sources, flags)
        return self.cache[key]


_SHARED: Dict[str, Fixtures] = {}


def shared(tmp_path_factory: pytest.TempPathFactory) -> Fixtures:
    """One Fixtures per session, so the test modules share builds."""
    if "fx" not in _SHARED:
        _SHARED["fx"] = Fixtures(tmp_path_factory.mktemp("dtmalloc"))
    return _SHARED["fx"]


def run_cli(*args: str) -> "subprocess.CompletedProcess[str]":
    """``python -m generator ARGS`` as a user runs it."""
    import sys

    return subprocess.run(
        [sys.executable, "-m", "generator", *args], capture_output=True, text=True, timeout=600,
        cwd=str(REPO),
    )


def dscript(*args: str) -> str:
    """The D script ``python -m generator dscript ARGS`` prints; the command must succeed."""
    res = run_cli("dscript", *args)
    assert res.returncode == 0, res.stderr
    return res.stdout


def assert_one_line_error(res: "subprocess.CompletedProcess[str]", *needles: str) -> str:
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert res.stdout == ""
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]
