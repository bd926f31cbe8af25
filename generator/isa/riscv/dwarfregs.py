"""RISC-V's integer registers as DWARF numbers them (RISC-V ELF psABI, "DWARF Register Numbers": x0-x31 are
0-31), dtrace(1)'s names for them in kinst's ``regs[]`` (FreeBSD's ``cddl/lib/libdtrace/regs_riscv.d``, by
ABI name: ``R_RA``, ``R_SP``, ``R_A0``...) and Linux's ``ucontext_t`` slot for each (``<sys/ucontext.h>``:
``__gregs[n]`` holds x1-x31, ``__gregs[0]`` the pc; x0 is zero), which the user-space harness reads under
qemu-user.

DWARF 32-63 are the floating-point registers, which kinst's ``regs[]`` does not hold.
"""

from ..contract import DwarfReg

_ABI = ("zero", "ra", "sp", "gp", "tp", "t0", "t1", "t2", "s0", "s1", "a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7",
        "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11", "t3", "t4", "t5", "t6")

DWARF_REGS = tuple(DwarfReg(n, name, f"R_{name.upper()}", "0" if n == 0 else f"uc->uc_mcontext.__gregs[{n}]")
                   for n, name in enumerate(_ABI))
