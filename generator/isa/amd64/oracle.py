"""How GNU objdump and valgrind see amd64 code: the quirks the decoder and hit-count proofs allow for.

- objdump prints a REX prefix the CPU ignores (one that another REX follows)
  as a pseudo-instruction ``rex.WRXB``; capstone folds it into the
  instruction, as the Intel SDM says the CPU does (vol. 2A, 2.2.1: one REX
  per instruction, other placements ignored, 40H-4FH "not treated as
  individual instructions" in 64-bit mode), so ``48 41 e8 rel32`` is one
  7-byte call whose target objdump prints on the line after ``rex.W``.
- objdump's branch mnemonics: jmp, jcc, jrcxz, call, loop*, xbegin (the
  operand decides whether it is direct).
- valgrind runs each iteration of a ``rep``-prefixed string instruction as a
  re-execution of the instruction (a jump to itself), while the CPU runs the
  whole loop from one fetch and the int3 fires once.
- objdump takes ``fwait`` (``9b``) for a prefix of the x87 instruction after
  it (escape opcodes ``d8``-``df``) and prints the pair as one instruction:
  ``9b db e3`` is its ``finit``, ``9b d9 38`` its ``fstcw``, even ``9b d9
  c0`` an ``fld``.  The CPU executes ``fwait`` on its own, then the ``fn``
  form (``fninit``); capstone decodes them so, and a probe may sit on
  either.
- objdump 2.40 does not know the Zhaoxin ``rep xsha512`` (``f3 0f a6 e0``,
  in OpenSSL's ``padlock_sha512_blocks``): it prints a 3-byte ``repz
  (bad)`` and then decodes from the wrong byte until it falls back in step.
  That is its ``(bad)`` behind a prefix (``generator/verify/objdump.py``
  strips ``prefix_words`` before looking for ``(bad)``); capstone cannot
  decode it either, and iced-x86 gives its length.
"""

from __future__ import annotations


from .probe_md import TABLE_KINDS
from ..contract import OracleQuirks

_PREFIXES = {0x26, 0x2E, 0x36, 0x3E, 0x64, 0x65, 0x66, 0x67, 0xF0, 0xF2, 0xF3}
_STRING_OPS = {0x6C, 0x6D, 0x6E, 0x6F, 0xA4, 0xA5, 0xA6, 0xA7, 0xAA, 0xAB, 0xAC, 0xAD, 0xAE, 0xAF}


def rep_string(orig: bytes) -> bool:
    """True for a rep/repe/repne-prefixed string instruction."""
    rep = False
    i = 0
    while i < len(orig) and orig[i] in _PREFIXES:
        rep = rep or orig[i] in (0xF2, 0xF3)
        i += 1
    if i < len(orig) and orig[i] & 0xF0 == 0x40:
        i += 1
    return rep and i < len(orig) and orig[i] in _STRING_OPS


def fused_wait(code: bytes) -> int:
    """1 when ``code`` starts with fwait followed by an x87 instruction, which objdump prints as one; else 0."""
    return 1 if len(code) >= 2 and code[0] == 0x9B and 0xD8 <= code[1] <= 0xDF else 0


def is_branch_mnemonic(mnem: str) -> bool:
    """jmp, jcc, jrcxz, call, loop*, xbegin (the operand decides direct or not)."""
    return mnem.startswith(("j", "call", "loop")) or mnem == "xbegin"


# objdump's names of a REX prefix: rex (0x40) and its bits, W R X B in that order.
_REX_WORDS = frozenset("rex" + s for s in ("", ".W", ".R", ".X", ".B", ".WR", ".WX", ".WB", ".RX", ".RB", ".XB",
                                           ".WRX", ".WRB", ".WXB", ".RXB", ".WRXB"))


def lone_rex(text: str) -> bool:
    """objdump's line for a REX prefix it prints alone (one the CPU ignores): its name and nothing after."""
    return text.rstrip(" ") in _REX_WORDS


QUIRKS = OracleQuirks(
    branch_mnemonic=is_branch_mnemonic,
    prefix_words=frozenset(
        {"bnd", "notrack", "data16", "data32", "addr32", "addr16", "cs", "ds", "es", "ss", "fs", "gs", "lock", "rep",
         "repz", "repe", "repnz", "repne", "xacquire", "xrelease"}
        | _REX_WORDS
    ),
    no_target_branches=frozenset({"loop", "loope", "loopne", "jrcxz", "jecxz", "xbegin"}),
    pcrel32_relocs=("R_X86_64_PC32", "R_X86_64_PLT32"),
    lone_prefix=lone_rex,
    lone_prefix_note="redundant REX",
    repeats_in_place=rep_string,
    conditional_kinds=TABLE_KINDS.names("jcc-widen", "jcc-rel32"),
    fused=fused_wait,
    fused_note="objdump fuses fwait into the x87 instruction after it",
    reloc_target_bias=4,
    gnu_triple="x86_64-linux-gnu",
    debian_arch="amd64",
)
