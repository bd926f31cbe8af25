"""arm64 instruction facts, as data.

Sources: the Arm Architecture Reference Manual for A-profile (DDI 0487),
section C4.1 "A64 instruction set encoding" (the encoding classes below),
and FreeBSD ``sys/cddl/dev/kinst/aarch64/kinst_isa.c`` (kinst's masks,
which are kept exactly) and ``sys/arm64/arm64/exception.S`` (what an EL1
exception return restores).

Grammar: an ``Encoding`` is ``(mask, match)``; a word ``w`` is of the class
when ``w & mask == match``.  ``KINST_CLASSES`` is kinst's own test order
(``kinst_instr_dissect()`` and ``kinst_make_probe()``); the other tables are
kinstkit's additions, each with the reason a refused instruction carries.
Nothing here is an if-chain: the portable core
(``sys/modules/kinst/arm64/kinst_core.c``, ``kinst_core_dissect()``) tests
them through the constants ``CORE_CONSTS`` and ``CORE_WORD_SETS`` render into
``kinst_encoding.h``, and ``classify.py`` looks up what spans words.
"""

from __future__ import annotations

from typing import Dict, FrozenSet, Tuple

from ..contract import CConst, CoreRefusal, WordSet
from ..dbp import Encoding, encoding_consts
from ..immediates import ImmLayout, for_kinds, layout
from . import probe_md as _md

# kinst's classes of an instruction word (enum kinst_instr), in kinst's order.
# NOTE: kinst's b.cond mask ignores bit 4, so FEAT_HBC's bc.cond is a b.cond
# to it; the two branch the same way.
# NOTE: kinst's LDX/STX masks look at bits 29-22 only: o2 (bit 23) = 0 and L
# (bit 22).  They also match CASP/CASPA/CASPL/CASPAL (o1 = 1), which kinst
# treats as the start or end of an exclusive block; kept, since refusing more
# is safe.
KINST_CLASSES: Tuple[Tuple[str, Encoding], ...] = (
    ("adr", Encoding(0x1F000000, 0x10000000)),  # adr (bit 31 = 0), adrp (bit 31 = 1)
    ("b", Encoding(0xFC000000, 0x14000000)),
    ("bcond", Encoding(0xFF000000, 0x54000000)),
    ("bl", Encoding(0xFC000000, 0x94000000)),
    ("cbz", Encoding(0x7E000000, 0x34000000)),  # cbz (bit 24 = 0), cbnz (bit 24 = 1)
    ("tbz", Encoding(0x7E000000, 0x36000000)),  # tbz (bit 24 = 0), tbnz (bit 24 = 1)
)
KINST_EMULATED = frozenset(name for name, _ in KINST_CLASSES)
LDX = Encoding(0x3FC00000, 0x08400000)  # load exclusive: starts kinst's LDX/STX block
STX = Encoding(0x3FC00000, 0x08000000)  # store exclusive: ends it (and is itself skipped)

# Load register (literal): LDR Wt/Xt, LDRSW, PRFM and the SIMD&FP LDR St/Dt/Qt;
# opc is bits 31-30, V bit 26.  kinst (since D56988) refuses them all.
LDR_LITERAL = Encoding(0x3B000000, 0x18000000)
# What each opc loads (4 or 8 bytes, ldrsw sign-extended, prfm nothing) is the core's (kinst_core_dissect()).

# Unconditional branch (register): br, blr, ret are emulated by kinstkit
# (kinst copies them into the trampoline, from which they leave without
# reaching its second breakpoint); every other member is refused below.
BRANCH_REG = Encoding(0xFE000000, 0xD6000000)
BR = Encoding(0xFFFFFC1F, 0xD61F0000)
BLR = Encoding(0xFFFFFC1F, 0xD63F0000)
RET = Encoding(0xFFFFFC1F, 0xD65F0000)

# Words capstone names with a PC-relative mnemonic that compute nothing from the PC: SVE's vector
# address (``adr z1.d, [z1.d, z1.d, uxtw]``: 0000 0100 xx1 Zm 1010 msz Zn Zd, DDI 0487 "ADR (vector)").
# Copied into the trampoline like any word kinst does not emulate.
NOT_PC_RELATIVE: Tuple[Encoding, ...] = (
    Encoding(0xFF20F000, 0x0420A000),
)

# The registers an emulated adr/adrp/ldr (literal) may write.  FreeBSD's EL1
# exception return (exception.S, restore_registers 1) reloads x0-x17, x29 and
# lr from the trapframe but not x19-x28, and x18 is the kernel's per-CPU
# pointer (-ffixed-x18): a value the emulation writes there is lost.  31 is
# xzr here.
WRITABLE_REGS: FrozenSet[int] = frozenset(range(18)) | {29, 30, 31}

REASONS: Dict[str, str] = {
    "adr-callee-saved": (
        "writes x{reg} through emulation, and FreeBSD's return from an EL1 exception restores only x0-x17, x29 "
        "and x30 (kinst refuses every adr/adrp for this reason)"
    ),
    "ldr-literal-callee-saved": (
        "PC-relative load into x{reg} through emulation, and FreeBSD's return from an EL1 exception restores "
        "only x0-x17, x29 and x30 (kinst refuses every ldr literal)"
    ),
    "ldr-literal-simd": (
        "PC-relative load into a SIMD&FP register: the emulation's register file holds only the general "
        "registers (the kernel is built -mgeneral-regs-only)"
    ),
    "ldx-block": (
        "inside an LDX/STX block: a breakpoint between the load-exclusive and its store-exclusive clears the "
        "exclusive monitor, so the store fails every time and the loop never ends"
    ),
    "ldx-unterminated": "after a load-exclusive with no store-exclusive before the function's end (kinst: "
                        "\"unterminated LDX/STX block\")",
    "branch-reg": (
        "register branch kinstkit does not emulate (authenticated branch or return, eret, drps): copied into "
        "the trampoline it would leave without reaching the trampoline's breakpoint"
    ),
    "exception": "generates an exception (svc, hvc, smc, brk, hlt, dcps, udf): in the trampoline it traps at "
                 "the wrong address",
    "bti": (
        "branch target landing pad (bti, paciasp, pacibsp): FreeBSD maps kernel text as guarded pages when it "
        "is built with BTI, and an indirect branch landing on the breakpoint raises a Branch Target exception"
    ),
    "exception-register": (
        "reads or writes {sysreg}, which a breakpoint trap overwrites"
    ),
    "exception-entry": (
        "before this function reads {sysreg} at +{at}: a breakpoint trap here overwrites the value the "
        "interrupted context left in it"
    ),
    "exception-return": (
        "between the write of {sysreg} at +{at} and the eret that uses it: a breakpoint trap here overwrites it"
    ),
    "undecodable": "capstone cannot decode this word: an instruction kinstkit does not know, or data",
}

# Exception generation: svc, hvc, smc, brk, hlt, dcps1-3 (C4.1.66), and udf
# (permanently undefined: bits 31-16 zero).
EXCEPTION = Encoding(0xFF000000, 0xD4000000)
UDF = Encoding(0xFFFF0000, 0x00000000)
# BTI {c,j,jc} and plain bti (kinst's BTI_MASK/BTI_INSTR), and paciasp/pacibsp,
# which an indirect branch may also land on.
BTI = Encoding(0xFFFFFF3F, 0xD503241F)
PACIXSP = Encoding(0xFFFFFFBF, 0xD503233F)

# System register moves: MRS (L = 1) and MSR (register, L = 0); the register
# is o0:op1:CRn:CRm:op2 in bits 19-5.
MRS = Encoding(0xFFF00000, 0xD5300000)
MSR = Encoding(0xFFF00000, 0xD5100000)
# The EL1 exception registers a breakpoint trap overwrites, by encoding.
EXCEPTION_SYSREGS: Dict[int, str] = {
    0x4200: "spsr_el1",  # S3_0_C4_C0_0
    0x4201: "elr_el1",  # S3_0_C4_C0_1
    0x4290: "esr_el1",  # S3_0_C5_C2_0
    0x4300: "far_el1",  # S3_0_C6_C0_0
}
# Of those, what eret consumes: a write of these is live until the eret.
ERET_SYSREGS = frozenset({0x4200, 0x4201})
ERET = Encoding(0xFFFFF3E0, 0xD69F03E0)  # eret, eretaa, eretab

# kinst's prologue scan (kinst_make_probe()): an optional leading BTI, then a
# leading nop (a "specially marked asm function"), or some stp x?, x?,
# [sp, #imm]! or sub sp, sp, #imm.
NOP = 0xD503201F
STP_PRE_64 = Encoding(0xFFC00000, 0xA9800000)  # LDP_STP_MASK / STP_64; Rn (bits 9-5) must be sp
SUB_SP_IMM = Encoding(0xFFC00000, 0xD1000000)  # SUB_MASK / SUB_INSTR; Rd and Rn must be sp

# kinst's classes as the core numbers them (km_class; the report's "type"): KINST_CLASSES, then the rest.
KINST_TYPES: Tuple[str, ...] = (*(name for name, _ in KINST_CLASSES), "ldx", "stx", "ldr_literal", "common")

# What the portable core refuses by itself, in KINST_RF_* order: the reason after the mnemonic.  {reg} and
# {sysreg} are filled from the word (the host walk has one reason code per register, isa/arm64/walk.py).
CORE_REFUSALS: Tuple[CoreRefusal, ...] = tuple(
    CoreRefusal(f"KINST_RF_{key.upper().replace('-', '_')}", key, REASONS[key])
    for key in ("adr-callee-saved", "ldr-literal-callee-saved", "ldr-literal-simd", "ldx-block", "branch-reg",
                "exception", "bti", "exception-register"))

# The encodings the core tests, by the name its macros use (KINST_<name>_MASK, KINST_<name>_MATCH).
_CORE_ENCODINGS: Dict[str, Encoding] = {
    **{name.upper(): enc for name, enc in KINST_CLASSES},
    "LDX": LDX, "STX": STX, "LDR_LITERAL": LDR_LITERAL, "BRANCH_REG": BRANCH_REG, "BR": BR, "BLR": BLR, "RET": RET,
    "EXCEPTION": EXCEPTION, "UDF": UDF, "BTI": BTI, "PACIXSP": PACIXSP, "MRS": MRS, "MSR": MSR,
    "STP_PRE_64": STP_PRE_64, "SUB_SP_IMM": SUB_SP_IMM, "SVE_ADR": NOT_PC_RELATIVE[0],
}
CORE_CONSTS: Tuple[CConst, ...] = (
    *encoding_consts(_CORE_ENCODINGS),
    CConst("KINST_NOP", NOP, "nop: a leading one marks an asm function for the prologue rule"),
    CConst("KINST_WRITABLE_REGS", sum(1 << r for r in WRITABLE_REGS), "WRITABLE_REGS as a mask of x0-x31"),
    *(CConst(f"KINST_C_{name.upper()}", i, f"kinst's class {name}") for i, name in enumerate(KINST_TYPES)),
)
CORE_WORD_SETS: Tuple[WordSet, ...] = (
    WordSet("KINST_EXC_SYSREGS", tuple(EXCEPTION_SYSREGS), "EXCEPTION_SYSREGS: o0:op1:CRn:CRm:op2"),
)

# The immediate fields (DDI 0487, C4.1's branch and PC-relative addressing classes), as the manual writes
# them: instruction bits, high to low, and the offset bits they hold; branches count words, adrp pages.
# The core reads km_imm of each kind from them (kinst_core_imm()), the image reader writes relocations
# into them (relocs.py).
IMM_LAYOUTS: Tuple[ImmLayout, ...] = for_kinds(
    _md.TABLE_KINDS,
    layout("imm26", ("25:0", "25:0"), scale=4, kinds=("b", "bl"), doc="b, bl"),
    layout("imm19", ("23:5", "18:0"), scale=4, kinds=("b.cond", "cbz", "ldr-literal"),
           doc="b.cond, cbz, cbnz, ldr (literal)"),
    layout("imm14", ("18:5", "13:0"), scale=4, kinds=("tbz",), doc="tbz, tbnz"),
    layout("adr", ("23:5", "20:2"), ("30:29", "1:0"), kinds=("adr",), doc="adr: immhi:immlo"),
    layout("adrp", ("23:5", "20:2"), ("30:29", "1:0"), scale=4096, kinds=("adrp",),
           doc="adrp: immhi:immlo, in pages"),
)
