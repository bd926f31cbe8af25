"""arm64's general registers as DWARF numbers them (AADWARF64, "DWARF register names": x0-x30 are 0-30, sp
31), dtrace(1)'s names for them in kinst's ``regs[]`` (FreeBSD's ``cddl/lib/libdtrace/regs_aarch64.d``:
``R_X0``-``R_X29``, ``R_LR``, ``R_SP``) and Linux's ``ucontext_t`` field for each (``<sys/ucontext.h>``:
``regs[31]``, ``sp``), which the user-space harness reads under qemu-user.

DWARF 64-95 are the SIMD and floating-point registers, which kinst's ``regs[]`` does not hold.
"""

from ..contract import DwarfReg

DWARF_REGS = tuple(DwarfReg(n, f"x{n}", "R_LR" if n == 30 else f"R_X{n}", f"uc->uc_mcontext.regs[{n}]")
                   for n in range(31)) + (DwarfReg(31, "sp", "R_SP", "uc->uc_mcontext.sp"),)
