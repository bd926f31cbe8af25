"""The whole kinst module compiles and links for arm64 and riscv against FreeBSD 14.3's own headers.

For each ISA, every C file of the module's Makefile -- kinst.c (the
machine-independent glue), kinst_funcs.c, ``<arch>/kinst_isa.c``,
``<arch>/kinst_core.c`` and the kinst_target.c and kinst_table.c generated
from kfix built as a FreeBSD module of that ISA -- compiles with ``clang
--target=<isa>-unknown-freebsd14.3`` and bsd.kmod.mk's compile line in its
order (``helpers.kmod.kmod_cflags``, as tests/toolchain/test_real_headers.py
compiles amd64's: OPENZFS_CFLAGS' compatibility directories ahead of
``-I$SYSDIR``, kmod.mk's flags, then kern.mk's for the ISA, ``-Werror``),
against the headers FreeBSD 14.3 installs for the ISA
(``helpers.freebsd_arch_headers.sys_tree``: the ziglang wheel, with the amd64
tree's stand-ins for the CDDL and OpenSolaris headers FreeBSD does not
install).  Linked with ``ld.lld -r``, as a .ko is made, the objects define
the whole interface kinst.h declares, and leave undefined only kernel and
DTrace functions: nothing of kinst's own, so the module links.
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
from helpers.freebsd_arch_headers import prepare_objdir, sys_tree
from helpers.kmod import KERN_MK, kmod_cflags
from helpers.skips import require_tools

# The module's SRCS (its Makefile), as staged; <arch>/ for the ISA's two, dbp/ for what arm64 and riscv share.
C_FILES = ("kinst.c", "kinst_funcs.c", "{arch}/kinst_isa.c", "{arch}/kinst_core.c", "dbp/kinst_tramp.c",
           "kinst_target.c", "kinst_table.c")
# kern.mk for the ISA: its code-generation flags (cross.FREEBSD_KFLAGS, with kmod.mk's -fPIC for a module
# of these ISAs), then kern.mk's common ones and CWARNFLAGS as KERN_MK has them for amd64, CSTD last; and
# -Wextra and the older releases' -Wredundant-decls -Wnested-externs on top.
_CWARN = KERN_MK[KERN_MK.index("-Wall"):KERN_MK.index("-mno-aes")]
EXTRA_WARN = ("-Wextra", "-Wredundant-decls", "-Wnested-externs")


def kern_mk(arch: str) -> list:
    return [*cross.FREEBSD_KFLAGS[arch], "-fPIC", "-ffreestanding", "-fwrapv", "-fstack-protector", *_CWARN,
            *EXTRA_WARN, "-std=gnu99"]


# What kinst.h declares: kinst.c defines the first, the ISA part the rest.
MI_DEFINES = {"kinst_probe_at", "kinst_sx", "M_KINST"}
ISA_DEFINES = {"kinst_invop", "kinst_isa_peek", "kinst_isa_unpatch", "kinst_isa_arm", "kinst_isa_disarm",
               "kinst_tramp_prepare", "kinst_tramp_take", "kinst_tramp_release", "kinst_tramp_quiesce",
               "kinst_tramp_fini"}
# What the linked module may still need, and nothing else: the kernel's functions and data (malloc(9),
# mutex(9), sx(9) and their SYSINITs, the kernel linker, make_dev(9), EVENTHANDLER(9), pause(9), the
# stack protector kern.mk turns on, the pcpu linker set), DTrace's and the OpenSolaris module's, and the
# ISA's own kernel functions.  Weak references (the module's own linker sets) are not counted.
KERNEL = {
    "malloc", "mallocarray", "free", "malloc_init", "malloc_uninit", "memset", "printf", "snprintf", "strcmp",
    "strncmp", "strlen", "strlcpy", "__mtx_lock_flags", "__mtx_unlock_flags", "_mtx_destroy", "mtx_sysinit",
    "_sx_xlock", "_sx_xunlock", "_sx_slock", "_sx_sunlock", "sx_sysinit", "sx_destroy", "module_register_init",
    "linker_file_function_listall", "linker_file_foreach", "linker_kernel_file", "kernel_sysctlbyname",
    "make_dev", "destroy_dev", "eventhandler_register", "eventhandler_deregister", "eventhandler_find_list",
    "pause_sbt", "hz", "tick_sbt", "kmem_malloc", "kmem_free", "__stack_chk_guard", "__stack_chk_fail",
    "__start_set_pcpu", "__stop_set_pcpu",
}
DTRACE = {"dtrace_register", "dtrace_unregister", "dtrace_condense", "dtrace_probe_create", "dtrace_probe",
          "dtrace_sync", "dtrace_invop_add", "dtrace_invop_remove", "solaris_cpu"}
ISA_KERNEL = {"arm64": {"arm64_get_writable_addr", "arm64_icache_sync_range", "lse_supported", "panic"},
              "riscv": set()}


@pytest.fixture(scope="module", params=("arm64", "riscv"))
def arch(request) -> str:
    require_tools("clang", "ld.lld", why="the module is compiled as FreeBSD builds one for the ISA")
    return request.param


@pytest.fixture(scope="module")
def module(arch, tmp_path_factory) -> Path:
    """The module directory as a build reads it: generated from kfix for ``arch``, with the hand-written C."""
    out = tmp_path_factory.mktemp(f"module-{arch}")
    res = subprocess.run([sys.executable, "-m", "generator", "generate", "--kernel",
                          str(cross.freebsd_module(arch)["ko"]), "--all", "--out", str(out / "gen")],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    stage_sources(PROVIDERS["kinst"], out / "gen")
    return out / "gen"


def build(arch: str, module: Path, work: Path) -> Path:
    """Every C file of ``module`` compiled with the kmod line, then ``ld -r``: the linked object."""
    sysdir = sys_tree(arch)
    objdir = work / "obj"
    prepare_objdir(arch, objdir)
    argv = kmod_cflags(sysdir, objdir, [module, module / arch, module / "dbp"], cross.FREEBSD_TARGET[arch],
                       kern_mk(arch))
    objs, failed = [], {}
    for src in (f.format(arch=arch) for f in C_FILES):
        obj = objdir / (Path(src).stem + ".o")
        proc = subprocess.run([*argv, "-c", str(module / src), "-o", str(obj)], cwd=objdir, capture_output=True,
                              text=True)
        if proc.returncode != 0:
            failed[src] = proc.stderr
        objs.append(str(obj))
    assert failed == {}, "\n".join(f"{src}:\n{err}" for src, err in failed.items())
    linked = work / "kinst.kld"
    proc = subprocess.run(["ld.lld", "-m", cross.FREEBSD_EMULATION[arch][0], "-r", "-o", str(linked), *objs],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return linked


@pytest.fixture(scope="module")
def linked(arch, module, tmp_path_factory) -> Path:
    return build(arch, module, tmp_path_factory.mktemp(f"build-{arch}"))


def test_whole_module_compiles_and_links(arch, linked):
    img = KernelImage.open(str(linked))
    assert img.isa.name == arch
    undefined = {name for name, weak in undefined_symbols(img) if not weak}
    defined = {s.name for s in img.symbols() if s.shndx != 0 and s.bind == 1}
    assert MI_DEFINES | ISA_DEFINES <= defined, (MI_DEFINES | ISA_DEFINES) - defined
    assert {"kinst_table", "kinst_file", "kinst_modname"} <= defined
    # Nothing of kinst's own is left for a kernel to provide: the module links.
    assert not {n for n in undefined if n.lower().startswith("kinst") or n == "M_KINST"}, undefined
    assert undefined - KERNEL - DTRACE - ISA_KERNEL[arch] == set(), undefined - KERNEL - DTRACE - ISA_KERNEL[arch]
    # The ISA part fires probes itself (as amd64's does), through dtrace_probe().
    assert {"dtrace_probe", "dtrace_register", "dtrace_invop_add"} <= undefined


def test_the_private_interface_is_gone(arch, linked):
    """kinst_isa_lookup()/kinst_isa_fire() were the arm64/riscv parts' own interface, which kinst.c never
    provided: neither is defined or needed now."""
    img = KernelImage.open(str(linked))
    names = {s.name for s in img.symbols()}
    assert not {"kinst_isa_lookup", "kinst_isa_fire", "kinst_isa_prepare", "kinst_isa_fini"} & names


# The kernel's timed sleeps: pause(9) is pause_sbt(), tsleep(9) and msleep(9) are _sleep().
TIMED_SLEEPS = {"pause_sbt", "_sleep", "msleep_spin_sbt", "tsleep", "tsleep_sbt"}


def test_unload_never_sleeps_holding_kld_sx(arch, linked):
    """MOD_UNLOAD runs with the kernel linker's kld_sx held (kern_linker.c: linker_file_unload()), which
    every kldload, kldunload, kldstat and stack(9) symbol lookup waits for, so nothing kinst_modevent
    reaches by direct calls in the linked module sleeps for time: while a thread may still be inside a
    trampoline the unload is refused at once, and kldunload is asked again later."""
    from generator.analysis.callgraph import direct_calls, reach

    img = KernelImage.open(str(linked))
    reached = reach(img, [img.lookup("kinst_modevent")], lambda f: True)
    assert "kinst_tramp_quiesce" in {f.name for f in reached}, "the ISA's unload check is not where MOD_UNLOAD is"
    sleeps = {f"{' -> '.join(chain)} -> {s}" for f, chain in reached.items() for s in direct_calls(img, f).outside
              if s.split("+")[0] in TIMED_SLEEPS}
    assert not sleeps, sleeps
