"""riscv classify: kinst's per-instruction verdict, the way ``riscv/kinst_isa.c`` computes it.

capstone (``decode.py``) is the decoder of record: it decides instruction
boundaries and names each instruction.  kinst's metadata (``instlen``,
``emulate``) and the fields its emulation decodes are computed from the
instruction's bits with kinst's own tests (``tables``), and every emulated
instruction is cross-checked against capstone: the mnemonic must be of the
class, and a branch's offset the one capstone prints.  A disagreement
raises ``ClassifierError`` instead of guessing.

Where kinst is wrong, kinstkit differs, and docs/refusals.md lists each
case: ``auipc`` with rd = x0 (a HINT) writes nothing (kinst writes through
a register offset of -1); the trap CSRs' regions are refused
(``context_refusals``).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from ...common.errors import ClassifierError
from ..contract import BAD, KIND_SKIP, STATUS_OK, STATUS_SKIP, Insn, Verdict
from . import tables as T
from .decode import SIZED
from .probe_md import (KIND_AUIPC, KIND_BRANCH, KIND_C_BRANCH, KIND_C_J, KIND_C_JR, KIND_JAL,
                                          KIND_JALR, KIND_TRAMPOLINE, ProbeMd, skip_md)

# kinst_md_excluded() on riscv, with the reasons.
MD_EXCLUDED: Dict[str, str] = {
    name: "the supervisor trap path: the breakpoint trap itself runs it"
    for name in ("cpu_exception_handler", "cpu_exception_handler_supervisor", "cpu_exception_handler_user",
                 "do_trap_supervisor", "do_trap_user")
}

PROLOGUE_REASONS: Dict[str, str] = {
    "any": "no function prologue: no sd ra, N(sp) or c.sdsp ra, N(sp) in the function's words (kinst refuses "
           "possible exception handlers)",
    "first": "no function prologue: the function's words lack a store of ra to the stack or a ret (kinst's "
             "first riscv rule, which also wanted the ret)",
}

_MASK64 = (1 << 64) - 1
_MNEMONICS: Dict[str, Tuple[str, ...]] = {
    KIND_JAL: ("jal", "j"),
    KIND_JALR: ("jalr", "jr", "ret"),
    KIND_BRANCH: ("beq", "bne", "blt", "bge", "bltu", "bgeu", "beqz", "bnez", "blez", "bgez", "bltz", "bgtz", "bgt",
                  "ble", "bgtu", "bleu"),
    KIND_AUIPC: ("auipc",),
    KIND_C_J: ("c.j",),
    KIND_C_BRANCH: ("c.beqz", "c.bnez"),
    KIND_C_JR: ("c.jr", "c.jalr"),
}
_KIND_OF_MNEMONIC = {m: k for k, ms in _MNEMONICS.items() for m in ms}
_OFFSET_KINDS = (KIND_JAL, KIND_BRANCH, KIND_C_J, KIND_C_BRANCH)  # capstone prints the offset, not the address


def _sext(value: int, bits: int) -> int:
    return value - (1 << bits) if value >> (bits - 1) & 1 else value


def _md(typ: str, insn: int, instlen: int, **fields) -> ProbeMd:
    base = dict(type=typ, emulate=typ != "common", instlen=instlen, insn=insn, rd=-1, rs1=-1, rs2=-1, imm=0,
                funct3=-1)
    base.update(fields)
    return ProbeMd(**base)


def _full(w: int) -> Tuple[str, ProbeMd]:
    """kind and metadata of a 4-byte instruction."""
    op, rd, rs1, rs2, f3 = w & 0x7F, w >> 7 & 31, w >> 15 & 31, w >> 20 & 31, w >> 12 & 7
    if op == T.OPCODE_JAL:
        imm = (w >> 31) << 20 | (w >> 21 & 0x3FF) << 1 | (w >> 20 & 1) << 11 | (w >> 12 & 0xFF) << 12
        return KIND_JAL, _md("jal", w, 4, rd=rd, imm=_sext(imm, 21))
    if op == T.OPCODE_JALR:
        return KIND_JALR, _md("jalr", w, 4, rd=rd, rs1=rs1, imm=_sext(w >> 20, 12))
    if op == T.OPCODE_BRANCH:
        imm = (w >> 31) << 12 | (w >> 25 & 0x3F) << 5 | (w >> 8 & 15) << 1 | (w >> 7 & 1) << 11
        return KIND_BRANCH, _md("branch", w, 4, rs1=rs1, rs2=rs2, imm=_sext(imm, 13), funct3=f3)
    if op == T.OPCODE_AUIPC:
        return KIND_AUIPC, _md("auipc", w, 4, rd=rd, imm=_sext(w & 0xFFFFF000, 32))
    return KIND_TRAMPOLINE, _md("common", w, 4)


def _compressed(h: int) -> Tuple[str, ProbeMd]:
    """kind and metadata of a 2-byte instruction."""
    if T.C_J.has(h):
        imm = ((h >> 12 & 1) << 11 | (h >> 11 & 1) << 4 | (h >> 9 & 3) << 8 | (h >> 8 & 1) << 10 | (h >> 7 & 1) << 6
               | (h >> 6 & 1) << 7 | (h >> 3 & 7) << 1 | (h >> 2 & 1) << 5)
        return KIND_C_J, _md("c.j", h, 2, imm=_sext(imm, 12))
    if T.C_BEQZ.has(h) or T.C_BNEZ.has(h):
        imm = (h >> 12 & 1) << 8 | (h >> 10 & 3) << 3 | (h >> 5 & 3) << 6 | (h >> 3 & 3) << 1 | (h >> 2 & 1) << 5
        typ = "c.beqz" if T.C_BEQZ.has(h) else "c.bnez"
        return KIND_C_BRANCH, _md(typ, h, 2, rs1=8 + (h >> 7 & 7), imm=_sext(imm, 9), funct3=0 if typ == "c.beqz" else 1)
    if T.C_JR_FAMILY.has(h) and h >> 7 & 31:
        link = bool(h >> 12 & 1)
        return KIND_C_JR, _md("c.jalr" if link else "c.jr", h, 2, rd=1 if link else 0, rs1=h >> 7 & 31)
    return KIND_TRAMPOLINE, _md("common", h, 2)


def _refusal(value: int, length: int) -> Optional[str]:
    """kinst's per-instruction skips (kinst_make_probe()) over the 32-bit value it reads."""
    if (length == 4 and value & 0x7F == T.OPCODE_SYSTEM) or (length == 2 and T.C_EBREAK.has(value & 0xFFFF)):
        return "system"
    if length == 4 and any(e.has(value) for e in T.LR + T.SC):
        return "lr-sc"
    return None


def _last_operand(operands: str) -> Optional[int]:
    text = operands.rsplit(",", 1)[-1].strip()
    try:
        return int(text, 0)
    except ValueError:
        return None


def _cross_check(kind: str, md: ProbeMd, address: int, mnemonic: str, operands: str) -> None:
    """The mnemonic capstone names must be the kind's, and the offset it prints the one computed."""
    bad = ""
    if kind in _MNEMONICS and mnemonic not in _MNEMONICS[kind]:
        bad = f"kind {kind}, mnemonic {mnemonic}"
    elif kind not in _MNEMONICS and mnemonic in _KIND_OF_MNEMONIC:
        bad = f"kind {kind or 'refused'}, but capstone names a {mnemonic}"
    elif kind in _OFFSET_KINDS and _last_operand(operands) != md.imm:
        bad = f"offset {md.imm:#x} computed, capstone prints {operands!r}"
    elif kind == KIND_AUIPC and (_last_operand(operands) or 0) & 0xFFFFF != md.insn >> 12:
        bad = f"imm20 {md.insn >> 12:#x} in the word, capstone prints {operands!r}"
    if bad:
        raise ClassifierError(f"{address:#x}: {md.insn:0{2 * md.instlen}x} ({mnemonic} {operands}): {bad}")


def classify(b: bytes, address: int, mnemonic: str, operands: str) -> Verdict:
    """kinst's metadata and kinstkit's verdict for one instruction."""
    length = len(b)
    if mnemonic == BAD or length not in (2, 4):
        return Verdict(STATUS_SKIP, T.REASONS["undecodable"], KIND_SKIP, skip_md(length), None)
    value = int.from_bytes(b, "little")
    kind, md = _full(value) if length == 4 else _compressed(value)
    why = _refusal(value, length)
    _cross_check(kind if why is None else "", md, address, mnemonic, operands)
    if why is not None:
        return Verdict(STATUS_SKIP, f"{mnemonic}: {T.REASONS[why]}", KIND_SKIP, md, None)
    target = (address + md.imm) & _MASK64 if kind in _OFFSET_KINDS else None
    return Verdict(STATUS_OK, "", kind, md, target)


def _csr(value: int) -> Tuple[bool, bool, int]:
    """(reads, writes, csr number) of a Zicsr instruction; (False, False, -1) for anything else."""
    if value & 0x7F != T.OPCODE_SYSTEM or not value >> 12 & 7:
        return False, False, -1
    f3, rd, rs1 = value >> 12 & 7, value >> 7 & 31, value >> 15 & 31
    swap = f3 & 3 == 1  # csrrw(i): reads only when rd != x0, always writes
    return (rd != 0 if swap else True), (True if swap else rs1 != 0), value >> 20


def context_refusals(insns: Sequence[Insn], code: bytes = b"") -> Dict[int, str]:
    """Offsets refused because of other instructions of the function, with the reason.

    - after bytes no decoder could size, every instruction (boundaries lost);
    - kinst's LR/SC blocks: from a load-reserved through the next
      store-conditional (both refused by ``classify`` already);
    - before the function's last read of a trap CSR (sstatus, sepc, scause,
      stval), and from a write of sepc or sstatus through the sret.
    """
    out: Dict[int, str] = {}
    values: List[Tuple[int, int, int]] = []
    lost = ""
    for i in insns:
        if lost:
            out[i.offset] = lost
            continue
        if i.mnemonic == BAD and i.operands != SIZED:
            lost = T.REASONS["lost"].format(at=i.offset)
        values.append((i.offset, i.length, int.from_bytes(code[i.offset : i.offset + 4].ljust(4, b"\0"), "little")))
    _lr_sc_blocks(values, out)
    _trap_csrs(values, out)
    return out


def _lr_sc_blocks(values: List[Tuple[int, int, int]], out: Dict[int, str]) -> None:
    block: List[int] = []
    inside = False
    for off, length, v in values:
        if _refusal(v, length) == "system":
            continue  # kinst skips SYSTEM instructions before it looks for LR/SC
        if any(e.has(v) for e in T.LR):
            inside = True
        elif any(e.has(v) for e in T.SC):
            for o in block:
                out.setdefault(o, T.REASONS["lr-sc"])
            block, inside = [], False
            continue
        if inside:
            block.append(off)
    for o in block:
        out.setdefault(o, T.REASONS["lr-sc-unterminated"])


def _trap_csrs(values: List[Tuple[int, int, int]], out: Dict[int, str]) -> None:
    last_read: Optional[Tuple[int, str]] = None
    for off, length, v in values:
        reads, _, csr = _csr(v) if length == 4 else (False, False, -1)
        if reads and csr in T.TRAP_CSRS:
            last_read = (off, T.TRAP_CSRS[csr])
    if last_read is not None:
        why = T.REASONS["trap-entry"].format(csr=last_read[1], at=last_read[0])
        for off, _, _ in values:
            if off <= last_read[0]:
                out.setdefault(off, why)
    live: Optional[str] = None
    for off, length, v in values:
        _, writes, csr = _csr(v) if length == 4 else (False, False, -1)
        if writes and csr in T.SRET_CSRS and live is None:
            live = T.REASONS["trap-return"].format(csr=T.TRAP_CSRS[csr], at=off)
        if live is not None:
            out.setdefault(off, live)
            if length == 4 and v == T.SRET:
                live = None


def frame_verdict(insns: Sequence[Insn], code: bytes, rule: str = "any") -> str:
    """kinst's prologue rule over the function's words (``kinst_make_probe()``); "" when it passes.

    kinst reads the function as 32-bit words from its symbol, whatever the
    instruction boundaries, and tests each word for ``sd ra, N(sp)`` and
    each of its halfwords for ``c.sdsp ra, N(sp)``; its first riscv version
    also wanted a ``ret`` or ``c.ret`` the same way (``first``).
    """
    size = insns[-1].offset + insns[-1].length if insns else 0
    store = ret = False
    p = 0
    while p < size and not (store and (ret or rule != "first")):
        w = int.from_bytes(code[p : p + 4].ljust(4, b"\0"), "little")
        # dtrace_instr_c_sdsp() and _c_ret() leave kinst's word pointer on the
        # halfword that matched, so the words after it are read 2 bytes on.
        if T.SD_RA_SP.has(w):
            store = True
        elif T.C_SDSP_RA.has(w & 0xFFFF) or T.C_SDSP_RA.has(w >> 16):
            store = True
            p += 0 if T.C_SDSP_RA.has(w & 0xFFFF) else 2
        elif T.RET.has(w):
            ret = True
        elif T.C_RET.has(w & 0xFFFF) or T.C_RET.has(w >> 16):
            ret = True
            p += 0 if T.C_RET.has(w & 0xFFFF) else 2
        p += 4
    if store and (rule != "first" or ret):
        return ""
    return PROLOGUE_REASONS[rule]
