"""arm64's and riscv's host walk (``isa/accel/kk_dbp.c`` with each ISA's step) against the per-function report.

kinst's rule for one instruction has one implementation per ISA, the
portable core's ``kinst_core_dissect()``, which the walk and the report
(``probes.analyse``) both run.  What the walk adds is where each
instruction ends (its encoding, which capstone's C library must decode to
that length), the capstone cross-check, the prologue rule, and which
functions it hands back to Python (undecodable bytes, LDX/STX and LR/SC
blocks, exception-register and trap-CSR regions, ``$d`` data, a walk
error).  The report finds the same through capstone's Python binding and
``decode.py``, so every summary (record and ``--json`` line) of the walk must
equal the report's, under both prologue rules, on code nobody here wrote:
Debian's cross C library and kfix built the way FreeBSD builds a module.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from generator.analysis import summary
from generator.analysis.probes import analyse, code_runs
from generator.image.elf import KernelImage
from generator.isa import by_name, hostcore
from helpers import cross
from helpers.hostwalk import mutated_walk, summary_mismatches
from helpers.textimage import lay_out, mutated_bodies

WHY = "the walk is checked on the ISA's cross C library"


def _deferred(img, funcs) -> tuple:
    """(instructions walked, functions handed back) of a summary of ``funcs``."""
    lib = hostcore.for_isa(img.isa)
    lay = lib.summary_layout()
    n = deferred = 0
    for run, span, first in code_runs(img, funcs):
        counts = lib.summarise(span, first, [funcs[k].address - first for k in run], [funcs[k].size for k in run])
        col = counts[lay.n :: lay.columns]
        deferred += sum(1 for x in col if x == lay.deferred)
        n += sum(x for x in col if x != lay.deferred)
    return n, deferred


@pytest.mark.parametrize("name", ["arm64", "riscv"])
@pytest.mark.parametrize("rule", ["any", "first"])
def test_cross_libc(name, rule):
    arch = cross.require_cross(name, WHY)
    img = KernelImage.open(str(Path(arch.sysroot) / "lib" / "libc.so.6"))
    funcs = img.functions()[:1200]
    assert len(funcs) == 1200
    bad = summary_mismatches(img, funcs, rule)
    assert not bad, bad[:3]


@pytest.mark.parametrize("name", ["arm64", "riscv"])
def test_freebsd_module(name):
    """kfix as FreeBSD builds a module: its ET_REL object (relocated fields) and ET_DYN .ko, with mapping
    symbols and the assembly that opens exclusive blocks and exception-register regions."""
    cross.require_cross(name, WHY)
    mod = cross.freebsd_module(name)
    for kind in ("kld", "ko"):
        img = KernelImage.open(str(mod[kind]))
        funcs = img.functions()
        assert len(funcs) > 15
        for rule in ("any", "first"):
            bad = summary_mismatches(img, funcs, rule)
            assert not bad, (kind, rule, bad[:3])


@pytest.mark.parametrize("name", ["arm64", "riscv"])
def test_the_walk_carries_the_work(name):
    """On the cross C library the walk hands back few functions: the speed is the walk's.  (riscv's libc inlines
    its atomics as LR/SC loops, whose blocks Python refuses: a tenth of its functions.)"""
    arch = cross.require_cross(name, WHY)
    img = KernelImage.open(str(Path(arch.sysroot) / "lib" / "libc.so.6"))
    n, deferred = _deferred(img, img.functions())
    assert n > 50000 and deferred < 0.12 * len(img.functions()), (n, deferred)


def _words(*ws: int) -> bytes:
    return b"".join(struct.pack("<I", w) for w in ws)


RET_ARM64 = 0xD65F03C0
RET_RISCV = b"\x82\x80"  # c.ret


@pytest.mark.parametrize("name, code, why", [
    ("arm64", _words(0xC85F7C20, RET_ARM64), "ldxr x0, [x1]: an LDX/STX block is Python's"),
    ("arm64", _words(0xD5384020, RET_ARM64), "mrs x0, elr_el1: an exception-register region is Python's"),
    ("arm64", _words(0xA9BF7BFD, RET_ARM64)[:6], "a symbol that is not whole words: the walk error"),
    ("riscv", bytes.fromhex("2f35051073000000") + RET_RISCV, "lr.w: an LR/SC block is Python's"),
    ("riscv", bytes.fromhex("73251014") + RET_RISCV, "csrr a0, sepc: a trap-CSR region is Python's"),
    ("riscv", b"\x1f\x00\x00\x00\x00\x00" + RET_RISCV, "6 bytes or more: boundaries are lost"),
    ("riscv", bytes.fromhex("2330110097"), "the last instruction runs past the symbol"),
])
def test_hands_back_what_python_decides(name, code, why):
    cross.require_cross(name, WHY)
    lib = hostcore.for_isa(by_name(name))
    lay = lib.summary_layout()
    counts = lib.summarise(code + b"\0" * 8, 0x1000, [0], [len(code)])
    assert counts[lay.n] == lay.deferred, why


def test_misaligned_function_is_handed_back():
    """A function at an address no instruction starts at: Python reports the walk error."""
    lib = hostcore.for_isa(by_name("arm64"))
    lay = lib.summary_layout()
    code = _words(0xA9BF7BFD, RET_ARM64)
    assert lib.summarise(code + b"\0" * 8, 0x1002, [0], [len(code)])[lay.n] == lay.deferred
    assert lib.summarise(code + b"\0" * 8, 0x1000, [0], [len(code)])[lay.n] == 2


@pytest.mark.parametrize("name", ["arm64", "riscv"])
def test_mutated_code(name):
    """Real functions of the cross libc with bytes changed (and, in some, bytes inserted that shift every
    boundary after them): the walk's summary is the report's, or the walk handed the function back; where
    the report stops (capstone and the core disagree), the walk must have handed it back too."""
    arch = cross.require_cross(name, WHY)
    isa = by_name(name)
    bodies = mutated_bodies(str(Path(arch.sysroot) / "lib" / "libc.so.6"), 1500, seed=20261203)
    # Each function starts where an instruction may (an inserted byte would misalign every function after it).
    align = 4 if name == "arm64" else 2
    bodies = [b + bytes(-len(b) % align) for b in bodies]
    img, funcs = lay_out(isa, bodies)
    walked = mutated_walk(img, funcs, bodies, lambda f, rep: None)
    assert walked > 0.25 * len(funcs), walked


@pytest.mark.parametrize("after, eligible", [(RET_RISCV, True), (b"\x01\x00", False)])
def test_riscv_prologue_reads_past_the_function_as_kinst_does(after, eligible):
    """kinst reads a riscv function as whole words, so its last word runs into the bytes after it: a c.ret
    there passes the "first" rule.  The walk (a summary) and the report read the same bytes."""
    isa = by_name("riscv")
    body = bytes.fromhex("06e4" "0100" "0100")  # c.sdsp ra, 8(sp); c.nop; c.nop: 6 bytes, the last word half out
    img, funcs = lay_out(isa, [body, after + b"\x01\x00"])
    rep = analyse(img, funcs[0], "first", isa)
    assert rep.eligible is eligible, rep.reason
    assert summary.fast(img, funcs[0], "first", isa) == summary.from_report(rep)
