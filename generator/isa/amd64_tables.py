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

Nothing here is an if-chain: ``amd64.py`` only looks these up.
"""

from typing import Dict, FrozenSet


def _bytes(*ranges: object) -> FrozenSet[int]:
    out = set()
    for r in ranges:
        if isinstance(r, tuple):
            out.update(range(r[0], r[1] + 1))
        else:
            out.add(int(r))  # type: ignore[arg-type]
    return frozenset(out)


# Legacy prefixes: group 1 (lock, rep), group 2 (segments), 66, 67; REX.
PREFIXES = _bytes((0xF0, 0xF3), 0x26, 0x2E, 0x36, 0x3E, 0x64, 0x65, 0x66, 0x67, (0x40, 0x4F))

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

# Opcodes (after prefixes) whose length capstone gets wrong, with the length
# rule to use instead: "modrm" means opcode bytes + ModR/M (+SIB +disp).
LENGTH_FIXES = {
    (0x0F, 0xB9): "modrm",  # ud1 r, r/m
    (0x0F, 0xFF): "modrm",  # ud0 r, r/m
}

# Short (rel8) conditional jumps and their rel32 forms.
JCC8 = _bytes((0x70, 0x7F))

# Instructions kinstkit refuses to probe, by capstone base mnemonic.
_IRQ = "may set IF and enable interrupts; kinst cannot tell whether the per-thread or per-CPU trampoline is safe (kinst refuses it too)"
_UD = "deliberate #UD trap; the handler would see the trampoline's address instead of the original one (assertion and bug tables break)"
_FAR = "far transfer through a memory pointer; kinst would emulate ff /3 as a near call or copy ff /5 verbatim, both wrong"
_LOOP = "rel8 branch with no rel32 form; kinst copies it verbatim, so from the trampoline it would branch to the wrong address"
_INT = "software interrupt; it would enter the IDT from the trampoline with the wrong return address"
_IRET = "returns from an exception frame; a probe here nests #BP inside the exception-return path"
REFUSED: Dict[str, str] = {
    "popf": _IRQ,
    "popfq": _IRQ,
    "popfw": _IRQ,
    "sti": _IRQ,
    "loop": _LOOP,
    "loope": _LOOP,
    "loopne": _LOOP,
    "jrcxz": "rel8 branch with no rel32 form (kinst refuses it: 'no straightforward way to translate this instruction')",
    "jecxz": "rel8 branch with no rel32 form (kinst refuses it: 'no straightforward way to translate this instruction')",
    "int3": "breakpoint: kinst's own patch value; it belongs to a debugger or another tracer",
    "int": _INT,
    "int1": "icebp debug trap; it would be taken from the trampoline",
    "into": _INT,
    "ud0": _UD,
    "ud1": _UD,
    "ud2": _UD,
    "iretq": _IRET,
    "iretl": _IRET,
    "iretw": _IRET,
    "iret": _IRET,
    "lcall": _FAR,
    "lcalll": _FAR,
    "lcallq": _FAR,
    "lcallw": _FAR,
    "ljmp": _FAR,
    "ljmpl": _FAR,
    "ljmpq": _FAR,
    "ljmpw": _FAR,
    "xbegin": "transaction start with a rel32 abort address relative to the instruction; copied into a trampoline the abort path is wrong, and the int3 aborts the transaction",
    "swapgs": "switches the GS base; a #BP taken here runs DTrace with the wrong per-CPU pointer",
    "sysretq": "returns to user mode; a #BP here runs with the user GS base",
    "sysretl": "returns to user mode; a #BP here runs with the user GS base",
    "sysexit": "returns to user mode; a #BP here runs with the user GS base",
    "sysexitq": "returns to user mode; a #BP here runs with the user GS base",
}

# A load of SS inhibits interrupts and debug traps for one instruction; in a
# trampoline that instruction would be the jump back, not the original next one.
SS_LOAD_REASON = "loads %ss, which shadows the next instruction; in a trampoline that is the jump back"

# capstone's mnemonic for a byte sequence it cannot decode.
UNDECODABLE_REASON = "capstone cannot decode these bytes"
