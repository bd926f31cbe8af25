"""amd64 classify: the function-level rules kinst and kinstkit apply beside the per-instruction one.

The verdict on one instruction -- kinst's ``struct kinst_probe_md`` and
whether it can be probed -- is the portable core's
(``sys/modules/kinst/amd64/kinst_core.c``, ``kinst_core_dissect()``), run
on the host by ``isa/hostcore.py`` with the refusals by capstone's mnemonic
(``tables.REFUSED``) and the cross-check of every %rip-relative operand
against capstone's text (``accel/kk_walk.c``); the prologue rule is there
too.  Here: the functions refused by name (``MD_EXCLUDED``), the prologue
rules' reasons, and the refusals that span instructions
(``context_refusals``).

Where kinst is wrong we are right, and docs/refusals.md lists each case:
- a SIB index of 100 without REX.X means no index (kinst uses %rsp);
- a SIB base of 101 with mod 00 means disp32 and no base (kinst drops the
  disp32), and with mod 01/10 it means %rbp/%r13 (kinst drops the base);
- a prefixed short jump widens to prefixes + 5 or + 6 bytes (kinst always
  uses 5 or 6, cutting the displacement), and one that would then not fit
  kinst's 16-byte template is refused;
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

from typing import Dict, Sequence, Tuple

from . import tables as T
from .decode import SIZED_BY_ICED
from ..contract import BAD, Insn

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
