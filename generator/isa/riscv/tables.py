"""RISC-V instruction facts, as data.

Sources: The RISC-V Instruction Set Manual, Volume I (unprivileged):
chapter 2 (RV32I base: opcodes, immediate formats), chapter 8 ("A"
extension: LR/SC and section 8.3 on constrained loops) and chapter 16 ("C"
extension: compressed formats); Volume II (privileged) for the supervisor
CSRs a trap overwrites; FreeBSD ``sys/riscv/include/riscv_opcode.h`` /
``encoding.h`` MATCH_*/MASK_* values and
``sys/cddl/dev/kinst/riscv/kinst_isa.c`` and ``dtrace_subr.c`` (kinst's
tests, which are kept exactly).

Grammar: an ``Encoding`` is ``(mask, match)``: a 32-bit value ``w`` is of
the class when ``w & mask == match``; for a 16-bit one, the low halfword.
``REASONS`` gives the reason a refused instruction carries.  Nothing here
is an if-chain: the portable core (``sys/modules/kinst/riscv/kinst_core.c``,
``kinst_core_dissect()``) and the host step test them through the
constants ``CORE_CONSTS`` and ``CORE_WORD_SETS`` render into
``kinst_encoding.h``, and ``classify.py`` looks up what spans instructions.
"""

from __future__ import annotations

from typing import Dict, FrozenSet, Tuple

from ..contract import CConst, CoreRefusal, WordSet
from ..dbp import Encoding, encoding_consts
from ..immediates import ImmLayout, for_kinds, layout
from . import probe_md as _md



# 32-bit major opcodes kinst emulates (kinst_instr_dissect()): value & 0x7f.
OPCODE_JAL = 0b1101111
OPCODE_JALR = 0b1100111
OPCODE_BRANCH = 0b1100011
OPCODE_AUIPC = 0b0010111
OPCODE_SYSTEM = 0b1110011
EMULATED_OPCODES: Dict[int, str] = {OPCODE_JAL: "jal", OPCODE_JALR: "jalr", OPCODE_BRANCH: "branch",
                                    OPCODE_AUIPC: "auipc"}

# Compressed classes kinst emulates: quadrant (bits 1-0) and funct3 (bits 15-13).
C_J = Encoding(0xE003, 0xA001)  # c.j (RV64: quadrant 1 funct3 101)
C_BEQZ = Encoding(0xE003, 0xC001)
C_BNEZ = Encoding(0xE003, 0xE001)
# c.jr / c.jalr: quadrant 2, funct3 100, rs1 != 0, rs2 == 0; bit 12 says c.jalr.
C_JR_FAMILY = Encoding(0xE07F, 0x8002)
C_EBREAK = Encoding(0xFFFF, 0x9002)  # MATCH_C_EBREAK / MASK_C_EBREAK

# LR/SC (riscv_opcode.h MATCH_LR_W ... MASK_SC_D).
LR = (Encoding(0xF9F0707F, 0x1000202F), Encoding(0xF9F0707F, 0x1000302F))
SC = (Encoding(0xF800707F, 0x1800202F), Encoding(0xF800707F, 0x1800302F))

# kinst's prologue test (dtrace_instr_sdsp(), dtrace_instr_c_sdsp()):
# sd ra, imm(sp), or c.sdsp ra, imm(sp) in either halfword of a word; and
# (the older rule) ret / c.ret (dtrace_instr_ret(), dtrace_instr_c_ret()).
SD_RA_SP = Encoding(0x0707F | 0x1F << 20 | 0x1F << 15, 0x3023 | 1 << 20 | 2 << 15)
C_SDSP_RA = Encoding(0xE003 | 0x1F << 2, 0xE002 | 1 << 2)
RET = Encoding(0x707F | 0xF80 | 0xF8000 | 0xFFF00000, 0x67 | 1 << 15)
C_RET = Encoding(0xF07F | 0xF80, 0x8002 | 1 << 7)

# The supervisor CSRs a trap overwrites (sstatus's SPP/SPIE, sepc, scause,
# stval), by CSR number (bits 31-20 of a SYSTEM instruction).
TRAP_CSRS: Dict[int, str] = {0x100: "sstatus", 0x141: "sepc", 0x142: "scause", 0x143: "stval"}
# What sret consumes: a write of these is live until the sret.
SRET_CSRS: FrozenSet[int] = frozenset({0x100, 0x141})
SRET = 0x10200073
CSR_FUNCT3_READS = frozenset({1, 2, 3, 5, 6, 7})  # csrrw (reads unless rd = x0), csrrs, csrrc and the -i forms

# kinst_regoff(): the x-register numbers, named; 0 is x0 (reads as zero, writes vanish).
ABI_NAMES = ("zero", "ra", "sp", "gp", "tp", "t0", "t1", "t2", "s0", "s1", "a0", "a1", "a2", "a3", "a4", "a5", "a6",
             "a7", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11", "t3", "t4", "t5", "t6")

REASONS: Dict[str, str] = {
    "system": "SYSTEM instruction (ecall, ebreak, csr*, wfi, sret, sfence.vma): kinst skips them all",
    "lr-sc": (
        "inside an LR/SC block: a breakpoint between the load-reserved and its store-conditional takes the "
        "loop out of the constrained form the RISC-V spec (volume I, 8.3) guarantees forward progress for"
    ),
    "lr-sc-unterminated": "after a load-reserved with no store-conditional before the function's end (kinst: "
                          "\"unterminated LR/SC block\")",
    "trap-entry": (
        "before this function reads {csr} at +{at}: a breakpoint trap here overwrites the value the "
        "interrupted context left in it"
    ),
    "trap-return": (
        "between the write of {csr} at +{at} and the sret that uses it: a breakpoint trap here overwrites it"
    ),
    "undecodable": "capstone cannot decode this instruction: an extension kinstkit does not know, or data",
    "lost": "follows bytes no decoder could size at +{at}: instruction boundaries after them are unknown",
}

# What the portable core refuses by itself, in KINST_RF_* order: the reason after the mnemonic.
CORE_REFUSALS: Tuple[CoreRefusal, ...] = (
    CoreRefusal("KINST_RF_SYSTEM", "system", REASONS["system"]),
    CoreRefusal("KINST_RF_LR_SC", "lr-sc", REASONS["lr-sc"]),
)

# The encodings the core and the host step test, by the name their macros use.
_CORE_ENCODINGS: Dict[str, Encoding] = {
    "C_J": C_J, "C_BEQZ": C_BEQZ, "C_BNEZ": C_BNEZ, "C_JR_FAMILY": C_JR_FAMILY, "C_EBREAK": C_EBREAK,
    "LR_W": LR[0], "LR_D": LR[1], "SC_W": SC[0], "SC_D": SC[1],
    "SD_RA_SP": SD_RA_SP, "C_SDSP_RA": C_SDSP_RA, "RET": RET, "C_RET": C_RET,
}
CORE_CONSTS: Tuple[CConst, ...] = (
    *(CConst(f"KINST_OP_{name.upper()}", op, f"major opcode of {name}") for op, name in
      ((OPCODE_JAL, "jal"), (OPCODE_JALR, "jalr"), (OPCODE_BRANCH, "branch"), (OPCODE_AUIPC, "auipc"),
       (OPCODE_SYSTEM, "system"))),
    *encoding_consts(_CORE_ENCODINGS),
)
CORE_WORD_SETS: Tuple[WordSet, ...] = (
    WordSet("KINST_TRAP_CSRS", tuple(TRAP_CSRS), "TRAP_CSRS: the CSR numbers a trap overwrites"),
)

# The immediate fields (volume I, 2.3 "Immediate Encoding Variants" and 16.2's CB and CJ formats), as the
# manual writes them: instruction bits, high to low, and the offset bits they hold.  The core reads km_imm
# of each kind from them (kinst_core_imm()), the image reader writes relocations into them (relocs.py).
IMM_LAYOUTS: Tuple[ImmLayout, ...] = for_kinds(
    _md.TABLE_KINDS,
    layout("i", ("31:20", "11:0"), kinds=("jalr",), doc="I-type: jalr, the call pair's jalr"),
    layout("u", ("31:12", "31:12"), kinds=("auipc",), doc="U-type: auipc"),
    layout("b", ("31:25", "12|10:5"), ("11:7", "4:1|11"), kinds=("branch",), doc="B-type: beq ... bgeu"),
    layout("j", ("31:12", "20|10:1|11|19:12"), kinds=("jal",), doc="J-type: jal"),
    layout("cb", ("12:10", "8|4:3"), ("6:2", "7:6|2:1|5"), kinds=("c.branch",), doc="CB: c.beqz, c.bnez"),
    layout("cj", ("12:2", "11|4|9:8|10|6|7|3:1|5"), kinds=("c.j",), doc="CJ: c.j"),
)
