"""amd64 accelerator: whole-function summaries with iced-x86.

capstone stays the decoder of record (``decode.py``, ``classify.py``); it runs at about 1 M
instructions/s, too slow to sweep a 50 MB image quickly.  iced-x86 decodes
about ten times faster.  This module uses it only to produce a *summary* of a
function -- instruction count, probes by kind, refusals, the frame-pointer
verdict and the walk check -- and the tests prove, function by function on
real images, that the summary equals one computed from the capstone path
(``tests/toolchain/test_accelerator.py``).  Anything it is unsure about (an invalid
encoding, an instruction capstone cannot decode, a %gs load) falls back to
the capstone path for that function.

Each iced ``Code`` maps to one action in ``ACTIONS``, computed once at
import: most codes fix the kind by themselves (plain, a widened jcc, a direct
call, refused); only indirect calls and jumps, segment loads and the like look
at their operands (``_kind``, from the raw bytes, as ``classify.classify`` does).
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

from iced_x86 import (Code, CpuidFeature, Decoder, FlowControl, Instruction, Mnemonic, OpCodeInfo, OpCodeOperandKind,
                      Register)

from . import probe_md as M
from . import tables as T
from .summaryrec import KIND_CODES, Summary
from .table import REFUSED as T_REFUSED
from .table import RIPREL_IMM as T_RIPREL_IMM

# capstone base mnemonics of tables.REFUSED -> iced mnemonics.  Far
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


# Per-code actions of the hot loop.  A code either fixes the kind by itself
# (a rel8 jcc is always widened, a call rel32 always emulated), or needs the
# operands (DETAIL), or is refused outright (REFUSE), or is left to capstone
# (DECLINE).  Zero means "plain instruction": a trampoline, or riprel if its
# memory operand is %rip-relative.
KIND_NAMES = {i: kind for kind, i in KIND_CODES.items()}
_RIPREL = KIND_CODES[M.KIND_RIPREL]
_TRAMPOLINE = KIND_CODES[M.KIND_TRAMPOLINE]
_KINDS_BY_NAME = sorted(KIND_CODES.items())  # a summary lists its kinds in name order
DETAIL = 253
REFUSE = 254
DECLINE = 255

# (flow control, code-name suffix) -> kind fixed by the code alone.
_FIXED = {
    (FlowControl.CONDITIONAL_BRANCH, "_REL8_64"): M.KIND_JCC_WIDEN,
    (FlowControl.CONDITIONAL_BRANCH, "_REL32_64"): M.KIND_JCC32,
    (FlowControl.UNCONDITIONAL_BRANCH, "_REL8_64"): M.KIND_JMP_WIDEN,
    (FlowControl.UNCONDITIONAL_BRANCH, "_REL32_64"): M.KIND_JMP32,
    (FlowControl.CALL, "_REL32_64"): M.KIND_CALL_DIRECT,
}


def _action(c: int) -> int:
    """What the hot loop does with an instruction of iced code ``c``."""
    probe = Instruction.create(c)
    mn = probe.mnemonic
    name = _code_name(c)
    if c == _INVALID or _BEYOND_CAPSTONE.intersection(probe.cpuid_features()):
        return DECLINE
    if mn in REFUSED_ICED:
        return REFUSE
    if (mn == _MOV and "SREG" in name) or name.startswith(("POPW_GS", "POPD_GS", "POPQ_GS", "LGS_")):
        return DETAIL  # %ss loads are refused, %gs loads open a refused region
    flow = probe.flow_control
    if flow == _NEXT or flow in (FlowControl.RETURN, FlowControl.XBEGIN_XABORT_XEND):
        return 0
    for (f, suffix), kind in _FIXED.items():
        if flow == f and name.endswith(suffix) and (mn, f) != (Mnemonic.JMPE, f):
            return KIND_CODES[kind]
    return DETAIL  # indirect calls and jumps, far transfers, anything unusual


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
_CODE_NAMES = {v: k for k, v in vars(Code).items() if k.isupper() and isinstance(v, int)}


def _code_name(c: int) -> str:
    return _CODE_NAMES.get(c, "")


ACTIONS = bytes(_action(c) for c in range(max(_CODE_NAMES) + 1))

# The summary loop refines the plain action (0): an instruction whose
# operands cannot be memory needs no %rip check, and only ``push %rbp`` (the
# one plain code that can start with 0x55) needs its first byte read for the
# frame-pointer verdict.  Each iced attribute read costs a call into Rust, so
# skipping them where the code alone decides is most of the loop's speed.
PLAIN_MEM = 250
PUSH_R64 = 251
_MEM_OPERANDS = frozenset(v for k, v in vars(OpCodeOperandKind).items()
                          if k.isupper() and ("MEM" in k or k == "SIBMEM"))


def _summary_action(c: int) -> int:
    a = ACTIONS[c]
    if a != 0:
        return a
    if c == Code.PUSH_R64:
        return PUSH_R64
    info = OpCodeInfo(c)
    return PLAIN_MEM if any(info.op_kind(i) in _MEM_OPERANDS for i in range(info.op_count)) else 0


SUMMARY_ACTIONS = bytes(_summary_action(c) for c in range(len(ACTIONS)))


def summarise(code: bytes, address: int, limit: int) -> Optional[Summary]:
    """Summarise the function whose bytes (plus a tail) are ``code``.

    Only the symbol's own ``limit`` bytes are decoded, so an instruction that
    straddles the end comes out truncated, that is invalid.  Returns None for
    any invalid encoding (that one included) and for anything beyond
    capstone; the caller then uses the capstone path, the authority on such
    bytes and on walk errors.

    The loop is the hot path of ``probes --all --summary``: per instruction it
    reads the code, one table entry and, for plain instructions, whether the
    memory operand is %rip-relative.
    """
    actions = SUMMARY_ACTIONS
    counts = [0] * 256
    frame = code[:1] == b"\x55"
    n = 0
    for n, ins in enumerate(Decoder(64, code[:limit], ip=address), 1):
        a = actions[ins.code]
        if a == 0:
            continue
        if a == PLAIN_MEM:
            if ins.is_ip_rel_memory_operand:
                counts[_RIPREL] += 1
        elif a < DETAIL:
            if a == PUSH_R64:
                frame = frame or code[ins.ip - address] == 0x55
            else:
                counts[a] += 1
        elif a == REFUSE:
            counts[REFUSE] += 1
        elif a == DECLINE:
            return None
        else:
            mn = ins.mnemonic
            if mn in _GS_LOADERS and (mn == Mnemonic.LGS or ins.op0_register == _GS):
                return None  # a %gs load opens classify.context_refusals' region: the capstone path counts it
            kind = _kind(code, ins.ip - address, ins.len, ins, mn)
            counts[REFUSE if kind is None else KIND_CODES[kind]] += 1
    skipped = counts[REFUSE]
    counts[_TRAMPOLINE] += n - skipped - sum(counts[1 : len(KIND_NAMES) + 1])
    kinds = {name: counts[i] for name, i in _KINDS_BY_NAME if counts[i]}
    first = code[:1] == b"\x55"
    rules = ("any", "first") if first else ("any",) if frame else ()
    return Summary(n, kinds, skipped, rules, "")


def _kind(code: bytes, off: int, ln: int, ins: Instruction, mn: int) -> Optional[str]:
    """The kind ``classify.classify`` gives, from raw bytes; None when refused."""
    if mn in REFUSED_ICED or (mn == _MOV and ins.op0_register == _SS):
        return None
    i = off
    end = off + ln
    while i < end and code[i] in T.PREFIXES:
        i += 1
    op = code[i]
    if op == 0x0F and 0x80 <= code[i + 1] <= 0x8F:
        return M.KIND_JCC32
    if op in T.JCC8:
        return M.KIND_JCC_WIDEN
    if op == 0xEB:
        return M.KIND_JMP_WIDEN
    if op == 0xE9:
        return M.KIND_JMP32
    if op == 0xE8:
        return M.KIND_CALL_DIRECT
    if op == 0xFF:
        modrm = code[i + 1]
        reg = (modrm >> 3) & 7
        if reg in (3, 5):
            return None  # far call / far jmp
        if reg == 2:
            if modrm >> 6 == 3:
                return M.KIND_CALL_REG
            if 0x67 in code[off:i]:
                return None  # addr32 call through memory (tables.ADDR32_CALL_REASON)
            if not T.BASED_SEGMENT_PREFIXES.isdisjoint(code[off:i]):
                return None  # %fs:/%gs: call through memory (tables.SEGMENT_CALL_REASON)
            if modrm & 0xC7 == 0x05:
                return M.KIND_CALL_RIPREL
            return M.KIND_CALL_MEM
    if ins.is_ip_rel_memory_operand:
        return M.KIND_RIPREL
    return M.KIND_TRAMPOLINE


class Stream(NamedTuple):
    """A function's table records (``table.py``), as ``plan`` builds them."""

    records: bytes  # one record per instruction, no masked fields
    refused: Tuple[Tuple[int, int], ...]  # (offset, length) of each refused instruction
    instructions: int
    frame_rules: Tuple[str, ...]  # the prologue rules the function passes


# Record codes (table.py) by this module's kind codes (ACTIONS values 1..).
_RECORD = {KIND_CODES[k.kind]: i for i, k in enumerate(M.TABLE_KINDS)}


def stream(code: bytes, address: int, limit: int) -> Optional[Stream]:
    """The table records of the function whose bytes (plus a tail) are ``code``.

    The same decisions as ``summarise`` (and None in the same cases), one
    record per instruction instead of counts; the tests hold the records
    equal to those the capstone path encodes.  A %rip-relative operand's
    immediate size comes from iced's constant offsets.
    """
    actions = ACTIONS
    dec = Decoder(64, code[:limit], ip=address)
    out = bytearray()
    refused = []
    frame = code[:1] == b"\x55"
    n = 0
    for ins in dec:
        n += 1
        a = actions[ins.code]
        ln = ins.len
        off = ins.ip - address
        if a == 0:
            if ins.is_ip_rel_memory_operand:
                rec = _riprel(dec, ins, ln)
                if rec < 0:
                    return None
            else:
                rec = ln - 1
        elif a < DETAIL:
            rec = (ln - 1) | _RECORD[a] << 4
        elif a == REFUSE:
            rec = (ln - 1) | T_REFUSED << 4
            refused.append((off, ln))
        elif a == DECLINE:
            return None
        else:
            mn = ins.mnemonic
            if mn in _GS_LOADERS and (mn == Mnemonic.LGS or ins.op0_register == _GS):
                return None
            kind = _kind(code, off, ln, ins, mn)
            if kind is None:
                rec = (ln - 1) | T_REFUSED << 4
                refused.append((off, ln))
            elif kind == M.KIND_RIPREL:
                rec = _riprel(dec, ins, ln)
                if rec < 0:
                    return None
            else:
                rec = (ln - 1) | _RECORD[KIND_CODES[kind]] << 4
        out.append(rec)
        if not frame and code[off] == 0x55:
            frame = True
    first = code[:1] == b"\x55"
    rules = ("any", "first") if first else ("any",) if frame else ()
    return Stream(bytes(out), tuple(refused), n, rules)


def _riprel(dec: Decoder, ins: Instruction, ln: int) -> int:
    """The record byte of a %rip-relative instruction, or -1 when its immediate size has no code."""
    co = dec.get_constant_offsets(ins)
    code = T_RIPREL_IMM.get(ln - 4 - co.displacement_offset)
    return -1 if code is None else (ln - 1) | code << 4
