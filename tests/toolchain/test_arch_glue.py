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

import re
import subprocess
import sys
from pathlib import Path

import pytest

from generator import isa as isa_registry
from generator.kmod.checkko import undefined_symbols
from generator.kmod.sources import stage_sources
from generator.providers import PROVIDERS
from generator.image.elf import KernelImage
from helpers import cross
from helpers.freebsd_arch_headers import prepare_objdir, sys_tree
from helpers.kmod import KERN_MK, kmod_cflags
from helpers.paths import KINST_FIXTURES
from helpers.skips import require_tools

# The module's SRCS (its Makefile), as staged; <arch>/ for the ISA's two, dbp/ for what arm64 and riscv share.
C_FILES = ("kinst.c", "kinst_funcs.c", "kinst_tramp.c", "{arch}/kinst_isa.c", "{arch}/kinst_core.c", "dbp/kinst_dbp.c",
           "dbp/kinst_dbp_tramp.c", "dbp/kinst_core_dbp.c", "kinst_target.c", "kinst_table.c")
# kern.mk for the ISA: its code-generation flags (cross.FREEBSD_KFLAGS, with kmod.mk's -fPIC for a module
# of these ISAs), then kern.mk's common ones and CWARNFLAGS as KERN_MK has them for amd64, CSTD last; and
# -Wextra and the older releases' -Wredundant-decls -Wnested-externs on top.
_CWARN = KERN_MK[KERN_MK.index("-Wall"):KERN_MK.index("-mno-aes")]
EXTRA_WARN = ("-Wextra", "-Wredundant-decls", "-Wnested-externs")


def kern_mk(arch: str) -> list:
    return [*cross.FREEBSD_KFLAGS[arch], "-fPIC", "-ffreestanding", "-fwrapv", "-fstack-protector", *_CWARN,
            *EXTRA_WARN, "-std=gnu99"]


# What kinst.h declares: kinst.c and kinst_tramp.c define the first, the ISA part the rest.
MI_DEFINES = {"kinst_probe_at", "kinst_sx", "M_KINST", "kinst_tramp_prepare", "kinst_tramp_take",
              "kinst_tramp_release", "kinst_tramp_resume_at", "kinst_tramp_fini"}
ISA_DEFINES = {"kinst_invop", "kinst_isa_peek", "kinst_isa_unpatch", "kinst_isa_arm", "kinst_isa_disarm",
               "kinst_tramp_quiesce", "kinst_isa_tramp_needed", "kinst_isa_tpage_alloc", "kinst_isa_tpage_free",
               "kinst_isa_tramp_fill", "kinst_isa_tramp_sync"}
# What the linked module may still need, and nothing else: the kernel's functions and data (malloc(9) and
# its M_DEVBUF type, which the trampoline pool uses, mutex(9), sx(9) and their SYSINITs, the kernel linker,
# make_dev(9), EVENTHANDLER(9), pause(9), the stack protector kern.mk turns on, the pcpu linker set),
# DTrace's and the OpenSolaris module's, and the ISA's own kernel functions.  Weak references (the module's
# own linker sets) are not counted.
KERNEL = {
    "malloc", "mallocarray", "free", "malloc_init", "malloc_uninit", "M_DEVBUF", "memset", "memcmp", "printf",
    "snprintf", "strcmp", "strncmp", "strlen", "strlcpy", "__mtx_lock_flags", "__mtx_unlock_flags", "_mtx_destroy",
    "mtx_sysinit",
    "_sx_xlock", "_sx_xunlock", "_sx_slock", "_sx_sunlock", "sx_sysinit", "sx_destroy", "module_register_init",
    "linker_file_function_listall", "linker_file_foreach", "linker_kernel_file", "kernel_sysctlbyname",
    "make_dev", "destroy_dev", "eventhandler_register", "eventhandler_deregister", "eventhandler_find_list",
    "pause_sbt", "hz", "tick_sbt", "kmem_malloc", "kmem_free", "__stack_chk_guard", "__stack_chk_fail",
    "__start_set_pcpu", "__stop_set_pcpu",
}
DTRACE = {"dtrace_register", "dtrace_unregister", "dtrace_condense", "dtrace_probe_create", "dtrace_probe",
          "dtrace_sync", "dtrace_invop_add", "dtrace_invop_remove", "solaris_cpu"}
ISA_KERNEL = {"arm64": {"arm64_get_writable_addr", "arm64_icache_sync_range", "lse_supported", "panic"},
              "riscv": {"pmap_sync_icache", "kernel_pmap_store"}}


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


# --- the order of a text write, read from the compiled module (issue 20 items 3 and 4) ---------------------
#
# kinst.c stores a probe's state with release order and then has the ISA write the breakpoint; release orders
# earlier accesses before the state store, not the later text store, so another CPU could take the breakpoint
# and still read the probe as idle.  And a riscv fence.i is local to its hart: another hart could go on
# fetching the old text (the trampoline's filler breakpoint, or the instruction under a probe) from a stale
# line.  So: a store barrier right before the text store; every CPU's instruction fetch synced after it and
# after every trampoline fill.  What the compiler made of the C is read back with the ISA's GNU objdump.

# Per ISA: the store barrier; the text store's mnemonic and every store mnemonic; the kernel function that
# makes every CPU's instruction fetch see new text (riscv: pmap_sync_icache(), the SBI remote fence.i after a
# fence; arm64: cpu_icache_sync_range(), whose ic ivau is broadcast to the inner-shareable domain); and the
# registers a stack access is based on.
ORDER = {
    "arm64": {"barrier": "dmb\tishst", "store": "str", "sync": "arm64_icache_sync_range", "stack": ("sp", "x29"),
              "stores": ("str", "strh", "strb", "stur", "sturh", "sturb", "stp", "stlr", "stlrh", "stlrb")},
    "riscv": {"barrier": "fence\tw,w", "store": "sh", "sync": "pmap_sync_icache", "stack": ("sp", "s0"),
              "stores": ("sd", "sw", "sh", "sb")},
}


def disassembly(arch: str, obj: Path) -> dict:
    """Each function of ``obj``: its instructions and relocations in order, as the ISA's GNU objdump prints
    them (``("insn", "mnemonic\\toperands")`` or ``("reloc", "TYPE\\tsymbol")``)."""
    objdump = isa_registry.by_name(arch).oracle.objdump
    require_tools(objdump, why="the compiled module is read back with the ISA's GNU objdump")
    text = subprocess.run([objdump, "-dr", "--no-show-raw-insn", str(obj)], capture_output=True, text=True,
                          check=True).stdout
    funcs: dict = {}
    body = None
    for line in text.splitlines():
        m = re.match(r"^[0-9a-f]+ <([^>]+)>:$", line)
        if m and not m.group(1).startswith(".L"):  # a local label (riscv's pcrel pairs) is not a function
            body = funcs.setdefault(m.group(1), [])
        elif body is not None and re.match(r"^\s+[0-9a-f]+: R_", line):
            body.append(("reloc", line.split(": ", 1)[1].strip()))
        elif body is not None and re.match(r"^\s+[0-9a-f]+:\t", line):
            body.append(("insn", line.split(":\t", 1)[1].split("\t#")[0].split(" //")[0].strip()))
    return funcs


def _index(body: list, pred) -> int:
    return next((i for i, x in enumerate(body) if pred(x)), -1)


def _text_stores(arch: str, body: list) -> list:
    """The stores of ``body`` that are not to the stack frame: (index, mnemonic)."""
    o = ORDER[arch]
    out = []
    for i, (kind, text) in enumerate(body):
        mnemonic, _, operands = text.partition("\t")
        base = re.search(r"\[(\w+)|\((\w+)\)", operands)
        if kind == "insn" and mnemonic in o["stores"] and base and (base.group(1) or base.group(2)) not in o["stack"]:
            out.append((i, mnemonic))
    return out


def _sync_call(arch: str, body: list, after: int) -> int:
    """Where ``body`` calls the ISA's sync after index ``after``, -1 if it does not: riscv calls
    pmap_sync_icache() directly; arm64's cpu_icache_sync_range() is an indirect call through the function
    pointer arm64_icache_sync_range, which the function must load."""
    o = ORDER[arch]
    names = [i for i, x in enumerate(body) if x[0] == "reloc" and x[1].endswith("\t" + o["sync"])]
    if arch == "riscv":
        return next((i for i in names if i > after), -1)
    calls = [i for i, x in enumerate(body) if x[0] == "insn" and x[1].startswith(("blr\t", "br\t")) and i > after]
    return calls[0] if names and calls else -1


def test_a_text_write_is_ordered_after_the_probe_state_and_synced_on_every_cpu(arch, linked):
    o = ORDER[arch]
    funcs = disassembly(arch, linked)
    body = funcs["kinst_isa_write"]
    stores = _text_stores(arch, body)
    assert [m for _, m in stores] == [o["store"]], body  # one store: the breakpoint or the original
    store = stores[0][0]
    barrier = _index(body, lambda x: x == ("insn", o["barrier"]))
    assert 0 <= barrier < store, f"no {o['barrier']} before the text store: {body}"
    assert _sync_call(arch, body, store) > store, f"no {o['sync']} after the text store: {body}"
    if arch == "riscv":
        assert store < _index(body, lambda x: x == ("insn", "fence.i")), body  # and this hart's own


def test_a_trampoline_is_synced_on_every_cpu_after_it_is_filled(arch, linked):
    """The ISA's fill writes a buffer; kinst_tramp_take() alone copies one into a slot, and syncs after it.
    Any other caller of the fill only compares (kinst_tramp.c's reuse check) and calls no sync."""
    funcs = disassembly(arch, linked)
    assert _sync_call(arch, funcs["kinst_isa_tramp_sync"], -1) >= 0, funcs["kinst_isa_tramp_sync"]

    def calls(body, name):
        return any(x[0] == "reloc" and x[1].endswith("\t" + name) for x in body)

    assert {n for n, body in funcs.items() if calls(body, "kinst_core_tramp_fill")} == {"kinst_isa_tramp_fill"}
    body = funcs["kinst_tramp_take"]
    fill = _index(body, lambda x: x[0] == "reloc" and x[1].endswith("\tkinst_isa_tramp_fill"))
    sync = _index(body[fill:], lambda x: x[0] == "reloc" and x[1].endswith("\tkinst_isa_tramp_sync"))
    assert fill >= 0 and sync > 0, f"kinst_tramp_take: a trampoline filled and not synced: {body}"


# --- the trampolines over stand-in kernel services (issue 20 item 11, arm64 and riscv) ----------------------
#
# The trampolines once were filled when their probe was made, so listing probes (dtrace -l) filled slots
# that then belonged to their addresses for good, page after page; and kinst_tramp_leave(), which every
# breakpoint reaching kinst runs, walked every trampoline page.  tests/fixtures/kinst/dbp_world.c runs the
# module's kinst_tramp.c and dbp/kinst_dbp_tramp.c, the ISA's core compiled for this machine, over stand-in
# kernel services and checks both (see its top comment); the pages are the stand-in kmem_malloc()'s, so the
# world sees every byte.

WORLD_PAGES = 6  # pages of trampolines the world fills


def run_dbp_world(arch: str, module: Path, work: Path) -> str:
    require_tools("gcc", why="the world and the ISA's core are compiled for this machine with gcc")
    stubs = work / "stubs"
    for header in {h for src in (module / "kinst_tramp.c", module / "dbp" / "kinst_dbp_tramp.c")
                   for h in re.findall(r"^#include <([^>]+)>", src.read_text(), re.M)}:
        (stubs / header).parent.mkdir(parents=True, exist_ok=True)
        (stubs / header).write_text('#include "kinst_standin.h"\n')
    strict = ["gcc", "-std=c99", "-O1", "-Wall", "-Wextra", "-Werror"]
    includes = [f"-I{d}" for d in (module, module / arch, module / "dbp", KINST_FIXTURES)]
    define = ["-DDBP_WORLD_RISCV"] if arch == "riscv" else []
    objs = [work / "world.o"]
    steps = [[*strict, "-ffreestanding", "-nostdinc", "-D_KERNEL", *define, f"-I{stubs}", *includes, "-c",
              str(KINST_FIXTURES / "dbp_world.c"), "-o", str(objs[0])]]
    for src in (module / "kinst_funcs.c", module / arch / "kinst_core.c", module / "dbp" / "kinst_core_dbp.c"):
        objs.append(work / (src.stem + ".o"))
        steps.append([*strict, *includes, "-c", str(src), "-o", str(objs[-1])])
    steps.append([*strict, f"-I{KINST_FIXTURES}", str(KINST_FIXTURES / "dbp_host.c"), *map(str, objs), "-o",
                  str(work / "dbp_host")])
    for argv in steps:
        proc = subprocess.run(argv, capture_output=True, text=True)
        assert proc.returncode == 0, f"{' '.join(argv)}\n{proc.stderr}"
    run = subprocess.run([str(work / "dbp_host"), str(WORLD_PAGES)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr
    return run.stdout


def test_trampolines_are_filled_at_enable_and_found_by_their_page(arch, module, tmp_path):
    """Listing fills nothing and a second listing maps no page; enabling fills exactly the enabled slots;
    a trampoline's breakpoint resumes after its instruction, found among the pages without reading any
    other page's records; unload gives every page and byte back (dbp_world.c checks each)."""
    out = run_dbp_world(arch, module, tmp_path)
    lines = out.splitlines()
    n = WORLD_PAGES * 4096 // 8
    assert f"dbp_world: listed {n} probes: {WORLD_PAGES} pages, 0 slots filled" in lines, out[-3000:]
    assert f"dbp_world: listed {n} others: {WORLD_PAGES} pages, 0 slots filled" in lines, out[-3000:]
    assert f"dbp_world: enabled {n}: {n} slots filled" in lines, out[-3000:]
    assert re.fullmatch(rf"dbp_world: \d+ checks, 0 failed, {WORLD_PAGES + 1} pages", lines[-1]), out[-3000:]


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
