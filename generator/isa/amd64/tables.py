"""amd64 opcode facts, as data.

Sources: Intel SDM vol. 2 (order no. 325383), appendix A "Opcode Map", and
FreeBSD ``sys/cddl/dev/kinst/amd64/kinst_isa.c`` (``kinst_instr_dissect``).

Grammar:
- ``PREFIXES``: bytes kinst skips before the opcode (REX is 0x40-0x4f and is
  remembered).
- ``MODRM_1``: one-byte opcodes followed by a ModR/M byte in 64-bit mode.
- ``NO_MODRM_0F``: two-byte opcodes ``0f xx`` that have *no* ModR/M byte; all
  others in the 0f map have one.  ``0f 38 xx`` and ``0f 3a xx`` always do.
- ``REFUSED``: capstone base mnemonic -> reason.  Every entry is an
  instruction kinstkit will not probe, with the reason shown to the user.

- ``CORE_BYTE_SETS`` and ``CORE_REFUSALS``: what the portable core
  (``sys/modules/kinst/amd64/kinst_core.c``) reads from here, through the
  generated ``kinst_encoding.h``: the byte sets it finds the opcode and the
  ModR/M byte with, and the refusals it makes from the bytes alone.

Nothing here is an if-chain: ``kinst_core.c`` and ``accel/kk_walk.c`` look
these up.
"""


from ..contract import ByteSet, CoreRefusal


def _bytes(*ranges: object) -> frozenset[int]:
    out = set()
    for r in ranges:
        if isinstance(r, tuple):
            out.update(range(r[0], r[1] + 1))
        else:
            out.add(int(r))  # type: ignore[arg-type]
    return frozenset(out)


# Legacy prefixes: group 1 (lock, rep), group 2 (segments), 66, 67; REX.
# NOTE: kinst's prefix loop takes 0xf0-0xf3, so int1 (f1) counts as a prefix there
# and trips its KASSERT; f1 is an opcode, not a prefix.
PREFIXES = _bytes(0xF0, 0xF2, 0xF3, 0x26, 0x2E, 0x36, 0x3E, 0x64, 0x65, 0x66, 0x67, (0x40, 0x4F))

# One-byte opcodes with a ModR/M byte (64-bit mode; c4/c5/62/8f handled apart).
MODRM_1 = _bytes(
    (0x00, 0x03), (0x08, 0x0B), (0x10, 0x13), (0x18, 0x1B),
    (0x20, 0x23), (0x28, 0x2B), (0x30, 0x33), (0x38, 0x3B),
    0x63, 0x69, 0x6B, (0x80, 0x8F), 0xC0, 0xC1, 0xC6, 0xC7,
    (0xD0, 0xD3), (0xD8, 0xDF), 0xF6, 0xF7, 0xFE, 0xFF,
)

# Two-byte opcodes 0f xx WITHOUT a ModR/M byte.
# NOTE: 0f b9 (ud1) and 0f ff (ud0) take a ModR/M byte per the SDM; capstone 5
# decodes them as 2 bytes, so amd64.py corrects their length (see LENGTH_FIXES).
NO_MODRM_0F = _bytes(
    (0x04, 0x09), 0x0B, 0x0C, 0x0E,  # syscall clts sysret invd wbinvd ud2 femms
    (0x30, 0x37),  # wrmsr rdtsc rdmsr rdpmc sysenter sysexit getsec
    0x77,  # emms
    (0x80, 0x8F),  # jcc rel32
    0xA0, 0xA1, 0xA2, 0xA8, 0xA9, 0xAA,  # push/pop fs/gs, cpuid, rsm
    (0xC8, 0xCF),  # bswap
)

# Opcodes (after prefixes) whose length capstone gets wrong, with the
# mnemonic capstone prints for them; the right length is opcode bytes + ModR/M
# (+ SIB + displacement).  decode() only looks at instructions with these
# mnemonics.
LENGTH_FIXES = {
    (0x0F, 0xB9): "ud1",  # ud1 r, r/m
    (0x0F, 0xFF): "ud0",  # ud0 r, r/m
}

# Short (rel8) conditional jumps and their rel32 forms.
JCC8 = _bytes((0x70, 0x7F))

# Instructions kinstkit refuses to probe, by capstone base mnemonic.
# docs/refusals.md explains each entry and says whether kinst agrees.
_IRQ = "may set IF and enable interrupts; kinst cannot tell whether the per-thread or per-CPU trampoline is safe (kinst refuses it too)"
_STI = (
    "enables interrupts after the next instruction, which in a trampoline is the jump back, so 'sti; hlt' and "
    "'sti; mwait' lose their wakeup guarantee (kinst refuses it too, as it may enable interrupts)"
)
_WAIT = (
    "waits for an interrupt; FreeBSD's idle loops run it right after sti, whose one-instruction shadow keeps the "
    "wakeup interrupt from arriving first; a probe here takes that interrupt on the way into the trampoline and "
    "the CPU then sleeps with the wakeup already consumed"
)
_UD = (
    "deliberate #UD trap; run from the trampoline, the fault and the panic it raises report the trampoline's "
    "address, and a kernel that looks the address up (BUG/WARN tables) misreads it"
)
# NOTE: far calls and jumps (ff /3, ff /5) are refused from their bytes (CORE_REFUSALS below), so that the
# core refuses them in the kernel too; capstone names them lcall*/ljmp*, and only those bytes.
_LCALL = "far call through memory (ff /3); kinst emulates it as a near call: the target is the offset alone and no %cs is pushed"
_LJMP = (
    "far jump through memory (ff /5), reloading %cs; kinst copies it verbatim, which would work, but it only occurs "
    "in mode-switch code; refused as a precaution, as Linux kprobes does"
)
_LOOP = "rel8 branch with no rel32 form; kinst copies it verbatim, so from the trampoline it would branch to the wrong address"
_RCXZ = "rel8 branch with no rel32 form (kinst refuses it: 'no straightforward way to translate this instruction')"
_INT = "software interrupt; the handler would see the trampoline's address as the return address"
_IRET = (
    "returns from an exception frame: it may set IF (as popf), on the way to user mode it runs after swapgs, "
    "and FreeBSD's trap() recognises a faulting doreti_iret by its address, which a trampoline copy lacks"
)
_TO_USER = "returns to user mode after swapgs; a #BP here runs the kernel's trap handler with the user GS base"
_VMENTRY = (
    "VM entry: the guest's %cr2 (not part of the VMCS) is already loaded and any L1D/MDS flush already done; "
    "a #BP here runs DTrace in between, clobbering %cr2 on any fault and refilling the caches the flush emptied"
)
REFUSED: dict[str, str] = {
    "popf": _IRQ,
    "popfq": _IRQ,
    "popfw": _IRQ,
    "sti": _STI,
    "hlt": _WAIT,
    "mwait": _WAIT,
    "mwaitx": _WAIT,
    "loop": _LOOP,
    "loope": _LOOP,
    "loopne": _LOOP,
    "jrcxz": _RCXZ,
    "jecxz": _RCXZ,
    "int3": "breakpoint: kinst's own patch value; it belongs to a debugger or another tracer",
    "int": _INT,
    "int1": "icebp (#DB) trap; the debug handler would see the trampoline's address (kinst's prefix scan also takes f1 for a prefix)",
    "into": _INT,
    "ud0": _UD,
    "ud1": _UD,
    "ud2": _UD,
    "iretq": _IRET,
    "iretl": _IRET,
    "iretw": _IRET,
    "iret": _IRET,
    "xbegin": "transaction start with a rel32 abort address relative to the instruction; copied into a trampoline the abort path is wrong, and the int3 aborts the transaction",
    "swapgs": "switches the GS base; a #BP taken here runs DTrace with the wrong per-CPU pointer",
    "sysretq": _TO_USER,
    "sysretl": _TO_USER,
    "sysexit": _TO_USER,
    "sysexitl": _TO_USER,
    "sysexitq": _TO_USER,
    "vmlaunch": _VMENTRY,
    "vmresume": _VMENTRY,
}

# A load of SS inhibits interrupts and debug traps for one instruction; in a
# trampoline that instruction would be the jump back, not the original next one.
SS_LOAD_REASON = "loads %ss, which shadows the next instruction; in a trampoline that is the jump back"

# Loading the %gs selector also loads the GS base from the descriptor, and the
# amd64 kernel keeps its per-CPU pointer there.  FreeBSD's load_gs() is
# "pushfq; cli; rdmsr; movw %0,%%gs; wrmsr; popfq": until the wrmsr puts the
# base back, a #BP would run the trap handler with a bogus curthread/pcpu.
GS_WRITERS = ("mov", "pop")  # with %gs as the destination operand
GS_FAR_LOAD = "lgs"  # lgs m16:xx, r: %gs is implicit in capstone's operands
GS_RESTORERS = ("wrmsr", "wrgsbase")  # mnemonic prefixes ("wrgsbaseq")
GS_REGION_REASON = (
    "follows a load of the %gs selector, which trashes the kernel GS base until the next wrmsr/wrgsbase "
    "restores it (FreeBSD's load_gs()); a #BP here would find curthread and the per-CPU data through a bogus base"
)

# An indirect call through memory with an address-size (0x67) prefix computes
# a 32-bit effective address; the emulation computes it in 64 bits.  kinst has
# the same gap; compilers never emit it, but the harness found it in hand code.
ADDR32_CALL_REASON = "addr32 call through memory: its 32-bit effective address would be computed in 64 bits by the emulation"

# The segment-override prefixes that matter in 64-bit mode: %fs and %gs keep
# a base (the kernel's %gs base is its per-CPU area); es/cs/ss/ds are ignored.
BASED_SEGMENT_PREFIXES = frozenset((0x64, 0x65))

# An indirect call through %fs:/%gs:-based memory reads its target at the
# segment base plus the offset; the emulation (kinst's and ours) reads the
# offset alone, from the wrong address.
SEGMENT_CALL_REASON = (
    "call through %fs:/%gs:-based memory: the emulation would read the target from the offset alone, without "
    "the segment base (the kernel's %gs base is its per-CPU area)"
)

# A rel32-form jcc (0f 8x) with an operand-size (0x66) prefix: capstone reads
# a rel16 (AMD CPUs do the same and truncate %rip to 16 bits), Intel CPUs
# ignore the prefix and read a rel32 (capstone reads e8/e9 so too).  The instruction's length, and so every
# boundary after it, depends on the CPU; kinst reads four bytes regardless.
REL16_BRANCH_REASON = (
    "near branch with an operand-size prefix: capstone decodes a rel16 (as AMD CPUs do) where Intel CPUs ignore "
    "the prefix and read a rel32, so the instruction's length depends on the CPU"
)

# capstone's mnemonic for a byte sequence it cannot decode.
UNDECODABLE_REASON = "capstone cannot decode these bytes"

# A short jump is widened to its rel32 form in the trampoline, its prefixes kept (docs/refusals.md), into
# kinst's 16-byte template; the trampoline slot is 32 bytes: the template, then jmp *0(%rip) (6 bytes) and
# the address to go back to (8).  A jcc rel8 with 11 or more prefixes, or a jmp rel8 with 12 or more,
# widens past 16 bytes (issue 20, item 2); with one fewer, to 16, which is no instruction either: an x86
# instruction has at most 15 bytes, and a longer one raises #UD.
TEMPLATE_REASON = (
    "short jump with so many prefixes that its widened rel32 form would be longer than the 15 bytes an x86 "
    "instruction may have, or than kinst's 16-byte template; with the 14-byte jump back it could overrun the "
    "32-byte trampoline slot"
)

# A short jump with an operand-size (0x66) prefix widens to a rel32 form that AMD CPUs read as a rel16
# (REL16_BRANCH_REASON): the trampoline's instruction, and where it goes, would depend on the CPU.
WIDEN16_REASON = (
    "short jump with an operand-size prefix: its widened rel32 form is a rel16 branch on AMD CPUs and a rel32 "
    "one on Intel CPUs, so the trampoline's instruction would depend on the CPU"
)

# The byte sets kinst_core_dissect() finds the opcode and the ModR/M byte with (kinst_encoding.h).
CORE_BYTE_SETS = (
    ByteSet("KINST_SET_PREFIX", PREFIXES, "legacy and REX prefixes"),
    ByteSet("KINST_SET_MODRM_1", MODRM_1, "one-byte opcodes with a ModR/M byte"),
    ByteSet("KINST_SET_NO_MODRM_0F", NO_MODRM_0F, "0f xx opcodes without one"),
)

# What kinst_core_dissect() refuses from the bytes alone, as KINST_RF_* codes from 1, in this order.  The
# analysis shows the reason after capstone's mnemonic; a refusal by mnemonic (REFUSED, SS_LOAD_REASON)
# comes first (loop and jrcxz have both: the core's code is for the kernel, which refuses a table record of
# one).  After the first three the core leaves kinst's metadata blank, as
# ``probe_md.skip_md`` has it: there is none to show.
CORE_REFUSALS = (
    CoreRefusal("KINST_RF_REL16", "rel16 branch", REL16_BRANCH_REASON),
    CoreRefusal("KINST_RF_TEMPLATE", "widened past 15 bytes", TEMPLATE_REASON),
    CoreRefusal("KINST_RF_WIDEN16", "widened with an operand-size prefix", WIDEN16_REASON),
    CoreRefusal("KINST_RF_FAR_CALL", "far call (ff /3)", _LCALL),
    CoreRefusal("KINST_RF_FAR_JMP", "far jmp (ff /5)", _LJMP),
    CoreRefusal("KINST_RF_ADDR32_CALL", "addr32 call through memory", ADDR32_CALL_REASON),
    CoreRefusal("KINST_RF_SEGMENT_CALL", "%fs:/%gs: call through memory", SEGMENT_CALL_REASON),
    CoreRefusal("KINST_RF_REL8_ONLY", "loop, loopcc, jrcxz (e0-e3)", _LOOP),
)
