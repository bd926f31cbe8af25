"""amd64 classify: kinst's per-instruction verdict, the way ``kinst_isa.c`` computes it.

capstone (``decode.py``) is the decoder of record: it decides instruction
boundaries, mnemonics and operands.  The kinst metadata is computed from the raw bytes,
following ``kinst_instr_dissect()`` field by field, and every RIP-relative
verdict is cross-checked against capstone's operand text.  A disagreement
raises ``ClassifierError`` instead of guessing.

Where kinst is wrong we are right, and docs/refusals.md lists each case:
- a SIB index of 100 without REX.X means no index (kinst uses %rsp);
- a SIB base of 101 with mod 00 means disp32 and no base (kinst drops the
  disp32), and with mod 01/10 it means %rbp/%r13 (kinst drops the base);
- a prefixed short jump widens to prefixes + 5 or + 6 bytes (kinst always
  uses 5 or 6, cutting the displacement);
- a REX byte counts only when it immediately precedes the opcode, and 0xf1
  (int1) is an opcode, not a prefix;
- ud0/ud1 take a ModR/M byte (capstone 5 decodes them as two bytes);
- loop/loope/loopne, far transfers, traps and the rest of ``REFUSED`` are
  refused instead of being copied verbatim, and so is the region after a load
  of the %gs selector (``context_refusals``);
- an emulated call through memory with an address-size (0x67) or an %fs/%gs
  segment prefix is refused: the emulation computes neither a 32-bit address
  nor a segment base.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Tuple

from ...common.defaults import PROLOGUE_NONE
from ...common.errors import ClassifierError
from . import tables as T
from .decode import SIZED_BY_ICED, modrm_index
from .probe_md import (KIND_CALL_DIRECT, KIND_CALL_MEM, KIND_CALL_REG, KIND_CALL_RIPREL,
                                         KIND_JCC32, KIND_JCC_WIDEN, KIND_JMP32, KIND_JMP_WIDEN, KIND_RIPREL,
                                         KIND_TRAMPOLINE, KinstFlag, ProbeMd, skip_md)
from ..contract import BAD, KIND_SKIP, STATUS_OK, STATUS_SKIP, Insn, Verdict

# Functions refused by name on amd64, with the reason.  kinst_md_excluded() is
# empty on amd64; these are kinstkit's additions (docs/refusals.md).
#
# The bhyve (vmm.ko) world-switch routines begin with push %rbp, so kinst's
# prologue rule accepts them.
#
# The rest run in NMI context.  An NMI blocks further NMIs until the next
# iretq; a #BP taken inside the handler ends with iretq too, which unblocks
# NMIs while the CPU is still on the NMI's IST stack, so a second NMI reuses
# that stack and overwrites the frame the first one will return through.
# The NMI path on amd64 (sys/amd64/amd64/trap.c, sys/x86/x86/cpu_machdep.c,
# mp_x86.c, stack_machdep.c, x86/isa/nmi.c, sys/dev/hwpmc/): IDTVEC(nmi)
# calls trap(), which hands a T_NMI to ipi_nmi_handler() (IPI_STOP_HARD is
# sent as an NMI; it runs cpustop_handler()), to the hwpmc interrupt hook
# pmc_intr (performance-counter interrupts are delivered as NMIs: the local
# APIC's PMC LVT entry uses NMI delivery), to stack_nmi_handler() (the stack
# of a thread running on another CPU is sampled with an NMI), then to
# nmi_handle_intr() and nmi_call_kdb[_smp]() (isa_nmi() decodes a chipset
# NMI; kdb_trap() follows, already refused by its kdb_ prefix).
_NMI = (
    "runs in NMI context, where a #BP ends with iretq, which unblocks NMIs while still on the NMI stack: "
    "a second NMI would overwrite the frame in use"
)
MD_EXCLUDED: Dict[str, str] = {
    "vmx_enter_guest": (
        "bhyve VMX world switch: from the guest-state restore to VM entry, and from VM exit to the host-state "
        "restore, %rsp points at the vmxctx structure, so a #BP pushes its trap frame into it; guest registers "
        "and %cr2 are live"
    ),
    "svm_launch": (
        "bhyve SVM world switch: vmload loads the guest's GS base before vmrun and the host's comes back only "
        "afterwards; a #BP in between runs the trap handler with the guest GS base"
    ),
    "trap": f"the trap handler; for a T_NMI it {_NMI}",
    "nmi_handle_intr": f"NMI dispatch from trap(); it {_NMI}",
    "nmi_call_kdb": f"NMI to the debugger, from nmi_handle_intr(); it {_NMI}",
    "nmi_call_kdb_smp": f"broadcast NMI to the debugger, from nmi_handle_intr(); it {_NMI}",
    "isa_nmi": f"decodes a chipset NMI for nmi_call_kdb(); it {_NMI}",
    "ipi_nmi_handler": f"IPI_STOP_HARD is delivered as an NMI and handled here, from trap(); it {_NMI}",
    "cpustop_handler": f"stops this CPU for ipi_nmi_handler(); it {_NMI}",
    "cpustop_handler_post": f"restarts a CPU stopped by an NMI (cpustop_handler(), nmi_call_kdb_smp()); it {_NMI}",
    "savectx": f"saves the stopped CPU's context in cpustop_handler() and nmi_call_kdb_smp(); it {_NMI}",
    "stack_nmi_handler": f"samples a running thread's stack for another CPU, from trap(); it {_NMI}",
    "stack_capture": f"walks the stack for stack_nmi_handler(); it {_NMI}",
    "pmc_process_interrupt": f"hwpmc's sample path, from the counter-overflow interrupt (an NMI on x86); it {_NMI}",
    "pmc_add_sample": f"hwpmc: records a sample for pmc_process_interrupt(); it {_NMI}",
    "pmc_save_kernel_callchain": f"hwpmc: walks the kernel stack for a sample; it {_NMI}",
    "core_intr": f"hwpmc's Intel counter-overflow handler (pmc_intr); it {_NMI}",
    "core2_intr": f"hwpmc's Intel counter-overflow handler (pmc_intr); it {_NMI}",
    "amd_intr": f"hwpmc's AMD counter-overflow handler (pmc_intr); it {_NMI}",
    "lapic_reenable_pmc": f"unmasks the PMC interrupt at the end of hwpmc's handlers; it {_NMI}",
}
# The NMI path's entry points: the functions above that run only in NMI context (trap() runs for every
# trap, so not it).  Whatever the image shows them calling directly runs in NMI context too, and is refused
# with them (generator/analysis/exclusions.py: nmi_closure; docs/refusals.md).
NMI_ENTRIES: Tuple[str, ...] = tuple(n for n, why in MD_EXCLUDED.items() if why.endswith(_NMI) and n != "trap")
NMI_REASON = _NMI

# kinst's frame-pointer prologue rules, and why a function fails each.
PROLOGUE_REASONS: Dict[str, str] = {
    "any": "no frame-pointer prologue: no push %rbp in the function (kinst refuses possible exception handlers)",
    "first": "no frame-pointer prologue: first instruction is not push %rbp (kinst 14.0 rule)",
}

_F_CALL = int(KinstFlag.CALL)
_F_DIRECT = int(KinstFlag.DIRECT_CALL)
_F_RIPREL = int(KinstFlag.RIPREL)
_F_JMP = int(KinstFlag.JMP)
_F_MODDIR = int(KinstFlag.MOD_DIRECT)

_RIP_DISP = re.compile(r"(-?0x[0-9a-f]+|-?\d+)?\(%[re]ip\)")

# Hot-path aliases of the tables (one global lookup instead of two).
_PREFIXES = T.PREFIXES
_JCC8 = T.JCC8
_REFUSED = T.REFUSED
_BASED_SEGMENTS = T.BASED_SEGMENT_PREFIXES


def _s8(x: int) -> int:
    return x - 256 if x & 0x80 else x


def _s32(b: bytes, i: int) -> int:
    v = b[i] | b[i + 1] << 8 | b[i + 2] << 16 | b[i + 3] << 24
    return v - (1 << 32) if v & 0x80000000 else v


def classify(b: bytes, address: int, mnemonic: str, operands: str) -> Verdict:
    """Compute kinst's per-probe metadata and our verdict for one instruction."""
    ilen = len(b)
    if mnemonic == BAD:
        return Verdict(STATUS_SKIP, T.UNDECODABLE_REASON, KIND_SKIP, skip_md(ilen), None)

    # Skip prefixes, remember REX (kinst_instr_dissect's first loop).  A REX
    # byte counts only when it is the last prefix: the CPU ignores one that a
    # legacy prefix follows (kinst keeps it, and would emulate `41 2e ff d3`,
    # call *%rbx, as call *%r11).
    rex = 0
    i = 0
    while i < ilen and b[i] in _PREFIXES:
        rex = b[i] if b[i] & 0xF0 == 0x40 else 0
        i += 1
    if i >= ilen:
        raise ClassifierError(f"{address:#x}: only prefixes in {b.hex()}")
    opcidx = i
    op = b[opcidx]

    flags = 0
    dispoff = -1
    disp = 0
    reg1 = reg2 = scale = 0
    rm = modrm_index(b, opcidx)

    rel32 = False
    if op == 0x0F and opcidx + 1 < ilen and 0x80 <= b[opcidx + 1] <= 0x8F:
        flags = _F_JMP | _F_RIPREL
        dispoff = opcidx + 2
        rel32 = True
    elif op in _JCC8 or op == 0xEB:
        flags = _F_JMP | _F_RIPREL
        dispoff = opcidx + 1
        disp = _s8(b[dispoff])
    elif op == 0xE9:
        flags = _F_JMP | _F_RIPREL
        dispoff = opcidx + 1
        rel32 = True
    elif op == 0xE8:
        flags = _F_CALL | _F_DIRECT
        dispoff = opcidx + 1
        rel32 = True
    elif op == 0xFF and rm >= 0:
        reg = (b[rm] >> 3) & 7
        if reg in (2, 3):  # as kinst; ff /3 (far) is refused below
            flags = _F_CALL
        elif reg in (4, 5):
            flags = _F_JMP
    if rel32:
        if dispoff + 4 > ilen:  # 66-prefixed: capstone read a rel16
            base = mnemonic.rsplit(" ", 1)[-1]
            return Verdict(STATUS_SKIP, f"{base}: {T.REL16_BRANCH_REASON}", KIND_SKIP, skip_md(ilen), None)
        disp = _s32(b, dispoff)

    rip_modrm = False
    if rm >= 0:
        reg1 = reg2 = -1
        modrm = b[rm]
        mod, r_m = modrm >> 6, modrm & 7
        if mod == 0 and r_m == 5:
            rip_modrm = True
            flags |= _F_RIPREL
            dispoff = rm + 1
            disp = _s32(b, dispoff)
        elif flags & _F_CALL:
            havesib = mod != 3 and r_m == 4
            dispoff = rm + (2 if havesib else 1)
            if havesib:
                sib = b[rm + 1]
                base, index = sib & 7, (sib >> 3) & 7
                scale = sib >> 6
                if not (base == 5 and mod == 0):  # kinst: base != 5 only
                    reg1 = base | (rex & 1) << 3
                if index != 4 or rex & 2:  # kinst: always sets reg2
                    reg2 = index | (rex & 2) << 2
                if base == 5 and mod == 0:  # kinst: disp32 never read
                    disp = _s32(b, dispoff)
            else:
                reg1 = r_m | (rex & 1) << 3
            if mod == 1:
                disp = _s8(b[dispoff])
            elif mod == 2:
                disp = _s32(b, dispoff)
            elif mod == 3:
                flags |= _F_MODDIR

    # Only RIP-relative operands print "(%rip)" (or "(%eip)"); the common case
    # costs one substring test.
    if rip_modrm or "ip)" in operands:
        _cross_check(b, address, rip_modrm, dispoff, disp, mnemonic, operands)

    # Template and kind (calls are emulated: no template, as in kinst).
    tinstlen = ilen
    kdispoff = 0
    if flags & _F_CALL:
        template = bytes(16)
        if flags & _F_DIRECT:
            kind = KIND_CALL_DIRECT
        elif flags & _F_RIPREL:
            kind = KIND_CALL_RIPREL
        elif flags & _F_MODDIR:
            kind = KIND_CALL_REG
        else:
            kind = KIND_CALL_MEM
    elif flags & _F_RIPREL:
        if not flags & _F_JMP or op in (0x0F, 0xE9, 0xFF):
            t = bytearray(b)
            t[dispoff : dispoff + 4] = bytes(4)
            kdispoff = dispoff
            if not flags & _F_JMP or op == 0xFF:
                kind = KIND_RIPREL  # ModR/M rip-relative, including jmp *disp(%rip)
            else:
                kind = KIND_JCC32 if op == 0x0F else KIND_JMP32
        elif op == 0xEB:
            t = bytearray(b[:opcidx]) + b"\xe9\0\0\0\0"
            kdispoff = opcidx + 1
            tinstlen = opcidx + 5  # kinst: 5, wrong with prefixes
            disp -= 3
            kind = KIND_JMP_WIDEN
        else:
            t = bytearray(b[:opcidx]) + bytes((0x0F, op + 0x10)) + b"\0\0\0\0"
            kdispoff = opcidx + 2
            tinstlen = opcidx + 6  # kinst: 6, wrong with prefixes
            disp -= 4
            kind = KIND_JCC_WIDEN
        template = bytes(t).ljust(16, b"\0")
    else:
        template = b.ljust(16, b"\0")
        kind = KIND_TRAMPOLINE

    target = None
    if flags & _F_DIRECT or (flags & _F_JMP and flags & _F_RIPREL and op != 0xFF):
        target = (address + ilen + _orig_disp(b, opcidx, op)) & 0xFFFFFFFFFFFFFFFF

    status, reason = STATUS_OK, ""
    sp = mnemonic.rfind(" ")  # "rep stosq", "bnd jmp", "notrack jmpq"
    base = mnemonic if sp < 0 else mnemonic[sp + 1 :]
    refusal = _REFUSED.get(base)
    if refusal is None and operands.endswith(", %ss") and base.startswith("mov"):
        refusal = T.SS_LOAD_REASON
    if refusal is None and kind in (KIND_CALL_MEM, KIND_CALL_RIPREL):
        if 0x67 in b[:opcidx]:
            refusal = T.ADDR32_CALL_REASON
        elif not _BASED_SEGMENTS.isdisjoint(b[:opcidx]):
            refusal = T.SEGMENT_CALL_REASON
    if refusal is not None:
        status, reason, kind = STATUS_SKIP, f"{base}: {refusal}", KIND_SKIP

    return Verdict(status, reason, kind, ProbeMd(flags, ilen, tinstlen, template, kdispoff, disp, reg1, reg2, scale),
                   target)


def _orig_disp(b: bytes, opcidx: int, op: int) -> int:
    """The branch displacement as encoded (before kinst's -3/-4 widening)."""
    if op == 0x0F:
        return _s32(b, opcidx + 2)
    if op in (0xE8, 0xE9):
        return _s32(b, opcidx + 1)
    return _s8(b[opcidx + 1])


def _cross_check(b, address, ours, dispoff, disp, mnemonic, operands) -> None:
    """Our RIP-relative ModR/M verdict must agree with capstone's operands."""
    m = _RIP_DISP.search(operands)
    if ours != (m is not None):
        raise ClassifierError(
            f"{address:#x}: {b.hex()} ({mnemonic} {operands}): classifier says "
            f"rip-relative={ours}, capstone disagrees"
        )
    if m is not None:
        text = m.group(1) or "0"
        if int(text, 0) != disp:
            raise ClassifierError(
                f"{address:#x}: {b.hex()} ({mnemonic} {operands}): displacement {disp:#x} "
                f"at byte {dispoff} does not match capstone's {text}"
            )


def context_refusals(insns: Sequence[Insn], code: bytes = b"") -> Dict[int, str]:
    """Offsets refused because of an instruction before them, with the reason.

    kinst looks at one instruction at a time; some hazards are regions.  The
    one handled here: after a load of the %gs selector and up to the
    wrmsr/wrgsbase that restores the GS base (inclusive, since the probe
    fires before the instruction runs), or to the function's end.
    """
    out: Dict[int, str] = {}
    inside = False
    lost = ""
    for off, _, mnem, ops in insns:
        if lost:
            out[off] = lost
            continue
        if mnem == BAD and ops != SIZED_BY_ICED:
            lost = f"follows bytes no decoder could size at +{off}: instruction boundaries after them are unknown"
        if inside:
            out[off] = T.GS_REGION_REASON
            if mnem.startswith(T.GS_RESTORERS):
                inside = False
        elif ops.endswith("%gs"):
            inside = (ops == "%gs" or ops.endswith(", %gs")) and mnem.startswith(T.GS_WRITERS)
        elif mnem.startswith(T.GS_FAR_LOAD):
            inside = True
    return out


def frame_verdict(insns: Sequence[Insn], code: bytes, rule: str = "any") -> str:
    """kinst's frame-pointer prologue rule; "" when the function passes.

    ``any`` is the newest rule (some instruction starts with 0x55, push %rbp);
    ``first`` is the FreeBSD 14.0 rule (the function's first byte is 0x55);
    ``none`` (``PROLOGUE_NONE``) asks for no prologue, where the kernel's own
    annotations refuse what the rule guards against.
    """
    if rule == PROLOGUE_NONE:
        return ""
    if rule == "first":
        return "" if code[:1] == b"\x55" else PROLOGUE_REASONS["first"]
    for insn in insns:
        if code[insn.offset] == 0x55:
            return ""
    return PROLOGUE_REASONS["any"]
