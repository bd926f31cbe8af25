"""amd64 accelerator: whole-function summaries with iced-x86.

capstone stays the decoder of record (``amd64.py``); it runs at about 1 M
instructions/s, too slow to sweep a 50 MB image quickly.  iced-x86 decodes
about ten times faster.  This module uses it only to produce a *summary* of a
function -- instruction count, probes by kind, refusals, the frame-pointer
verdict and the walk check -- and the tests prove, function by function on
real images, that the summary equals one computed from the capstone path
(``tests/test_accelerator.py``).  Anything it is unsure about (an invalid
encoding) falls back to the capstone path for that function.

Only "interesting" instructions -- branches, calls, traps, RIP-relative
operands and the refused mnemonics -- get a kind from their raw bytes; every
other instruction is a plain trampoline, exactly as ``amd64.classify`` says.
"""

from __future__ import annotations

from collections import Counter
from typing import Dict, NamedTuple, Optional

from iced_x86 import Code, CpuidFeature, Decoder, FlowControl, Instruction, Mnemonic, Register

from .. import records as R
from . import amd64_tables as T

# capstone base mnemonics of amd64_tables.REFUSED -> iced mnemonics.  Far
# call/jmp are found from their bytes (ff /3, ff /5), not by name.
_ICED_NAMES = {"iretl": "IRETD", "iretw": "IRET", "sysretl": "SYSRETD", "sysexitl": "SYSEXITD"}
REFUSED_ICED = frozenset(
    m
    for m in (
        getattr(Mnemonic, _ICED_NAMES.get(name, name.upper()), None)
        for name in T.REFUSED
        if not name.startswith(("lcall", "ljmp"))
    )
    if m is not None
)
_NEXT = FlowControl.NEXT
_MOV = Mnemonic.MOV
_SS = Register.SS
_GS = Register.GS
_GS_LOADERS = (Mnemonic.MOV, Mnemonic.POP, Mnemonic.LGS)
_INVALID = Code.INVALID


def _special_codes() -> bytes:
    """Per iced ``Code``: 1 when the instruction needs a closer look.

    That is any control transfer (flow control other than NEXT), a refused
    mnemonic, a load of a segment register, or an invalid encoding.  Flow
    control and mnemonic depend only on the code, so one table lookup replaces
    three attribute reads per instruction.
    """
    count = max(v for k, v in vars(Code).items() if k.isupper() and isinstance(v, int)) + 1
    table = bytearray(count)
    for c in range(count):
        probe = Instruction.create(c)
        mn = probe.mnemonic
        name = _code_name(c)
        gs_load = name.startswith(("POPW_GS", "POPD_GS", "POPQ_GS", "LGS_"))
        if probe.flow_control != _NEXT or mn in REFUSED_ICED or c == _INVALID or (mn == _MOV and "SREG" in name) or gs_load:
            table[c] = 1
        if c == _INVALID or _BEYOND_CAPSTONE.intersection(probe.cpuid_features()):
            table[c] = 2
    return bytes(table)


# CPUID features of instructions capstone 5 cannot decode (found by
# verify-decoder on real kernel modules and by assembling each one): a
# function holding one goes to the capstone path, which refuses the bytes.
_BEYOND_CAPSTONE = frozenset(
    getattr(CpuidFeature, name)
    for name in (
        "ENQCMD", "TDX", "SERIALIZE", "WRMSRNS", "MSRLIST", "UINTR", "HRESET", "RDPRU",
        "INVLPGB", "SEV_SNP", "RMPQUERY", "TSXLDTRK", "KL", "AESKLE", "WIDE_KL", "RAO_INT",
        "CMPCCXADD", "AMX_TILE", "AMX_INT8", "AMX_BF16", "AMX_FP16", "AMX_COMPLEX", "FRED",
        "LKGS", "PREFETCHITI", "SHA512", "SM3", "SM4", "AVX_IFMA", "AVX_NE_CONVERT",
        "AVX_VNNI_INT8", "AVX_VNNI_INT16",
    )
    if hasattr(CpuidFeature, name)
)


def _code_name(c: int) -> str:
    return _CODE_NAMES.get(c, "")


_CODE_NAMES = {v: k for k, v in vars(Code).items() if k.isupper() and isinstance(v, int)}
SPECIAL = _special_codes()


class Summary(NamedTuple):
    """What ``probes --summary`` prints for one function."""

    instructions: int
    kinds: Dict[str, int]  # probes with status ok, by kind
    skipped: int  # instructions refused on their own account
    frame_ok: bool  # the 'any' push %rbp rule
    first_byte_push: bool  # the 14.0 rule
    walk_error: str


def summarise(code: bytes, address: int, limit: int) -> Optional[Summary]:
    """Summarise the function whose bytes (plus a tail) are ``code``.

    Returns None when iced meets an encoding it calls invalid; the caller then
    uses the capstone path, which is the authority on such bytes.
    """
    special = SPECIAL
    kinds: Counter = Counter()
    skipped = 0
    frame = code[:1] == b"\x55"
    off = n = 0
    for ins in Decoder(64, code, ip=address):
        if off >= limit:
            break
        c = ins.code
        if special[c] or ins.is_ip_rel_memory_operand:
            if special[c] == 2:  # invalid, or beyond capstone: the capstone path decides
                return None
            mn = ins.mnemonic
            if mn in _GS_LOADERS and (mn == Mnemonic.LGS or ins.op0_register == _GS):
                return None  # a %gs load opens amd64.context_refusals' region: let the capstone path count it
            kind = _kind(code, off, ins.len, ins, ins.mnemonic)
            if kind is None:
                skipped += 1
            else:
                kinds[kind] += 1
        if not frame and code[off] == 0x55:
            frame = True
        n += 1
        off += ins.len
    if off < limit:
        return None  # ran out of bytes: let the capstone path report it
    walk = "" if off == limit else f"decode walk ends at +{off}, past the symbol's end at +{limit}"
    if off > limit:
        # The straddling instruction is refused by probes.py; mirror it.
        last = _last_kind(code, limit, address)
        if last is not None:
            kinds[last] -= 1
            skipped += 1
    plain = n - skipped - sum(kinds.values())
    if plain:
        kinds[R.KIND_TRAMPOLINE] += plain
    return Summary(n, dict(kinds), skipped, frame, code[:1] == b"\x55", walk)


def _last_kind(code: bytes, limit: int, address: int) -> Optional[str]:
    """Kind given to the instruction that straddles ``limit`` (None if refused)."""
    dec = Decoder(64, code, ip=address)
    ins = Instruction()
    off = 0
    while True:
        dec.decode_out(ins)
        if off + ins.len > limit:
            return _kind(code, off, ins.len, ins, ins.mnemonic)
        off += ins.len


def _kind(code: bytes, off: int, ln: int, ins: Instruction, mn: int) -> Optional[str]:
    """The kind ``amd64.classify`` gives, from raw bytes; None when refused."""
    if mn in REFUSED_ICED or (mn == _MOV and ins.op0_register == _SS):
        return None
    i = off
    end = off + ln
    while i < end and code[i] in T.PREFIXES:
        i += 1
    op = code[i]
    if op == 0x0F and 0x80 <= code[i + 1] <= 0x8F:
        return R.KIND_JCC32
    if op in T.JCC8:
        return R.KIND_JCC_WIDEN
    if op == 0xEB:
        return R.KIND_JMP_WIDEN
    if op == 0xE9:
        return R.KIND_JMP32
    if op == 0xE8:
        return R.KIND_CALL_DIRECT
    if op == 0xFF:
        modrm = code[i + 1]
        reg = (modrm >> 3) & 7
        if reg in (3, 5):
            return None  # far call / far jmp
        if reg == 2:
            if modrm >> 6 == 3:
                return R.KIND_CALL_REG
            if 0x67 in code[off:i]:
                return None  # addr32 call through memory (amd64_tables.ADDR32_CALL_REASON)
            if modrm & 0xC7 == 0x05:
                return R.KIND_CALL_RIPREL
            return R.KIND_CALL_MEM
    if ins.is_ip_rel_memory_operand:
        return R.KIND_RIPREL
    return R.KIND_TRAMPOLINE
