"""amd64's facts for the trap-free jump probe: a 5-byte ``jmp rel32`` in place of the ``int3``.

What the proof (``analysis/jumpsafe.py``) needs from the ISA, as data:
the jump's size, which table kinds push a return address, how code names
addresses (a rel32 after a branch opcode, a %rip-relative disp32 after a
ModR/M byte, a sign-extended imm32 under the kernel code model), which
instructions are indirect jumps, and the kernel tables that name code by
address.

Kernel tables (docs/jump-probes.md):

- Linux keeps the instructions that may fault in ``__ex_table``: the page
  fault handler looks the faulting %rip up there and resumes at the entry's
  fixup.  A displaced copy faults at another address, which the table does
  not hold (an oops), and a fixup inside the jump's bytes resumes mid-jump.
- Linux's static keys (``__jump_table``) rewrite 5 bytes at each site at run
  time, and branch to the entry's target.
- FreeBSD amd64 has no exception table: ``copyin()`` and its kin store the
  handler's address in ``pcb_onfault`` (``movq $handler, PCB_ONFAULT(%reg)``,
  sys/amd64/amd64/support.S) and ``trap_pfault()`` resumes there.  The
  handler's address is a sign-extended imm32 in the code, which the proof's
  scan of absolute addresses finds (``abs_code_width``); the faulting
  instruction may run displaced, since the resume point does not depend on
  where it faulted.
"""

from __future__ import annotations

from . import probe_md as M
from . import tables as T
from ..contract import CodeTable, JumpFacts

JMP_REL32_SIZE = 5  # e9 + rel32

# Direct branches whose rel32 ends the instruction: call, jmp, and jcc (0f 80 .. 0f 8f).
REL32_OPCODES = (b"\xe8", b"\xe9", *(bytes((0x0F, cc)) for cc in range(0x80, 0x90)))

# mod 00, r/m 101: a disp32 relative to the next instruction's address follows.
RIPREL_MODRM = (0xC7, 0x05)

_INDIRECT_JMP_OPCODE = 0xFF  # ff /4 (near), ff /5 (far: refused by the per-instruction rule)
_JMP_REGS = (4, 5)

CODE_TABLES = (
    # struct exception_table_entry { int insn, fixup, data; } (Linux >= 4.6 on x86-64)
    CodeTable(
        "__ex_table", 12, 0, 1, 4,
        "an instruction that may fault, which the fault handler looks up by its address",
        "a fault's fixup, where the fault handler resumes",
    ),
    # struct jump_entry { s32 code, target; long key; } (CONFIG_HAVE_ARCH_JUMP_LABEL_RELATIVE)
    CodeTable(
        "__jump_table", 16, 0, JMP_REL32_SIZE, 4,
        "a static key's 5-byte nop or jmp, which the kernel rewrites at run time",
        "a static key's branch target",
    ),
)

UNREAD_TABLES = {
    ".altinstructions": "Linux alternatives: instructions the kernel replaces at boot",
    ".parainstructions": "Linux paravirt patch sites",
    ".static_call_sites": "Linux static calls: call sites the kernel rewrites",
    "__mcount_loc": "ftrace: the call sites the kernel patches",
    "__patchable_function_entries": "patchable function entries: nops the kernel rewrites",
    ".retpoline_sites": "Linux retpoline sites the kernel rewrites",
    ".return_sites": "Linux return thunk sites the kernel rewrites",
    ".call_sites": "Linux call depth tracking sites the kernel rewrites",
    ".smp_locks": "Linux lock prefixes the kernel rewrites on a single CPU",
}


def indirect_jump(raw: bytes) -> str:
    """"reg" for ``jmp *%reg``, "mem" for ``jmp *mem`` (ff /4, ff /5), "" for any other instruction."""
    i = 0
    while i < len(raw) and raw[i] in T.PREFIXES:
        i += 1
    if i + 1 >= len(raw) or raw[i] != _INDIRECT_JMP_OPCODE:
        return ""
    modrm = raw[i + 1]
    if (modrm >> 3) & 7 not in _JMP_REGS:
        return ""
    return "reg" if modrm >> 6 == 3 else "mem"


FACTS = JumpFacts(
    size=JMP_REL32_SIZE,
    call_kinds=frozenset((M.KIND_CALL_DIRECT, M.KIND_CALL_REG, M.KIND_CALL_MEM, M.KIND_CALL_RIPREL)),
    riprel_kinds=frozenset((M.KIND_RIPREL, M.KIND_CALL_RIPREL)),
    rel32_opcodes=REL32_OPCODES,
    riprel_modrm=RIPREL_MODRM,
    riprel_imm_max=4,
    abs_code_width=4,
    indirect_jump=indirect_jump,
    code_tables=CODE_TABLES,
    unread_tables=UNREAD_TABLES,
)
