"""amd64's general registers as DWARF numbers them (System V AMD64 psABI, figure 3.36 "DWARF Register Number
Mapping"), dtrace(1)'s names for them in kinst's ``regs[]`` (FreeBSD's ``cddl/lib/libdtrace/regs_x86.d``:
``R_RAX`` is index 33, 18 + 1 + ``REG_RAX`` of ``sys/cddl/dev/dtrace/amd64/regset.h``) and glibc's
``ucontext_t`` slot for each (``<sys/ucontext.h>``), which the user-space harness reads.

DWARF 16 is the return-address column, not a register a variable lives in; 17 and up are the SSE and
x87 registers, which kinst's ``regs[]`` does not hold.
"""

from ..contract import DwarfReg

_NAMES = ("rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", "r13", "r14",
          "r15")

DWARF_REGS = tuple(DwarfReg(n, name, f"R_{name.upper()}", f"uc->uc_mcontext.gregs[REG_{name.upper()}]")
                   for n, name in enumerate(_NAMES))
