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
from ..dbp import Encoding, blocks, trap_register_regions

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
    blocks(words, T.LDX.has, T.STX.has, T.REASONS["ldx-block"], T.REASONS["ldx-unterminated"], out)


def _sysreg(w: int, move: Encoding, regs) -> Optional[str]:
    """The exception register an MRS or MSR (``move``) of one of ``regs`` names, else None."""
    return T.EXCEPTION_SYSREGS[w >> 5 & 0x7FFF] if move.has(w) and (w >> 5 & 0x7FFF) in regs else None


def _exception_registers(words: List[Tuple[int, int]], out: Dict[int, str]) -> None:
    trap_register_regions(
        words, lambda w: _sysreg(w, T.MRS, T.EXCEPTION_SYSREGS), lambda w: _sysreg(w, T.MSR, T.ERET_SYSREGS),
        T.ERET.has, lambda reg, at: T.REASONS["exception-entry"].format(sysreg=reg, at=at),
        lambda reg, at: T.REASONS["exception-return"].format(sysreg=reg, at=at), out)
