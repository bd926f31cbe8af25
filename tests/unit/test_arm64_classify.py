"""arm64 classification against kinst's aarch64 kinst_isa.c, one hand-written encoding per class.

Each word below is spelled out with the instruction it encodes; capstone
decodes it (the decoder of record) and ``classify`` must give kinst's class,
the fields the emulation will use, kinstkit's kind or refusal and the
branch target.  Where kinstkit differs from kinst on purpose
(docs/refusals.md), the test says what kinst would do.
"""

from __future__ import annotations

import struct

import pytest

from generator.common.errors import ClassifierError
from generator.isa.arm64 import ISA as arm64
from generator.isa.arm64 import table
from generator.isa.contract import STATUS_OK, STATUS_SKIP

ADDR = 0x40001000


def words(*ws: int) -> bytes:
    return b"".join(struct.pack("<I", w) for w in ws)


def verdict(w: int, address: int = ADDR):
    insns, err = arm64.decode(words(w), address, 4)
    assert err == "" and len(insns) == 1
    return arm64.classify(words(w), address, insns[0].mnemonic, insns[0].operands)


@pytest.mark.parametrize("w, text, kind, typ, fields, target", [
    (0x14000002, "b +8", "b", "b", dict(imm=8), ADDR + 8),
    (0x17FFFFFF, "b -4", "b", "b", dict(imm=-4), ADDR - 4),
    (0x94000040, "bl +0x100", "bl", "bl", dict(imm=0x100, link=True), ADDR + 0x100),
    (0x54000040, "b.eq +8", "b.cond", "bcond", dict(imm=8, cond=0), ADDR + 8),
    (0x54FFFFEB, "b.lt -4", "b.cond", "bcond", dict(imm=-4, cond=11), ADDR - 4),
    (0xB4000040, "cbz x0, +8", "cbz", "cbz", dict(reg=0, imm=8, size=8), ADDR + 8),
    (0x35000041, "cbnz w1, +8", "cbz", "cbz", dict(reg=1, imm=8, nonzero=True, size=4), ADDR + 8),
    (0xB400005E, "cbz x30, +8 (kinst reads past its x[30])", "cbz", "cbz", dict(reg=30, imm=8, size=8), ADDR + 8),
    (0x36180040, "tbz w0, #3, +8", "tbz", "tbz", dict(reg=0, imm=8, bit=3), ADDR + 8),
    (0xB7F80040, "tbnz x0, #63, +8 (kinst shifts an int by 63)", "tbz", "tbz",
     dict(reg=0, imm=8, bit=63, nonzero=True), ADDR + 8),
    (0x10000020, "adr x0, +4", "adr", "adr", dict(reg=0, imm=4), None),
    (0xB0000001, "adrp x1, +1 page", "adrp", "adr", dict(reg=1, imm=0x1000), None),
    (0x58000040, "ldr x0, =+8", "ldr-literal", "ldr_literal", dict(reg=0, imm=8, size=8), None),
    (0x18000040, "ldr w0, =+8", "ldr-literal", "ldr_literal", dict(reg=0, imm=8, size=4), None),
    (0x98000040, "ldrsw x0, =+8", "ldr-literal", "ldr_literal", dict(reg=0, imm=8, size=4, signed=True), None),
    (0xD8000040, "prfm pldl1keep, =+8", "ldr-literal", "ldr_literal", dict(reg=-1, imm=8, size=0), None),
    (0xD61F0200, "br x16", "br-reg", "common", dict(reg=16), None),
    (0xD63F0100, "blr x8", "br-reg", "common", dict(reg=8, link=True), None),
    (0xD65F03C0, "ret", "br-reg", "common", dict(reg=30), None),
    (0xA9BF7BFD, "stp x29, x30, [sp, #-16]!", "trampoline", "common", {}, None),
    (0xD503201F, "nop", "trampoline", "common", {}, None),
    (0xD5384000 | 0x100, "mrs x0, tpidr_el1 (not an exception register)", "trampoline", "common", {}, None),
])
def test_each_class(w, text, kind, typ, fields, target):
    v = verdict(w)
    assert (v.status, v.reason, v.kind, v.target) == (STATUS_OK, "", kind, target), text
    assert v.md.type == typ and v.md.insn == w and v.md.instlen == 4
    assert v.md.emulate == (typ in ("adr", "b", "bcond", "bl", "cbz", "tbz"))  # kinst's own emulate flag
    for name, value in fields.items():
        assert getattr(v.md, name) == value, (text, name)


def test_adrp_page_is_from_the_page_of_the_instruction():
    v = verdict(0xB0000001, ADDR + 0x7FC)
    assert v.md.imm == 0x1000  # capstone printed ADDR + 0x1000, cross-checked inside classify


@pytest.mark.parametrize("w, text, why", [
    (0x10000033, "adr x19, +4", "writes x19 through emulation"),
    (0xB0000012, "adrp x18, +1 page", "writes x18"),
    (0x58000053, "ldr x19, =+8", "load into x19"),
    (0x5C000040, "ldr d0, =+8", "SIMD&FP register"),
    (0xC85F7C20, "ldxr x0, [x1]", "LDX/STX block"),
    (0xC8027C20, "stxr w2, x0, [x1]", "LDX/STX block"),
    (0xD65F0BFF, "retaa", "register branch kinstkit does not emulate"),
    (0xD69F03E0, "eret", "register branch kinstkit does not emulate"),
    (0xD4000001, "svc #0", "generates an exception"),
    (0xD4200000, "brk #0", "generates an exception"),
    (0x00000000, "udf #0", "generates an exception"),
    (0xD503245F, "bti c", "landing pad"),
    (0xD503233F, "paciasp", "landing pad"),
    (0xD538402A, "mrs x10, elr_el1", "elr_el1"),
    (0xD518400A, "msr spsr_el1, x10", "spsr_el1"),
    (0xD5385200, "mrs x0, esr_el1", "esr_el1"),
])
def test_refusals_carry_their_reason(w, text, why):
    v = verdict(w)
    assert v.status == STATUS_SKIP and v.kind == "skip" and why in v.reason, (text, v.reason)


def test_undecodable_word_is_refused():
    insns, _ = arm64.decode(words(0xFFFFFFFF), ADDR, 4)
    assert insns[0].mnemonic == "(bad)"
    v = arm64.classify(words(0xFFFFFFFF), ADDR, insns[0].mnemonic, insns[0].operands)
    assert v.status == STATUS_SKIP and "cannot decode" in v.reason


def test_capstone_disagreeing_stops_the_run():
    with pytest.raises(ClassifierError):
        arm64.classify(words(0x14000002), ADDR, "b", "#0x40001004")  # wrong target
    with pytest.raises(ClassifierError):
        arm64.classify(words(0xD503201F), ADDR, "b", "#0x40001008")  # capstone says branch, bits say nop


def walk(*ws: int):
    code = words(*ws)
    insns, err = arm64.decode(code, ADDR, len(code))
    assert not err
    return insns, code


def test_ldx_stx_block_is_refused_through_the_store():
    insns, code = walk(0xD503201F, 0xC85F7C20, 0x91000400, 0xC8027C20, 0x35FFFFA2, 0xD65F03C0)
    refused = arm64.context_refusals(insns, code)
    assert sorted(refused) == [4, 8]  # ldxr and the add; stxr is refused by classify, cbnz after it is fine
    assert all("LDX/STX block" in r for r in refused.values())


def test_unterminated_block_runs_to_the_end():
    insns, code = walk(0xC85F7C20, 0x91000400, 0xD65F03C0)
    refused = arm64.context_refusals(insns, code)
    assert sorted(refused) == [0, 4, 8] and "unterminated" in refused[8]


def test_exception_register_regions():
    # sub sp; stp; mrs x10, elr_el1; str; ...; msr elr_el1, x10; nop; eret; nop
    insns, code = walk(0xD10043FF, 0xA9007BFD, 0xD538402A, 0xF90003EA, 0xD518402A, 0xD503201F, 0xD69F03E0,
                       0xD503201F)
    refused = arm64.context_refusals(insns, code)
    assert sorted(refused) == [0, 4, 8, 16, 20, 24]
    assert "before this function reads elr_el1" in refused[0]
    assert "between the write of elr_el1" in refused[20]


@pytest.mark.parametrize("ws, ok", [
    ((0xA9BF7BFD, 0x910003FD, 0xD65F03C0), True),  # stp x29, x30, [sp, #-16]!
    ((0xD503245F, 0xA9BF7BFD, 0xD65F03C0), True),  # bti c first
    ((0xD503201F, 0xD65F03C0), True),  # nop first: a marked asm function
    ((0xD10043FF, 0x910043FF, 0xD65F03C0), True),  # sub sp, sp, #16
    ((0xD10043E0, 0xD65F03C0), False),  # sub x0, sp, #16: not sp
    ((0xA9007BFD, 0xD65F03C0), False),  # stp without writeback
    ((0x8B000000, 0xD65F03C0), False),
])
def test_prologue_rule(ws, ok):
    insns, code = walk(*ws)
    assert (arm64.frame_verdict(insns, code, "any") == "") == ok


def test_records_round_trip_with_masks():
    recs = b"".join(arm64.stream_record(4, k, 0, ()) for k in ("trampoline", "bl", None, "ret" and "br-reg"))
    masked = arm64.stream_masks(recs, [(4, 4), (9, 2)])
    got = list(arm64.stream_decode(masked, 16))
    assert [(i.offset, i.kind, i.masks) for i in got] == [
        (0, "trampoline", ()), (4, "bl", ((0, 4),)), (8, None, ((0, 4),)), (12, "br-reg", ())]
    assert masked[2] == table.REFUSED | table.MASKED


def test_call26_is_inserted_into_the_word():
    field = arm64.reloc_insert("R_AARCH64_CALL26", words(0x94000000), 0x100)
    assert field == words(0x94000040)
    assert arm64.reloc_insert("R_AARCH64_ABS64", bytes(8), 5) is None
    assert arm64.reloc_type(0) is None and arm64.reloc_type(9999).width == 0


# The mnemonics capstone gives a PC-relative arm64 word (the kinds kinstkit emulates), b.cond aside.
PC_RELATIVE = ("adr", "adrp", "b", "bl", "cbz", "cbnz", "tbz", "tbnz", "ldr", "ldrsw", "prfm")


def test_sve_vector_adr_is_copied_not_emulated():
    """Issue 20 item 13: ``adr z1.d, [z1.d, z1.d, uxtw]`` (0461a021) is SVE's vector address, not a PC-relative
    adr; it stopped ``probes --all --summary`` with "kind trampoline, but capstone names a adr"."""
    for w in (0x0461A021, 0x04A6A699):
        b = struct.pack("<I", w)
        (insn,), err = arm64.decode(b, 0x1000)
        assert insn.mnemonic == "adr" and insn.operands.startswith("z"), insn
        v = arm64.classify(b, 0x1000, insn.mnemonic, insn.operands)
        assert (v.status, v.kind, v.target) == (STATUS_OK, "trampoline", None), v


def test_every_encoding_class_capstone_decodes_is_classified():
    """Every 11-bit opcode prefix (bits 31-21, which pick an A64 encoding class) with 48 random fills: each word
    capstone decodes gets a verdict, none a ClassifierError, and every PC-relative mnemonic was among them, so
    their cross-checks with capstone ran."""
    import random

    import capstone

    cs = capstone.Cs(capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM)
    rng = random.Random(20)
    words = [top << 21 | rng.getrandbits(21) for top in range(1 << 11) for _ in range(48)]
    code = struct.pack(f"<{len(words)}I", *words)
    seen = set()
    for i in range(0, len(code), 4):
        b = code[i : i + 4]
        for _, _, mnemonic, operands in cs.disasm_lite(b, 0x400000 + i, 1):
            v = arm64.classify(b, 0x400000 + i, mnemonic, operands)  # raises ClassifierError on a disagreement
            assert v.status in (STATUS_OK, STATUS_SKIP)
            seen.add("b.cond" if mnemonic.startswith("b.") else mnemonic)
    assert set(PC_RELATIVE) | {"b.cond"} <= seen, set(PC_RELATIVE) - seen
