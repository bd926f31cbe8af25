"""The offline checks that need no ``sys/`` tree: the portable cores, compiled, linked and resolved.

Each provider's core, table and target data are written to compile without
FreeBSD's headers: the hand-written core (in the module directory or its ISA
folder) and the generated files beside it.  Compiling them with gcc *and*
clang under the kernel's flags and ``-Werror``, linking the clang objects
with ``ld.lld -r`` and finding every symbol they leave undefined among the
target kernel's globals catches most mistakes a module build would -- on any
host, in CI without a tree.  A stamp skips the work when the sources, their
headers, the flags, tools and kernel exports are the same as when it last
passed.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Iterable, List, Sequence, Set, Tuple

from ..common.errors import UserError
from ..common.files import sha256_file, write_json
from ..common.tools import Runner, checked, tool_version
from ..isa.contract import Isa
from .kmodflags import portable_cflags
from .manifest import RECIPE, read_manifest, stamp_key
from ..providers.contract import Provider
from ..image import open_image


def _compilers(isa: Isa) -> Tuple[str, ...]:
    """gcc for the ISA (the host's, or its cross gcc) and clang, which takes the ISA as its --target."""
    return (f"{isa.oracle.cross_prefix}gcc", "clang")


def portable_checks(provider: Provider, isa: Isa, srcdir: Path, workdir: Path, kernel_exports: Iterable[str],
                    run: Runner) -> List[str]:
    """Compile the portable core, table and target data with gcc and clang, link the clang objects
    with ``ld.lld -r`` and check that every symbol they leave undefined is a kernel
    global.  Returns the lines to print; failures raise UserError."""
    lines = []
    exports = set(kernel_exports)
    sources = [srcdir / n for n in provider.portable(isa.name)]
    includes = [srcdir / d for d in provider.includes(isa.name)]
    every = _compilers(isa)
    headers = sorted(h for d in includes for h in d.glob("*.h"))
    material = {
        "recipe": RECIPE, "sources": [sha256_file(s) for s in sources],
        "headers": {str(h.relative_to(srcdir)): sha256_file(h) for h in headers},
        "flags": {c: portable_cflags(c, isa) for c in every},
        "tools": [tool_version(t) for t in (*every, "ld.lld")],
        "exports": hashlib.sha256("\n".join(sorted(exports)).encode()).hexdigest(),
    }
    key = stamp_key(material)
    stamp = workdir / "portable.json"
    old = read_manifest(stamp)
    if old and old.get("key") == key:
        return [f"{provider.name}: portable core unchanged since it compiled with gcc and clang and linked cleanly"]
    compilers = [c for c in every if shutil.which(c)]
    if not compilers:
        raise UserError(f"neither {' nor '.join(every)} is installed; the portable cores cannot be compiled")
    clang_objs = _compile(provider, isa, sources, includes, workdir, compilers, run)
    lines.append(f"{provider.name}: portable {', '.join(provider.portable(isa.name))} compile with {' and '.join(compilers)} "
                 "(kernel flags, -Werror)")
    missing = [c for c in every if c not in compilers]
    if missing:
        lines.append(f"{provider.name}: NOT CHECKED with {missing[0]}: not installed")
    if clang_objs and shutil.which("ld.lld"):
        lines.append(_link_and_resolve(provider, isa, clang_objs, workdir, exports, run))
    write_json(stamp, {"key": key, "material": material})
    return lines


def _compile(provider: Provider, isa: Isa, sources: Sequence[Path], includes: Sequence[Path], workdir: Path,
             compilers: Sequence[str], run: Runner) -> List[Path]:
    """Each source with each compiler into ``workdir/<cc>/``, the module's header
    directories searched (as the Makefile's ``-I`` do); returns the clang objects."""
    clang_objs: List[Path] = []
    for cc in compilers:
        objdir = workdir / cc
        objdir.mkdir(parents=True, exist_ok=True)
        for src in sources:
            obj = objdir / (src.stem + ".o")
            checked(run, [cc, *portable_cflags(cc, isa), *(f"-I{d}" for d in includes), "-c", str(src), "-o", str(obj)],
                    f"{provider.name}: portable {src.name} with {cc}")
            if cc == "clang":
                clang_objs.append(obj)
    return clang_objs


def _link_and_resolve(provider: Provider, isa: Isa, objs: Sequence[Path], workdir: Path, exports: Set[str],
                      run: Runner) -> str:
    """``ld.lld -r`` the objects; every strong undefined symbol left must be a kernel global.  The line to print."""
    linked = workdir / f"{provider.name}_portable.o"
    checked(run, ["ld.lld", "-m", isa.kmod.ld_emulation, "-r", "-o", str(linked), *map(str, objs)],
            f"{provider.name}: linking the portable objects")
    from .checkko import undefined_symbols

    undefined = [n for n, weak in undefined_symbols(open_image(str(linked))) if not weak]
    unresolved = [n for n in undefined if n not in exports]
    if unresolved:
        raise UserError(f"{provider.name}: the portable core needs {', '.join(unresolved)}, which the target "
                        "kernel does not export")
    what = (f"{len(undefined)} undefined symbol{'s' if len(undefined) != 1 else ''}, all kernel globals"
            if undefined else "no undefined symbols")
    return f"{provider.name}: portable objects link (ld.lld -r); {what}"
