"""Real C from Debian source packages, compiled with kernel flags and ``-g``: DWARF nobody here wrote.

The source-line and inline probe modes are only as good as their reading of
real compilers' DWARF, with real inlining: split ranges, clones, ``.cold``
parts, non-statement rows.  The DWARF benchmark and the tests build such
images from a Debian source package (Lua 5.4 by default: some 700 functions
and 1500 inlined copies), fetched with ``apt-get source`` into
``<cache>/debsrc/`` through a private copy of the machine's apt source list
(as ``deb-src``; ``generator.common.apt``), so the system's own lists stay
untouched.

Each build compiles the package's library sources with FreeBSD's amd64
kernel code-generation flags (frame pointers, kernel code model, no red
zone, no PIC, no stack protector or CET) and links them like a kernel: a
static ET_EXEC at the kernel's base address, with a build-id; calls into the
C library stay unresolved, as nothing runs.  Two compilers give the two
DWARF versions: gcc (DWARF 5, ``.debug_rnglists``, location views) and
clang (``-gdwarf-4``, ``.debug_ranges``).  Builds are cached by a key over
the sources, flags and compiler version.

Everything that can fail (no apt, no network, no compiler) is a one-line
UserError that names the package; the tests turn it into a skip that says so.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Tuple

from ..common import apt
from ..common.files import locked
from ..common.ccache import compile_cached, content_key
from ..common.errors import UserError
from ..common.paths import CACHE
from ..common.tools import checked, run_tool, tool_version

CACHE_DIR = CACHE / "debsrc"

# FreeBSD's amd64 kernel code generation (sys/conf/kern.mk), with -O2 -g.
KERNEL_FLAGS: Tuple[str, ...] = (
    "-O2", "-g", "-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer", "-mno-red-zone", "-mcmodel=kernel",
    "-fno-pic", "-fno-asynchronous-unwind-tables", "-fno-stack-protector", "-fcf-protection=none", "-fno-common",
    "-w",
)
LINKER_SCRIPT = """\
SECTIONS
{
	. = 0xffffffff80200000 + SIZEOF_HEADERS;
	.note.gnu.build-id : { *(.note.gnu.build-id) }
	.text : { *(.text .text.*) }
	.rodata : { *(.rodata .rodata.*) }
	. = ALIGN(0x1000);
	.data : { *(.data .data.*) }
	.bss : { *(.bss .bss.*) *(COMMON) }
}
"""


@dataclass(frozen=True)
class Project:
    """A Debian source package and which of its C files make the image."""

    package: str
    srcdir: str  # inside the unpacked upstream tree
    exclude: Tuple[str, ...]  # files with a main() or that include the others


@dataclass(frozen=True)
class Variant:
    """A compiler and its DWARF flags."""

    name: str
    cc: str
    flags: Tuple[str, ...]


PROJECTS: Dict[str, Project] = {
    "lua5.4": Project("lua5.4", "src", ("lua.c", "luac.c", "onelua.c")),
}
VARIANTS: Dict[str, Variant] = {
    "gcc": Variant("gcc", "gcc", ("-gdwarf-5",)),
    "clang-dwarf4": Variant("clang-dwarf4", "clang", ("-gdwarf-4",)),
}
DEFAULT_PROJECT = "lua5.4"


def source_tree(package: str) -> Path:
    """The unpacked upstream tree of Debian source package ``package``, fetched on first use."""
    dest = CACHE_DIR / package
    with locked(CACHE_DIR, package):
        if (dest / ".complete").is_file():
            return dest
        apt_dir = CACHE_DIR / "apt"
        apt_dir.mkdir(parents=True, exist_ok=True)
        opts = apt.private_options(package, apt_dir)
        what = f"Debian source package {package}"
        apt.run(["apt-get", *opts, "-qq", "update"], apt_dir, f"{what}: apt-get update")
        with tempfile.TemporaryDirectory(dir=CACHE_DIR, prefix=".fetch-") as tmp:
            apt.run(["apt-get", *opts, "-qq", "source", "--download-only", package], Path(tmp), f"{what}: apt-get source")
            origs = sorted(Path(tmp).glob(f"{package}_*.orig.tar.*"))
            if not origs:
                raise UserError(f"{what}: apt-get source left no upstream tarball")
            unpacked = Path(tmp) / "tree"
            with tarfile.open(origs[0]) as tar:
                tar.extractall(unpacked, filter="data")
            tops = [p for p in unpacked.iterdir() if p.is_dir()]
            top = tops[0] if len(tops) == 1 else unpacked
            if dest.exists():
                shutil.rmtree(dest)
            top.rename(dest)
            (dest / ".origin").write_text(origs[0].name + "\n")
        (dest / ".complete").touch()
    return dest


def _sources(project: Project, tree: Path) -> List[Path]:
    src = tree / project.srcdir
    return sorted(p for p in src.glob("*.c") if p.name not in project.exclude)


def _key(project: Project, variant: Variant, tree: Path, sources: List[Path]) -> str:
    """The build's content key; the sources' folder is part of it, because the DWARF names it."""
    return content_key([json.dumps({
        "origin": (tree / ".origin").read_text() if (tree / ".origin").exists() else "",
        "tree": str(tree),
        "flags": [*KERNEL_FLAGS, *variant.flags],
        "cc": tool_version(variant.cc),
        "ld": tool_version("ld.lld"),
        "script": LINKER_SCRIPT,
    }, sort_keys=True), *(p.name.encode() + b"\0" + p.read_bytes() for p in sources)])


def debian_image(package: str = DEFAULT_PROJECT, variant: str = "gcc") -> Path:
    """The kernel-style ET_EXEC with DWARF built from ``package`` with ``variant``'s compiler; built on first use."""
    project, var = PROJECTS[package], VARIANTS[variant]
    for tool in (var.cc, "ld.lld"):
        if shutil.which(tool) is None:
            raise UserError(f"{package} image: {tool} is not installed (./bootstrap installs it)")
    tree = source_tree(package)
    sources = _sources(project, tree)
    if not sources:
        raise UserError(f"Debian source package {package}: no C files in {project.srcdir}/")
    key = _key(project, var, tree, sources)
    image_name = f"{package}.elf"

    def make(work: Path) -> None:
        objects = _compile(var, sources, work, package)
        (work / "kernel.ld").write_text(LINKER_SCRIPT)
        checked(run_tool, ["ld.lld", "-static", "-nostdlib", "--build-id=sha1",
                           "--unresolved-symbols=ignore-all", "-e", "0", "-T", str(work / "kernel.ld"),
                           "-o", str(work / image_name), *map(str, objects)], f"{package} image: link", work)
        for o in objects:
            o.unlink()

    with locked(CACHE_DIR, f"build-{package}-{variant}"):  # one compile at a time: a build takes both cores
        built = compile_cached(CACHE_DIR / "build", f"{package}-{variant}-{key}", make, marker=image_name)
    return built / image_name


def _compile(var: Variant, sources: List[Path], work: Path, package: str) -> List[Path]:
    """Every source to an object, in parallel; the compiles run in the source directory so the DWARF names it."""
    def one(src: Path) -> Path:
        obj = work / (src.stem + ".o")
        checked(run_tool, [var.cc, *KERNEL_FLAGS, *var.flags, "-c", src.name, "-o", str(obj)],
                f"{package} image: {var.cc} {src.name}", src.parent)
        return obj

    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        return list(pool.map(one, sources))


def all_images(package: str = DEFAULT_PROJECT) -> List[Path]:
    """Every variant's image of ``package``, built as needed."""
    return [debian_image(package, v) for v in VARIANTS]
