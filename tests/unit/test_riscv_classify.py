"""riscv classification against kinst's riscv kinst_isa.c, one hand-written encoding per class.

Each instruction below is spelled out with what it encodes; capstone (RV64
with the C extension) decodes it and ``classify`` must give kinst's instlen
and emulation, the fields the emulation uses, kinstkit's kind or refusal
and the branch target.  Where kinstkit differs from kinst on purpose
(docs/refusals.md), the test says what kinst would do.
"""

from __future__ import annotations

import struct

import pytest

from generator.common.errors import ClassifierError
from generator.isa.contract import STATUS_OK, STATUS_SKIP
from generator.isa.riscv import ISA as riscv
from generator.isa.riscv import table

ADDR = 0x80001000


def enc(*items) -> bytes:
    """Little-endian instructions: an int below 0x10000 whose low bits are not 11 is 2 bytes."""
    return b"".join(struct.pack("<H" if v & 3 != 3 else "<I", v) for v in items)


def verdict(v: int, address: int = ADDR):
    code = enc(v)
    insns, err = riscv.decode(code, address, len(code))
    assert err == "" and len(insns) == 1
    return riscv.classify(code, address, insns[0].mnemonic, insns[0].operands)


@pytest.mark.parametrize("v, text, kind, typ, fields, target", [
    (0x008000EF, "jal ra, +8", "jal", "jal", dict(rd=1, imm=8), ADDR + 8),
    (0xFFDFF06F, "j -4", "jal", "jal", dict(rd=0, imm=-4), ADDR - 4),
    (0x008780E7, "jalr ra, 8(a5)", "jalr", "jalr", dict(rd=1, rs1=15, imm=8), None),
    (0x00008067, "ret", "jalr", "jalr", dict(rd=0, rs1=1, imm=0), None),
    (0x00B50863, "beq a0, a1, +16", "branch", "branch", dict(rs1=10, rs2=11, imm=16, funct3=0), ADDR + 16),
    (0xFE051CE3, "bnez a0, -8", "branch", "branch", dict(rs1=10, rs2=0, imm=-8, funct3=1), ADDR - 8),
    (0x00B56863, "bltu a0, a1, +16", "branch", "branch", dict(rs1=10, rs2=11, imm=16, funct3=6), ADDR + 16),
    (0x12345517, "auipc a0, 0x12345", "auipc", "auipc", dict(rd=10, imm=0x12345000), None),
    (0xFFFFF517, "auipc a0, -1 page", "auipc", "auipc", dict(rd=10, imm=-0x1000), None),
    (0x00001017, "auipc zero, 1: a HINT; kinst writes through register offset -1", "auipc", "auipc",
     dict(rd=0, imm=0x1000), None),
    (0xA021, "c.j +8", "c.j", "c.j", dict(imm=8), ADDR + 8),
    (0xC781, "c.beqz a5, +8", "c.branch", "c.beqz", dict(rs1=15, imm=8, funct3=0), ADDR + 8),
    (0xE781, "c.bnez a5, +8", "c.branch", "c.bnez", dict(rs1=15, imm=8, funct3=1), ADDR + 8),
    (0x8082, "c.jr ra (ret)", "c.jr", "c.jr", dict(rd=0, rs1=1), None),
    (0x9782, "c.jalr a5", "c.jr", "c.jalr", dict(rd=1, rs1=15), None),
    (0x00B50533, "add a0, a0, a1", "trampoline", "common", {}, None),
    (0x00113423, "sd ra, 8(sp)", "trampoline", "common", {}, None),
    (0xE406, "c.sdsp ra, 8(sp)", "trampoline", "common", {}, None),
    (0x0001, "c.nop", "trampoline", "common", {}, None),
])
def test_each_class(v, text, kind, typ, fields, target):
    ver = verdict(v)
    assert (ver.status, ver.reason, ver.kind, ver.target) == (STATUS_OK, "", kind, target), text
    assert ver.md.type == typ and ver.md.insn == v and ver.md.emulate == (typ != "common")
    assert ver.md.instlen == (4 if v & 3 == 3 else 2)
    for name, value in fields.items():
        assert getattr(ver.md, name) == value, (text, name)


@pytest.mark.parametrize("v, text, why", [
    (0x00000073, "ecall", "SYSTEM"),
    (0x9002, "c.ebreak", "SYSTEM"),
    (0x14102573, "csrr a0, sepc", "SYSTEM"),
    (0x10200073, "sret", "SYSTEM"),
    (0x100427AF, "lr.w a5, (s0)", "LR/SC block"),
    (0x1CE426AF, "sc.w.aq a3, a4, (s0)", "LR/SC block"),
])
def test_refusals_carry_their_reason(v, text, why):
    ver = verdict(v)
    assert ver.status == STATUS_SKIP and ver.kind == "skip" and why in ver.reason, (text, ver.reason)


def test_undecodable_is_sized_by_its_encoding():
    code = enc(0x0000007F, 0x0001)  # low bits 1111111: a 6-byte-or-longer encoding no decoder here knows
    insns, _ = riscv.decode(code, ADDR, len(code))
    assert insns[0].mnemonic == "(bad)"
    assert riscv.classify(code[:2], ADDR, "(bad)", "").status == STATUS_SKIP
    refused = riscv.context_refusals(insns, code)
    assert set(refused) == {i.offset for i in insns[1:]} and "boundaries after them are unknown" in refused[2]


def test_capstone_disagreeing_stops_the_run():
    with pytest.raises(ClassifierError):
        riscv.classify(enc(0xA021), ADDR, "c.j", "0xc")  # offset 8 in the bits
    with pytest.raises(ClassifierError):
        riscv.classify(enc(0x00B50533), ADDR, "beq", "a0, a1, 0x10")


def walk(*items):
    code = enc(*items)
    insns, err = riscv.decode(code, ADDR, len(code))
    assert not err
    return insns, code


def test_lr_sc_block_is_refused_through_the_store():
    # c.nop; lr.w a5,(s0); bne a5,a4,+12; sc.w.aq a3,a4,(s0); c.bnez a3,-10; c.jr ra
    insns, code = walk(0x0001, 0x100427AF, 0x00E79663, 0x1CE426AF, 0xFAFD, 0x8082)
    refused = riscv.context_refusals(insns, code)
    assert sorted(refused) == [2, 6] and all("LR/SC block" in r for r in refused.values())


def test_unterminated_block_runs_to_the_end():
    insns, code = walk(0x100427AF, 0x0001, 0x8082)
    refused = riscv.context_refusals(insns, code)
    assert sorted(refused) == [0, 4, 6] and "unterminated" in refused[6]


def test_trap_csr_regions():
    # c.nop; csrr a0, sepc; c.nop; csrw sepc, a0; c.nop; sret; c.nop
    insns, code = walk(0x0001, 0x14102573, 0x0001, 0x14151073, 0x0001, 0x10200073, 0x0001)
    refused = riscv.context_refusals(insns, code)
    assert sorted(refused) == [0, 2, 8, 12, 14]
    assert "before this function reads sepc" in refused[0] and "between the write of sepc" in refused[12]


@pytest.mark.parametrize("items, rule, ok", [
    ((0x1141, 0xE406, 0x0001, 0x8082), "any", True),  # c.addi sp,-16; c.sdsp ra,8(sp): the high half of word 0
    ((0x00113423, 0x8082), "any", True),  # sd ra, 8(sp)
    ((0x00813423, 0x8082), "any", False),  # sd s0, 8(sp): not ra
    ((0x0001, 0x00113423, 0x8082), "any", False),  # sd ra at +2: kinst reads words at +0, +4: never sees it
    ((0x1141, 0xE406, 0x0001, 0x0001), "first", False),  # the first rule also wants a ret
    ((0x1141, 0xE406, 0x0001, 0x8082), "first", True),
])
def test_prologue_rule_reads_words(items, rule, ok):
    insns, code = walk(*items)
    assert (riscv.frame_verdict(insns, code, rule) == "") == ok


def test_records_round_trip_with_masks():
    recs = b"".join(riscv.stream_record(n, k, 0, ()) for n, k in ((2, "trampoline"), (4, "auipc"), (4, "jalr"),
                                                                    (2, None)))
    masked = riscv.stream_masks(recs, [(2, 8)])  # R_RISCV_CALL over auipc + jalr
    got = list(riscv.stream_decode(masked, 12))
    assert [(i.offset, i.length, i.kind, bool(i.masks)) for i in got] == [
        (0, 2, "trampoline", False), (2, 4, "auipc", True), (6, 4, "jalr", True), (10, 2, None, False)]
    assert masked[3] == table.REFUSED << 1


@pytest.mark.parametrize("name, before, value, after", [
    ("R_RISCV_BRANCH", 0x00B50063, 16, 0x00B50863),
    ("R_RISCV_JAL", 0x000000EF, 8, 0x008000EF),
    ("R_RISCV_RVC_JUMP", 0xA001, 8, 0xA021),
    ("R_RISCV_RVC_BRANCH", 0xC381, 8, 0xC781),
])
def test_branch_relocations_are_inserted(name, before, value, after):
    width = 2 if before & 3 != 3 else 4
    field = riscv.reloc_insert(name, before.to_bytes(width, "little"), value)
    assert int.from_bytes(field, "little") == after


def test_call_pair_rounds_the_high_part():
    pair = (0x000080E7 << 32) | 0x00000097  # auipc ra, 0; jalr ra, 0(ra)
    out = int.from_bytes(riscv.reloc_insert("R_RISCV_CALL_PLT", pair.to_bytes(8, "little"), 0x1800), "little")
    auipc, jalr = out & 0xFFFFFFFF, out >> 32
    hi, lo = auipc >> 12, jalr >> 20
    assert (hi << 12) + (lo - 0x1000 if lo & 0x800 else lo) == 0x1800
    assert riscv.reloc_type(51) is None and riscv.reloc_type(43).width == 0  # RELAX fills nothing; ALIGN refuses
