"""Records passed between stages.

``Function`` (stage 1) lives in ``image.py``.  The decode/classify stage makes
one ``Probe`` per instruction, and the analysis stage wraps them in a
``FunctionReport``.  ``Probe`` is a NamedTuple rather than a dataclass because
a kernel has millions of instructions and NamedTuple construction is several
times cheaper; both are immutable.

The kinst fields (``flags`` .. ``scale``) hold exactly what FreeBSD's
``kinst_instr_dissect()`` would store in ``struct kinst_probe_md``, except where
docs/refusals.md lists a deliberate correction.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

# Emulation kinds: how a hit on this instruction is resumed.
KIND_TRAMPOLINE = "trampoline"  # copied verbatim, then jmp back
KIND_RIPREL = "riprel"  # copied, disp32 rewritten for the trampoline
KIND_JMP32 = "jmp-rel32"  # e9: disp32 rewritten
KIND_JCC32 = "jcc-rel32"  # 0f 8x: disp32 rewritten
KIND_JMP_WIDEN = "jmp-widen"  # eb rel8 -> e9 rel32
KIND_JCC_WIDEN = "jcc-widen"  # 7x rel8 -> 0f 8x rel32
KIND_CALL_DIRECT = "call-direct"  # e8: emulated
KIND_CALL_REG = "call-reg"  # ff /2, mod 3: emulated
KIND_CALL_MEM = "call-mem"  # ff /2 through memory: emulated
KIND_CALL_RIPREL = "call-riprel"  # ff /2 through (%rip): emulated
KIND_SKIP = "skip"

# The kinds a generated table can hold, in the order of their C enum values
# (enum kinst_kind in the rendered kinst_core.h): (kind, C name, comment).
TABLE_KINDS = (
    (KIND_TRAMPOLINE, "KINST_K_TRAMPOLINE", "copied verbatim, then jmp back"),
    (KIND_RIPREL, "KINST_K_RIPREL", "copied, disp32 rewritten for the trampoline"),
    (KIND_JMP32, "KINST_K_JMP32", "jmp rel32, disp32 rewritten"),
    (KIND_JCC32, "KINST_K_JCC32", "jcc rel32, disp32 rewritten"),
    (KIND_JMP_WIDEN, "KINST_K_JMP_WIDEN", "jmp rel8 widened to rel32"),
    (KIND_JCC_WIDEN, "KINST_K_JCC_WIDEN", "jcc rel8 widened to rel32"),
    (KIND_CALL_DIRECT, "KINST_K_CALL_DIRECT", "call rel32, emulated"),
    (KIND_CALL_REG, "KINST_K_CALL_REG", "call through a register, emulated"),
    (KIND_CALL_MEM, "KINST_K_CALL_MEM", "call through memory, emulated"),
    (KIND_CALL_RIPREL, "KINST_K_CALL_RIPREL", "call through (%rip) memory, emulated"),
)

STATUS_OK = "ok"
STATUS_SKIP = "skip"


class Probe(NamedTuple):
    """One instruction of a function and what kinst does with it."""

    offset: int  # from the function symbol; the probe name
    address: int  # patch point
    length: int  # instruction length
    bytes: bytes  # original bytes
    mnemonic: str  # AT&T, as capstone prints it
    operands: str
    status: str  # "ok" or "skip"
    reason: str  # why it is skipped ("" when ok)
    kind: str  # KIND_*
    flags: int  # KINST_F_* bits
    instlen: int
    tinstlen: int  # length in the trampoline (widened short jumps)
    template: bytes  # 16 bytes, displacement hole zeroed
    dispoff: int
    disp: int
    reg1: int  # -1: none; 0..15 in trapframe order rax..r15
    reg2: int
    scale: int
    target: Optional[int]  # direct branch/call target, when known
    target_symbol: Optional[str]  # symbolic target from a relocation (ET_REL)


class FunctionReport(NamedTuple):
    """The verdict for one function and its probes."""

    name: str
    qualified: str  # name@file for locals
    address: int
    size: int
    eligible: bool
    reason: str  # why the whole function is refused ("" when eligible)
    probes: Tuple[Probe, ...]
    walk_error: str  # decode walk that did not end at the symbol's end
