"""arm64: what kinst refuses beyond one word -- by function name, and the regions that span words.

kinst's verdict on one word (its class, the fields its emulation decodes,
kinstkit's kind or refusal) and the prologue rule are the portable core's:
``kinst_core_dissect()`` in ``sys/modules/kinst/arm64/kinst_core.c``, run
on the host with the step ``accel/kk_walk.c``, which cross-checks every
emulated word against capstone (the decoder of record) and raises
``ClassifierError`` on a disagreement instead of guessing.

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
  writing them and the eret (``context_refusals``, here).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from . import tables as T
from ..contract import BAD, Insn

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


def word(b: bytes) -> int:
    return int.from_bytes(b[:4], "little")


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
