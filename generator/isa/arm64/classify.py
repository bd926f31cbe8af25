"""arm64 classify: kinst's per-word verdict, the way ``aarch64/kinst_isa.c`` computes it.

capstone (``decode.py``) is the decoder of record: it names every word.  The
kinst metadata is computed from the word's bits with kinst's own masks
(``tables.KINST_CLASSES``), and every emulated word is cross-checked against
capstone: the mnemonic must be the class's, and the address capstone prints
for a branch, adr/adrp or literal load must be the one the emulation will
use.  A disagreement raises ``ClassifierError`` instead of guessing.

Where kinst is wrong or unsafe, kinstkit differs, and docs/refusals.md lists
each case:
- br, blr and ret are emulated (kinst copies them into the trampoline, which
  they leave without reaching its second breakpoint); the authenticated
  forms, eret and drps are refused;
- adr, adrp and ldr (literal) are emulated when they write a register that
  FreeBSD's EL1 exception return restores (kinst refuses them all), refused
  otherwise;
- cbz/cbnz on a W register compare 32 bits (kinst compares all 64), tbz/tbnz
  test bits 31-63 with a 64-bit mask (kinst shifts an int), and x30 and xzr
  are registers of their own (kinst indexes its trapframe's x[] with 30 and
  31, past its end);
- exception-generating instructions, BTI landing pads and accesses to the
  EL1 exception registers are refused, and so is every word a breakpoint
  trap would run before the function has read those registers or between
  writing them and the eret (``context_refusals``).
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Tuple

from ...common.errors import ClassifierError
from . import tables as T
from .probe_md import (KIND_ADR, KIND_ADRP, KIND_B, KIND_BCOND, KIND_BL, KIND_BR_REG, KIND_CBZ,
                                          KIND_LDR_LITERAL, KIND_TBZ, KIND_TRAMPOLINE, ProbeMd, skip_md)
from ..contract import BAD, KIND_SKIP, STATUS_OK, STATUS_SKIP, Insn, Verdict

# kinst_md_excluded() on arm64, with the reasons.
MD_EXCLUDED: Dict[str, str] = {
    "handle_el1h_sync": "the EL1 synchronous exception vector: the breakpoint exception itself arrives here",
    "do_el1h_sync": "the EL1 synchronous exception handler: the breakpoint exception itself runs it",
    "handle_el0_sync": "the EL0 synchronous exception vector (kinst's newer list)",
    "do_el0_sync": "the EL0 synchronous exception handler (kinst's newer list)",
}

# arm64 has one prologue rule (the FBT provider's), whichever --prologue-rule names.
_NO_PROLOGUE = ("no function prologue: neither a leading nop nor an stp x?, x?, [sp, #-N]! or sub sp, sp, #N "
                "(kinst refuses possible exception handlers)")
PROLOGUE_REASONS: Dict[str, str] = {"any": _NO_PROLOGUE, "first": _NO_PROLOGUE}

_MASK64 = (1 << 64) - 1
_IMM = re.compile(r"#(-?0x[0-9a-f]+|-?\d+)$")

# capstone's mnemonics of each emulated kind: the cross-check both ways.
_MNEMONICS: Dict[str, Tuple[str, ...]] = {
    KIND_B: ("b",), KIND_BL: ("bl",), KIND_CBZ: ("cbz", "cbnz"), KIND_TBZ: ("tbz", "tbnz"),
    KIND_ADR: ("adr",), KIND_ADRP: ("adrp",), KIND_LDR_LITERAL: ("ldr", "ldrsw", "prfm"),
    KIND_BR_REG: ("br", "blr", "ret"),
}
_KIND_OF_MNEMONIC = {m: k for k, ms in _MNEMONICS.items() for m in ms if k != KIND_LDR_LITERAL}


def _sext(value: int, bits: int) -> int:
    return value - (1 << bits) if value >> (bits - 1) & 1 else value


def word(b: bytes) -> int:
    return int.from_bytes(b[:4], "little")


def kinst_type(w: int) -> str:
    """kinst's class of the word (enum kinst_instr, lower case)."""
    for name, enc in T.KINST_CLASSES:
        if enc.has(w):
            return name
    if T.LDX.has(w):
        return "ldx"
    if T.STX.has(w):
        return "stx"
    if T.LDR_LITERAL.has(w):
        return "ldr_literal"
    return "common"


def _md(typ: str, w: int, **fields) -> ProbeMd:
    base = dict(type=typ, emulate=typ in T.KINST_EMULATED, insn=w, instlen=4, reg=-1, imm=0, cond=-1, bit=-1,
                nonzero=False, link=False, size=0, signed=False)
    base.update(fields)
    return ProbeMd(**base)


def _decode_fields(w: int, typ: str) -> Tuple[str, ProbeMd, Optional[str]]:
    """(kind, metadata, refusal key or None) from the word's bits alone."""
    if typ == "adr":
        imm = _sext((w >> 5 & 0x7FFFF) << 2 | (w >> 29 & 3), 21)
        page = bool(w >> 31)
        md = _md(typ, w, reg=w & 31, imm=imm << 12 if page else imm)
        return (KIND_ADRP if page else KIND_ADR), md, None if md.reg in T.WRITABLE_REGS else "adr-callee-saved"
    if typ in ("b", "bl"):
        return (KIND_B if typ == "b" else KIND_BL), _md(typ, w, imm=_sext(w & 0x3FFFFFF, 26) << 2,
                                                        link=typ == "bl"), None
    if typ == "bcond":
        return KIND_BCOND, _md(typ, w, imm=_sext(w >> 5 & 0x7FFFF, 19) << 2, cond=w & 15), None
    if typ == "cbz":
        return KIND_CBZ, _md(typ, w, reg=w & 31, imm=_sext(w >> 5 & 0x7FFFF, 19) << 2, nonzero=bool(w >> 24 & 1),
                             size=8 if w >> 31 else 4), None
    if typ == "tbz":
        return KIND_TBZ, _md(typ, w, reg=w & 31, imm=_sext(w >> 5 & 0x3FFF, 14) << 2, nonzero=bool(w >> 24 & 1),
                             bit=(w >> 31) << 5 | (w >> 19 & 31)), None
    if typ == "ldr_literal":
        imm = _sext(w >> 5 & 0x7FFFF, 19) << 2
        if w >> 26 & 1:
            return KIND_LDR_LITERAL, _md(typ, w, reg=w & 31, imm=imm), "ldr-literal-simd"
        size, signed = T.LDR_LITERAL_SIZES[w >> 30]
        reg = w & 31 if size else -1
        why = None if size == 0 or reg in T.WRITABLE_REGS else "ldr-literal-callee-saved"
        return KIND_LDR_LITERAL, _md(typ, w, reg=reg, imm=imm, size=size, signed=signed), why
    if typ in ("ldx", "stx"):
        return KIND_SKIP, _md(typ, w), "ldx-block"
    return _decode_common(w, typ)


def _decode_common(w: int, typ: str) -> Tuple[str, ProbeMd, Optional[str]]:
    """The words kinst copies into its trampoline, and which of them kinstkit emulates or refuses."""
    if T.BRANCH_REG.has(w):
        for enc, link in ((T.BR, False), (T.BLR, True), (T.RET, False)):
            if enc.has(w):
                return KIND_BR_REG, _md(typ, w, reg=w >> 5 & 31, link=link), None
        return KIND_SKIP, _md(typ, w), "branch-reg"
    if T.EXCEPTION.has(w) or T.UDF.has(w):
        return KIND_SKIP, _md(typ, w), "exception"
    if T.BTI.has(w) or T.PACIXSP.has(w):
        return KIND_SKIP, _md(typ, w), "bti"
    if (T.MRS.has(w) or T.MSR.has(w)) and (w >> 5 & 0x7FFF) in T.EXCEPTION_SYSREGS:
        return KIND_SKIP, _md(typ, w), "exception-register"
    return KIND_TRAMPOLINE, _md(typ, w), None


def _target(kind: str, md: ProbeMd, address: int) -> Optional[int]:
    """The address the emulation computes from the word: a branch target, adr/adrp's value, the literal's."""
    if kind == KIND_ADRP:
        return ((address & ~0xFFF) + md.imm) & _MASK64
    if kind in (KIND_B, KIND_BL, KIND_BCOND, KIND_CBZ, KIND_TBZ, KIND_ADR, KIND_LDR_LITERAL):
        return (address + md.imm) & _MASK64
    return None


def _cross_check(kind: str, md: ProbeMd, address: int, mnemonic: str, operands: str) -> None:
    """The mnemonic capstone names must be the kind's, and its address operand the one computed."""
    bad = ""
    if kind == KIND_BCOND:
        if not mnemonic.startswith(("b.", "bc.")):
            bad = f"kind {kind}, mnemonic {mnemonic}"
    elif kind in _MNEMONICS:
        if mnemonic not in _MNEMONICS[kind]:
            bad = f"kind {kind}, mnemonic {mnemonic}"
    elif (mnemonic in _KIND_OF_MNEMONIC or mnemonic.startswith("b.")) and \
            not any(enc.has(md.insn) for enc in T.NOT_PC_RELATIVE):
        bad = f"kind {kind}, but capstone names a {mnemonic}"
    want = _target(kind, md, address)
    if not bad and want is not None and not (kind == KIND_LDR_LITERAL and mnemonic == "prfm"):
        m = _IMM.search(operands)
        got = int(m.group(1), 0) & _MASK64 if m else None
        if got != want:
            bad = f"address {want:#x} computed, capstone prints {operands!r}"
    if bad:
        raise ClassifierError(f"{address:#x}: {md.insn:08x} ({mnemonic} {operands}): {bad}")


def classify(b: bytes, address: int, mnemonic: str, operands: str) -> Verdict:
    """kinst's metadata and kinstkit's verdict for one word."""
    if mnemonic == BAD or len(b) != 4:
        return Verdict(STATUS_SKIP, T.REASONS["undecodable"], KIND_SKIP, skip_md(len(b)), None)
    w = word(b)
    typ = kinst_type(w)
    kind, md, why = _decode_fields(w, typ)
    _cross_check(kind if kind != KIND_SKIP else "", md, address, mnemonic, operands)
    target = _target(kind, md, address) if kind in (KIND_B, KIND_BL, KIND_BCOND, KIND_CBZ, KIND_TBZ) else None
    if why is not None:
        sysreg = T.EXCEPTION_SYSREGS.get(w >> 5 & 0x7FFF, "")
        return Verdict(STATUS_SKIP, f"{mnemonic}: " + T.REASONS[why].format(reg=md.reg, sysreg=sysreg), KIND_SKIP,
                       md, target)
    return Verdict(STATUS_OK, "", kind, md, target)


def context_refusals(insns: Sequence[Insn], code: bytes = b"") -> Dict[int, str]:
    """Offsets refused because of other words of the function, with the reason.

    - kinst's LDX/STX blocks: from a load-exclusive through the next
      store-exclusive (both refused by ``classify`` already);
    - before the function's last read of an EL1 exception register, and from
      a write of ELR_EL1/SPSR_EL1 through the eret that consumes it.
    """
    out: Dict[int, str] = {}
    words = [(i.offset, word(code[i.offset : i.offset + 4])) for i in insns if i.length == 4 and i.mnemonic != BAD]
    _exclusive_blocks(words, out)
    _exception_registers(words, out)
    return out


def _exclusive_blocks(words: List[Tuple[int, int]], out: Dict[int, str]) -> None:
    open_block: List[int] = []
    inside = False
    for off, w in words:
        if T.LDX.has(w):
            inside = True
        elif T.STX.has(w):
            for o in open_block:
                out.setdefault(o, T.REASONS["ldx-block"])
            open_block, inside = [], False
            continue
        if inside:
            open_block.append(off)
    for o in open_block:
        out.setdefault(o, T.REASONS["ldx-unterminated"])


def _exception_registers(words: List[Tuple[int, int]], out: Dict[int, str]) -> None:
    last_read: Optional[Tuple[int, str]] = None
    for off, w in words:
        reg = w >> 5 & 0x7FFF
        if T.MRS.has(w) and reg in T.EXCEPTION_SYSREGS:
            last_read = (off, T.EXCEPTION_SYSREGS[reg])
    if last_read is not None:
        why = T.REASONS["exception-entry"].format(sysreg=last_read[1], at=last_read[0])
        for off, _ in words:
            if off <= last_read[0]:
                out.setdefault(off, why)
    live: Optional[str] = None
    for off, w in words:
        reg = w >> 5 & 0x7FFF
        if T.MSR.has(w) and reg in T.ERET_SYSREGS and live is None:
            live = T.REASONS["exception-return"].format(sysreg=T.EXCEPTION_SYSREGS[reg], at=off)
        if live is not None:
            out.setdefault(off, live)
            if T.ERET.has(w):
                live = None


def frame_verdict(insns: Sequence[Insn], code: bytes, rule: str = "any") -> str:
    """kinst's prologue rule (``kinst_make_probe()``); "" when the function passes."""
    words = [word(code[i.offset : i.offset + 4]) for i in insns if len(code) >= i.offset + 4]
    k = 1 if words and T.BTI.has(words[0]) else 0
    if k < len(words) and words[k] == T.NOP:
        return ""
    for w in words[k:]:
        if T.STP_PRE_64.has(w) and (w >> 5 & 31) == 31:
            return ""
        if T.SUB_SP_IMM.has(w) and (w & 31) == 31 and (w >> 5 & 31) == 31:
            return ""
    return PROLOGUE_REASONS[rule]
