"""riscv: what kinst refuses beyond one instruction -- by function name, and the regions that span instructions.

kinst's verdict on one instruction (``instlen``, ``emulate``, the fields
its emulation decodes, the SYSTEM and LR/SC skips) and the prologue rule
are the portable core's: ``kinst_core_dissect()`` in
``sys/modules/kinst/riscv/kinst_core.c``, run on the host with the step
``accel/kk_walk.c``, which cross-checks every emulated instruction against
capstone (the decoder of record: the mnemonic must be of the class, and a
branch's offset the one capstone prints) and raises ``ClassifierError`` on
a disagreement instead of guessing.

Where kinst is wrong, kinstkit differs, and docs/refusals.md lists each
case: ``auipc`` with rd = x0 (a HINT) writes nothing (kinst writes through
a register offset of -1); the trap CSRs' regions are refused
(``context_refusals``, here).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from ..contract import BAD, Insn
from . import tables as T
from .decode import SIZED
from ..dbp import blocks, trap_register_regions

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



def _refusal(value: int, length: int) -> Optional[str]:
    """kinst's skip of a SYSTEM instruction (``kinst_make_probe()``), which it makes before it looks for LR/SC."""
    if (length == 4 and value & 0x7F == T.OPCODE_SYSTEM) or (length == 2 and T.C_EBREAK.has(value & 0xFFFF)):
        return "system"
    return None


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
    # kinst skips SYSTEM instructions before it looks for LR/SC
    blocks([(off, v) for off, length, v in values if _refusal(v, length) != "system"],
           lambda v: any(e.has(v) for e in T.LR), lambda v: any(e.has(v) for e in T.SC), T.REASONS["lr-sc"],
           T.REASONS["lr-sc-unterminated"], out)


def _trap_csr(lv: Tuple[int, int], reading: bool, csrs) -> Optional[str]:
    """The trap CSR among ``csrs`` a 4-byte instruction ``(length, value)`` reads (or writes), else None."""
    length, v = lv
    reads, writes, csr = _csr(v) if length == 4 else (False, False, -1)
    return T.TRAP_CSRS[csr] if (reads if reading else writes) and csr in csrs else None


def _trap_csrs(values: List[Tuple[int, int, int]], out: Dict[int, str]) -> None:
    trap_register_regions(
        [(off, (length, v)) for off, length, v in values], lambda lv: _trap_csr(lv, True, T.TRAP_CSRS),
        lambda lv: _trap_csr(lv, False, T.SRET_CSRS), lambda lv: lv == (4, T.SRET),
        lambda csr, at: T.REASONS["trap-entry"].format(csr=csr, at=at),
        lambda csr, at: T.REASONS["trap-return"].format(csr=csr, at=at), out)
