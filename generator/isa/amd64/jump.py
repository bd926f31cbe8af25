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

_ALT = "an instruction the kernel replaces at boot (alternatives)"

# The layouts are Linux's (the structs named above each), the breakpoint reasons the ring-0 guest's (Linux
# 6.1's module_finalize() and its boot-time patching).
CODE_TABLES = (
    # struct exception_table_entry { int insn, fixup, data; } (Linux >= 4.6 on x86-64)
    CodeTable(
        "__ex_table", 12, 0, 1, 4,
        "an instruction that may fault, which the fault handler looks up by its address",
        "a fault's fixup, where the fault handler resumes", bounds=("__start___ex_table", "__stop___ex_table"),
        breakpoint_doc="may fault and be fixed up (__ex_table): the fixup is found by this address, so the "
                       "instruction cannot run from a trampoline",
    ),
    # struct jump_entry { s32 code, target; long key; } (CONFIG_HAVE_ARCH_JUMP_LABEL_RELATIVE)
    CodeTable(
        "__jump_table", 16, 0, JMP_REL32_SIZE, 4,
        "a static key's 5-byte nop or jmp, which the kernel rewrites at run time",
        "a static key's branch target", bounds=("__start___jump_table", "__stop___jump_table"), rewritten="run",
        breakpoint_doc="a jump-label site (__jump_table): the kernel rewrites it when its static key flips",
    ),
    # struct alt_instr: { s32 instr_offset, repl_offset; u16 cpuid; u8 instrlen, replacementlen; } (4.x-6.2),
    # with a u8 padlen after them (4.x-5.x), or with u32 ft_flags in place of cpuid (6.3 on).  The
    # replacement's own branches are in .altinstr_replacement, an executable section the scan reads.
    *(CodeTable(".altinstructions", entry, 0, 0, -1, _ALT, len_field=lenf, rewritten="load",
                breakpoint_doc="an alternative (.altinstructions): the loader rewrites a range of it for the CPU")
      for entry, lenf in ((12, 10), (13, 10), (14, 12))),
    # struct paravirt_patch_site { u8 *instr; u8 type; u8 len; } (to 6.7)
    CodeTable(".parainstructions", 16, 0, 0, -1, "a paravirt call site the kernel rewrites at boot",
              absolute=True, len_field=9, rewritten="load",
              breakpoint_doc="a paravirt site (.parainstructions): the loader rewrites a range of it"),
    # struct static_call_site { s32 addr, key; }: a 5-byte call or jmp
    CodeTable(".static_call_sites", 8, 0, JMP_REL32_SIZE, -1, "a static call the kernel rewrites",
              bounds=("__start_static_call_sites", "__stop_static_call_sites"), rewritten="run",
              breakpoint_doc="a static-call site (.static_call_sites): static_call_update() rewrites it"),
    # ftrace: the address of every function's 5-byte call to __fentry__
    CodeTable("__mcount_loc", 8, 0, JMP_REL32_SIZE, -1, "an ftrace call site the kernel rewrites", absolute=True,
              bounds=("__start_mcount_loc", "__stop_mcount_loc"), rewritten="run",
              breakpoint_doc="an ftrace site (__mcount_loc): ftrace rewrites it when a tracer is turned on"),
    # arrays of s32 offsets: a call or jmp (jcc: 6 bytes) to a retpoline thunk, a jmp to the return thunk,
    # a call the call-depth tracking rewrites, an endbr64 sealed with a nop, a lock prefix
    CodeTable(".retpoline_sites", 4, 0, 6, -1, "an indirect branch through a retpoline thunk the kernel rewrites",
              rewritten="load",
              breakpoint_doc="a retpoline call or jump (.retpoline_sites): the loader rewrites it"),
    CodeTable(".return_sites", 4, 0, JMP_REL32_SIZE, -1, "a jump to the return thunk the kernel rewrites",
              rewritten="load", breakpoint_doc="a return-thunk jump (.return_sites): the loader rewrites it"),
    CodeTable(".call_sites", 4, 0, JMP_REL32_SIZE, -1, "a call the kernel rewrites for call-depth tracking",
              rewritten="load", breakpoint_doc="a call-depth-tracking call (.call_sites): the loader rewrites it"),
    CodeTable(".ibt_endbr_seal", 4, 0, 4, -1, "an endbr64 the kernel seals with a nop", rewritten="load",
              breakpoint_doc="an endbr64 the loader may seal (.ibt_endbr_seal)"),
    # NOTE: the kernel rewrites the lock prefixes only while it runs on one CPU (alternatives_smp_*), so a
    # breakpoint on an SMP kernel may stay there.
    CodeTable(".smp_locks", 4, 0, 1, -1, "a lock prefix the kernel rewrites on a single CPU"),
    # struct bug_entry { s32 bug_addr_disp, file_disp; u16 line, flags; } (GENERIC_BUG_RELATIVE_POINTERS,
    # DEBUG_BUGVERBOSE): a ud2 the #UD handler looks up by its address
    CodeTable("__bug_table", 12, 0, 2, -1, "a WARN() or BUG() ud2, which the #UD handler looks up by its address",
              bounds=("__start___bug_table", "__stop___bug_table"),
              breakpoint_doc="a WARN() or BUG() site (__bug_table): the #UD handler finds it by this address"),
)

# Tables of code addresses whose layout the proof does not know: an image with one gets no jump probe.
UNREAD_TABLES = {
    "__patchable_function_entries": "patchable function entries: nops the kernel rewrites, of a length the "
                                    "table does not say",
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
    call_kinds=frozenset(M.TABLE_KINDS.names("call-direct", "call-reg", "call-mem", "call-riprel")),
    riprel_kinds=frozenset(M.TABLE_KINDS.names("riprel", "call-riprel")),
    rel32_opcodes=REL32_OPCODES,
    riprel_modrm=RIPREL_MODRM,
    riprel_imm_max=4,
    abs_code_width=4,
    indirect_jump=indirect_jump,
    code_tables=CODE_TABLES,
    unread_tables=UNREAD_TABLES,
    detour_calls=frozenset(M.TABLE_KINDS.names("call-direct")),
)
