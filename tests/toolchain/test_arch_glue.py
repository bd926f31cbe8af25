"""The FreeBSD glue for arm64 and riscv compiles against FreeBSD 14.3's own headers, and its interface is narrow.

For each ISA, the hand-written ``sys/modules/kinst/<arch>/kinst_isa.c``, the
portable core, kinst_funcs.c and a table generated from kfix built as a
FreeBSD module of that ISA compile with ``clang
--target=<isa>-unknown-freebsd14.3``, the module flags of kern.mk and
kmod.mk and -Werror, against the headers FreeBSD 14.3 installs (the ziglang
wheel; ``helpers.freebsd_arch_headers``).  Linked with ``ld.lld -r``, the
objects define exactly the ISA interface kinst_isa.h declares and leave
undefined only kernel functions and the two callbacks the
machine-independent kinst.c provides.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from generator.build.checkko import undefined_symbols
from generator.build.sources import PROVIDERS, stage_sources
from generator.image.elf import KernelImage
from helpers import cross
from helpers.freebsd_arch_headers import include_tree
from helpers.skips import require_tools

# kern.mk's warnings for the kernel (CWARNFLAGS at WARNS 6) that clang knows, on top of -Wall -Wextra.
CWARN = ("-Wall", "-Wextra", "-Werror", "-Wredundant-decls", "-Wnested-externs", "-Wstrict-prototypes",
         "-Wmissing-prototypes", "-Wpointer-arith", "-Wcast-qual", "-Wundef", "-Wno-pointer-sign",
         "-Wmissing-include-dirs", "-Wno-unused-parameter", "-fdiagnostics-show-option")
# What kinst_isa.h says the ISA part defines, and the callbacks kinst.c must provide.
ISA_INTERFACE = {"kinst_invop", "kinst_isa_prepare", "kinst_isa_arm", "kinst_isa_disarm", "kinst_isa_fini"}
MI_CALLBACKS = {"kinst_isa_lookup", "kinst_isa_fire", "M_KINST"}
# Kernel functions, and the per-CPU linker set sys/pcpu.h refers to (malloc(9)'s M_ZERO inline is a memset).
_ANY = {"kmem_malloc", "kmem_free", "malloc", "free", "memset", "__start_set_pcpu", "__stop_set_pcpu"}
KERNEL = {"arm64": _ANY | {"panic", "arm64_get_writable_addr", "arm64_icache_sync_range"}, "riscv": _ANY}


@pytest.fixture(scope="module", params=("arm64", "riscv"))
def arch(request) -> str:
    require_tools("clang", "ld.lld", why="the glue is compiled as FreeBSD builds a module of the ISA")
    return request.param


@pytest.fixture(scope="module")
def objects(arch, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp(f"glue-{arch}")
    res = subprocess.run([sys.executable, "-m", "generator", "generate", "--kernel",
                          str(cross.freebsd_module(arch)["ko"]), "--all", "--out", str(out / "gen")],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    tree = include_tree(arch)
    # One complete module directory, as a build reads (a header's quoted includes look beside it first).
    gen = out / "gen"
    stage_sources(PROVIDERS["kinst"], gen)
    cc = ["clang", f"--target={cross.FREEBSD_TARGET[arch]}", "-O2", "-std=gnu99", "-nostdinc", "-ffreestanding",
          "-fwrapv", "-fno-common", "-fno-omit-frame-pointer", "-fPIC", "-D_KERNEL", "-DKLD_MODULE",
          *cross.FREEBSD_KFLAGS[arch], *CWARN, f"-I{gen}", f"-I{gen / arch}", f"-I{tree}"]
    objs = []
    for src in (gen / arch / "kinst_isa.c", gen / arch / "kinst_core.c", gen / "kinst_funcs.c",
                gen / "kinst_table.c"):
        obj = out / (src.stem + ".o")
        proc = subprocess.run([*cc, "-c", str(src), "-o", str(obj)], capture_output=True, text=True)
        assert proc.returncode == 0, (src.name, proc.stderr)
        objs.append(str(obj))
    linked = out / "kinst_isa_linked.o"
    proc = subprocess.run(["ld.lld", "-m", cross.FREEBSD_EMULATION[arch][0], "-r", "-o", str(linked), *objs],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return linked


def test_glue_compiles_and_keeps_to_its_interface(arch, objects):
    img = KernelImage.open(str(objects))
    assert img.isa.name == arch
    undefined = {name for name, weak in undefined_symbols(img) if not weak}
    defined = {s.name for s in img.symbols() if s.shndx != 0 and s.bind == 1}
    assert ISA_INTERFACE <= defined, ISA_INTERFACE - defined
    assert "kinst_table" in defined
    assert undefined - KERNEL[arch] == MI_CALLBACKS, undefined
    assert not {n for n in undefined if n.startswith("dtrace")}, "the ISA part calls DTrace only through kinst.c"
