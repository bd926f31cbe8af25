"""Function verdicts and per-probe results from ``generator.analysis.probes``.

The functions are synthetic: hand-assembled bytes in a fake image that offers
only what ``probes.analyse`` and the summaries ask of a ``KernelImage`` (isa,
e_type, path, section_at, read, read_in, relocs_in).  No ELF file is needed, so these tests are fast
and independent of the image reader.
"""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import pytest

from generator.analysis import exclusions, probes
from generator.analysis import records as R
from generator.common.errors import UserError
from generator.image.elf import Function
from generator.image.relocations import Reloc
from generator.isa.amd64 import ISA as amd64
from generator.isa.amd64 import tables as T
from helpers.textimage import BASE, TextImage


# push %rbp; mov %rsp,%rbp; pop %rbp; ret  -- offsets 0, 1, 4, 5
FRAME = "55 48 89 e5 5d c3"


class FakeImage(TextImage):
    """The slice of ``KernelImage`` that ``probes.analyse`` uses, with relocations and a check on every read."""

    path = "fake-kernel"

    def __init__(self, code: bytes, e_type: str = "ET_EXEC", relocs: Sequence[Reloc] = (),
                 funcs: Sequence[Function] = ()):
        super().__init__(amd64, code, funcs)
        self.e_type = e_type
        self.relocs = list(relocs)

    def read(self, address: int, size: int) -> bytes:
        off = address - BASE
        assert 0 <= off and off + size <= len(self.code), "read outside .text"
        return self.code[off : off + size]

    def relocs_in(self, address: int, size: int) -> List[Reloc]:
        return [r for r in self.relocs if address <= r.address < address + size]


def image(*funcs: Tuple[str, str], e_type: str = "ET_EXEC", relocs=()) -> Tuple[FakeImage, Dict[str, Function]]:
    """Lay out (name, hex) functions one after another, int3-padded like a linker."""
    code = b""
    out: Dict[str, Function] = {}
    for name, hexbytes in funcs:
        b = bytes.fromhex(hexbytes)
        out[name] = Function(name=name, address=BASE + len(code), size=len(b), binding="global", file=None, section=".text")
        code += b + b"\xcc" * (16 - len(b) % 16)
    return FakeImage(code, e_type, relocs, list(out.values())), out


def excluded(name: str) -> str:
    """kinst's name verdict with the amd64 list, as ``analyse`` asks for it."""
    return exclusions.excluded(name, amd64.name, amd64.md_excluded)


def analyse_one(hexbytes: str, name: str = "f", rule: str = "any") -> R.FunctionReport:
    img, funcs = image((name, hexbytes))
    return probes.analyse(img, funcs[name], rule)


# --- names --------------------------------------------------------------------


@pytest.mark.parametrize("name, why", [
    ("dtrace_foo", "dtrace_"),
    ("dtrace_probe", "dtrace_"),
    ("kinst_invop", "kinst_"),
    ("kinst_x", "kinst_"),
    ("db_x", "DDB"),
    ("db_trap", "DDB"),
    ("kdb_x", "KDB"),
    ("kdb_enter", "KDB"),
    ("owner_mtx", "lock owner"),  # kinst: owner_mtx, owner_rm, owner_rw, owner_sx only
    ("owner_sx", "lock owner"),
    ("owner_foo", "lock owner"),  # kinstkit's superset
    ("cpu_switch", "curthread"),
    ("trap_check", "trap path"),
    ("vmx_enter_guest", "bhyve VMX"),  # kinstkit's amd64 list
    ("svm_launch", "bhyve SVM"),
])
def test_excluded_names(name, why):
    reason = excluded(name)
    assert reason.startswith("excluded by name")
    assert why in reason


@pytest.mark.parametrize("name", [
    "dtrace_safe_foo",  # the documented escape from dtrace_*
    "dtrace_safe_",
    "vm_fault",
    "dtrace",  # prefixes need their underscore
    "xdtrace_foo",
    "kdbx",
    "dbx_foo",
    "owner",
    "cpu_switch_hook",  # cpu_switch and trap_check are exact names
    "my_trap_check",
])
def test_allowed_names(name):
    assert excluded(name) == ""


# amd64 functions that run in NMI context (the trap path for T_NMI, the stop
# and stack-sampling NMIs, hwpmc's counter-overflow interrupt): a #BP there
# returns with iretq, which unblocks NMIs on the NMI stack.
NMI_PATH = [
    "trap", "nmi_handle_intr", "nmi_call_kdb", "nmi_call_kdb_smp", "isa_nmi", "ipi_nmi_handler",
    "cpustop_handler", "cpustop_handler_post", "savectx", "stack_nmi_handler", "stack_capture",
    "pmc_process_interrupt", "pmc_add_sample", "pmc_save_kernel_callchain", "core_intr", "core2_intr", "amd_intr",
    "lapic_reenable_pmc",
]


@pytest.mark.parametrize("name", NMI_PATH)
def test_nmi_path_is_excluded_with_its_reason(name):
    reason = excluded(name)
    assert reason.startswith("excluded by name (amd64): ")
    assert "NMI context" in reason and "iretq" in reason


def test_nmi_path_function_through_analyse():
    rep = analyse_one(FRAME, name="nmi_handle_intr")
    assert not rep.eligible and "NMI" in rep.reason
    assert {p.status for p in rep.probes} == {R.STATUS_SKIP}


def test_excluded_function_refuses_every_probe_with_its_reason():
    # push %rbp; popfq (refused on its own); mov %rsp,%rbp; pop %rbp; ret
    rep = analyse_one("55 9d 48 89 e5 5d c3", name="dtrace_foo")
    assert not rep.eligible
    assert rep.reason == excluded("dtrace_foo")
    assert len(rep.probes) == 5
    for p in rep.probes:
        assert p.status == R.STATUS_SKIP and p.kind == R.KIND_SKIP
        assert p.reason == f"function refused: {rep.reason}"


def test_md_excluded_function_through_analyse():
    rep = analyse_one(FRAME, name="vmx_enter_guest")
    assert not rep.eligible and "vmxctx" in rep.reason
    assert {p.status for p in rep.probes} == {R.STATUS_SKIP}


# --- the frame-pointer prologue rules --------------------------------------------

PROLOGUES = [
    # (hex, passes 'any', passes 'first')
    pytest.param(FRAME, True, True, id="push-rbp-first"),
    # push %rbx; push %rbp; mov %rsp,%rbp; pop %rbp; pop %rbx; ret
    pytest.param("53 55 48 89 e5 5d 5b c3", True, False, id="push-rbp-later"),
    # sub $8,%rsp; add $8,%rsp; ret
    pytest.param("48 83 ec 08 48 83 c4 08 c3", False, False, id="no-push"),
    # mov $0x55,%eax; ret: a 0x55 byte, but not at an instruction start
    pytest.param("b8 55 00 00 00 c3", False, False, id="0x55-inside-an-instruction"),
    # push %r13; pop %r13; ret: 41 55 starts with the REX byte
    pytest.param("41 55 41 5d c3", False, False, id="push-r13"),
    # endbr64; push %rbp; mov %rsp,%rbp; pop %rbp; ret
    pytest.param("f3 0f 1e fa 55 48 89 e5 5d c3", True, False, id="endbr64-then-push"),
]


@pytest.mark.parametrize("hexbytes, any_ok, first_ok", PROLOGUES)
def test_prologue_rules(hexbytes, any_ok, first_ok):
    for rule, ok in (("any", any_ok), ("first", first_ok)):
        rep = analyse_one(hexbytes, rule=rule)
        assert rep.eligible == ok, rule
        if ok:
            assert rep.reason == ""
            assert all(p.status == R.STATUS_OK for p in rep.probes)
        else:
            assert rep.reason.startswith("no frame-pointer prologue")
            assert ("14.0" in rep.reason) == (rule == "first")
            assert all(p.reason == f"function refused: {rep.reason}" for p in rep.probes)


def test_frame_verdict_direct():
    insns, _ = amd64.decode(bytes.fromhex("53 55 c3"), BASE)
    code = bytes.fromhex("53 55 c3")
    assert amd64.frame_verdict(insns, code, "any") == ""
    assert "first instruction" in amd64.frame_verdict(insns, code, "first")


# --- probes of an eligible function ----------------------------------------------


def test_probe_fields_of_an_eligible_function():
    # push %rbp; mov %rsp,%rbp; call .+5; je .+2; popfq; pop %rbp; ret
    rep = analyse_one("55 48 89 e5 e8 00 00 00 00 74 00 9d 5d c3")
    assert rep.eligible and rep.walk_error == ""
    assert [p.offset for p in rep.probes] == [0, 1, 4, 9, 11, 12, 13]
    assert [p.address for p in rep.probes] == [BASE + o for o in (0, 1, 4, 9, 11, 12, 13)]
    kinds = [p.kind for p in rep.probes]
    assert kinds == ["trampoline", "trampoline", "call-direct", "jcc-widen",
                     R.KIND_SKIP, "trampoline", "trampoline"]
    call = rep.probes[2]
    assert call.target == BASE + 9 and call.target_symbol is None
    assert call.bytes == bytes.fromhex("e8 00 00 00 00") and call.length == 5
    assert rep.probes[4].reason.startswith("popfq: ")


def test_gs_region_in_analyse():
    # push %rbp; mov %rsp,%rbp; pushfq; cli; rdmsr; mov %eax,%gs; wrmsr; popfq; pop %rbp; ret
    rep = analyse_one("55 48 89 e5 9c fa 0f 32 8e e8 0f 30 9d 5d c3")
    by_off = {p.offset: p for p in rep.probes}
    assert by_off[10].mnemonic == "wrmsr"
    assert by_off[10].status == R.STATUS_SKIP and by_off[10].reason == T.GS_REGION_REASON
    assert by_off[8].status == R.STATUS_OK  # the mov itself: the #BP fires before it runs
    assert by_off[12].reason.startswith("popfq: ")
    assert by_off[13].status == R.STATUS_OK


def test_instruction_straddling_the_symbol_end():
    # push %rbp; call ... -- the symbol ends 3 bytes in, inside the call.
    img, funcs = image(("f", "55 e8 00 00 00 00"))
    f = funcs["f"]
    short = Function(f.name, f.address, 3, f.binding, f.file, f.section)
    rep = probes.analyse(img, short)
    assert "past the symbol's end" in rep.walk_error
    assert rep.eligible
    assert rep.probes[0].status == R.STATUS_OK
    assert rep.probes[1].status == R.STATUS_SKIP and rep.probes[1].reason == "extends past the symbol's end"


def test_function_outside_its_section():
    img, funcs = image(("f", FRAME))
    f = funcs["f"]
    bad = Function(f.name, BASE + 0x100000, 6, f.binding, f.file, f.section)
    with pytest.raises(UserError, match="outside its section"):
        probes.analyse(img, bad)


def test_relocation_names_an_unresolved_call_target():
    # push %rbp; call <reloc>; pop %rbp; ret  in an ET_REL module
    field = BASE + 2
    relocs = [Reloc(address=field, type="R_X86_64_PLT32", symbol="printf", addend=-4, resolved=False)]
    img, funcs = image(("f", "55 e8 00 00 00 00 5d c3"), e_type="ET_REL", relocs=relocs)
    call = probes.analyse(img, funcs["f"]).probes[1]
    assert call.target is None and call.target_symbol == "printf"

    relocs = [Reloc(address=field, type="R_X86_64_PC32", symbol="table", addend=0x10 - 4, resolved=False)]
    img, funcs = image(("f", "55 e8 00 00 00 00 5d c3"), e_type="ET_REL", relocs=relocs)
    assert probes.analyse(img, funcs["f"]).probes[1].target_symbol == "table+0x10"

    relocs = [Reloc(address=field, type="R_X86_64_PLT32", symbol="local_fn", addend=-4, resolved=True)]
    img, funcs = image(("f", "55 e8 00 00 00 00 5d c3"), e_type="ET_REL", relocs=relocs)
    call = probes.analyse(img, funcs["f"]).probes[1]
    assert call.target == BASE + 6 and call.target_symbol is None


def test_neighbouring_functions_get_their_own_verdicts():
    img, funcs = image(("a", FRAME), ("dtrace_b", FRAME), ("c", "c3"))
    reps = [probes.analyse(img, f) for f in funcs.values()]
    assert [(r.name, r.eligible) for r in reps] == [("a", True), ("dtrace_b", False), ("c", False)]


# --- find_offset ----------------------------------------------------------------


def test_find_offset_on_a_boundary():
    rep = analyse_one(FRAME)
    for off in (0, 1, 4, 5):
        assert probes.find_offset(rep, off).offset == off


@pytest.mark.parametrize("off, nearest", [(2, "1 and 4"), (3, "1 and 4")])
def test_find_offset_names_the_nearest_boundaries(off, nearest):
    rep = analyse_one(FRAME)
    with pytest.raises(UserError) as e:
        probes.find_offset(rep, off)
    msg = str(e.value)
    assert f"offset {off} is not on an instruction boundary of f" in msg
    assert msg.endswith(f"nearest: {nearest}")


@pytest.mark.parametrize("off", [-1, 6, 100])
def test_find_offset_outside_the_function(off):
    rep = analyse_one(FRAME)
    with pytest.raises(UserError, match=rf"offset {off} is outside f \(size 6\)"):
        probes.find_offset(rep, off)


@pytest.mark.parametrize("hexbytes", [
    # push %rbp; mov %rsp,%rbp; pushfq; cli; rdmsr; mov %eax,%gs; wrmsr; popfq; pop %rbp; ret
    "55 48 89 e5 9c fa 0f 32 8e e8 0f 30 9d 5d c3",
    # push %rbp; pop %gs; nop; pop %rbp; ret
    "55 0f a9 90 5d c3",
    # push %rbp; lgs (%rax),%edx; wrmsr; pop %rbp; ret
    "55 0f b5 10 0f 30 5d c3",
])
def test_summary_counts_gs_regions_as_the_report_does(hexbytes):
    """A %gs region is the Python rule's: the host walk hands the function back, and its summary counts the
    region's refusals as the per-function report does."""
    from generator.analysis import summary

    img, funcs = image(("f", hexbytes))
    f = funcs["f"]
    fast = summary.fast(img, f, "any", amd64)
    slow = summary.from_report(probes.analyse(img, f, "any", amd64))
    assert fast == slow
    assert slow["skipped"] >= 1
