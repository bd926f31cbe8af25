"""The Linux kernel's own no-probe rules, read from its vmlinux: what the ring-0 guest refuses, and why.

kinst's rules (the generator's classifier and exclusion list) decide what an
instruction *is*; these decide where a breakpoint must not go in *this*
kernel, from facts the kernel records about itself:

- regions (``REGIONS``): the text sections the kernel builds for code a
  breakpoint must not touch -- ``.noinstr.text``, ``.entry.text``,
  ``.kprobes.text`` (kprobes refuses all three: ``populate_kprobe_blacklist()``
  and x86's ``arch_populate_kprobe_blacklist()``), and what the kernel
  itself rewrites or runs in special states;
- the kprobe blacklist: every ``NOKPROBE_SYMBOL()``, an address in the
  ``_kprobe_blacklist`` section, meaning the whole function there;
- the breakpoint's own path (``TRAP_PATH``): what runs between an int3 in
  kernel text and the module's die notifier, and after it, which kprobes
  does not need to refuse (its handler runs before the die chain) but this
  module does;
- sites the kernel patches at run time (``SITE_TABLES``: jump labels,
  static calls, ftrace's call sites), refused and *masked* in the table's
  digest, so that a static key flipping between the capture of the text
  and the arming of the probes does not change the function's digest;
- instructions found by their address (``__ex_table``: a fault's fixup;
  ``__bug_table``: WARN() and BUG()), which cannot run from a trampoline.

The rules and reasons are data here; the site tables' layouts and reasons
are the guest ISA's (``isa/amd64/jump.py`` ``CODE_TABLES``, which the jump
proof reads too).  Nothing is assumed about addresses: every table is read
from the image, and a table that does not parse (an entry outside the
kernel's text) is an error, not a guess.
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass
from typing import Dict, FrozenSet, List, Mapping, NamedTuple, Tuple

from ... import isa as isa_registry
from ...common.errors import UserError
from ...image.elf import Function, KernelImage
from ...isa.contract import CodeTable
from .packages import GUEST_ISA


class Region(NamedTuple):
    """A range of kernel text between two symbols, refused as a whole."""

    start: str  # symbol at its start
    end: str  # symbol at its end
    reason: str


REGIONS: Tuple[Region, ...] = (
    Region("__noinstr_text_start", "__noinstr_text_end",
           "in .noinstr.text: entry, exception and NMI code that runs before the kernel can take a breakpoint "
           "(kprobes refuses it too)"),
    Region("__entry_text_start", "__entry_text_end",
           "in .entry.text: the system-call and interrupt entry code (x86's arch_populate_kprobe_blacklist())"),
    Region("__kprobes_text_start", "__kprobes_text_end", "in .kprobes.text: marked __kprobes, never to be probed"),
    Region("__irqentry_text_start", "__irqentry_text_end",
           "in .irqentry.text: interrupt entry stubs, run before the interrupt state is set up"),
    Region("__softirqentry_text_start", "__softirqentry_text_end",
           "in .softirqentry.text: the softirq entry, which stack unwinders recognise by its address"),
    Region("__cpuidle_text_start", "__cpuidle_text_end",
           "in .cpuidle.text: the idle loop runs with RCU not watching, and the die-notifier chain that "
           "reaches the module's hook takes rcu_read_lock()"),
    Region("__static_call_text_start", "__static_call_text_end",
           "in .static_call.text: static-call trampolines the kernel rewrites at run time"),
    Region("__indirect_thunk_start", "__indirect_thunk_end",
           "a retpoline or return thunk: every indirect call and return runs it, the breakpoint's own path "
           "included"),
)

# The symbols that bound the kernel's text; nothing outside is probed (.init.text is freed after boot).
TEXT = ("_stext", "_etext")

# What runs for an int3 in kernel text before the module's die notifier and after it, in Linux 6.1 x86
# (arch/x86/kernel/traps.c: exc_int3() -> do_int3() -> kprobe_int3_handler(), then notify_die() ->
# atomic_notifier_call_chain() -> rcu_read_lock() -> notifier_call_chain() -> kprobes' notifier, ours).
# Most are refused by the kernel's own rules as well; the RCU read-side functions are not (kprobes has no
# reason to refuse them), and a breakpoint there would trap again before the first is handled.
_DIE_CHAIN = "on the breakpoint's own path (exc_int3 -> do_int3 -> notify_die -> the die notifiers)"
TRAP_PATH: Mapping[str, str] = {
    "asm_exc_int3": f"{_DIE_CHAIN}: the #BP entry stub",
    "exc_int3": f"{_DIE_CHAIN}: the #BP handler",
    "poke_int3_handler": f"{_DIE_CHAIN}: text_poke_bp()'s handler, asked first",
    "irqentry_nmi_enter": f"{_DIE_CHAIN}: a kernel #BP is entered as an NMI",
    "irqentry_nmi_exit": f"{_DIE_CHAIN}: a kernel #BP is left as an NMI",
    "do_int3": f"{_DIE_CHAIN}: asks kprobes, then the die notifiers",
    "kprobe_int3_handler": f"{_DIE_CHAIN}: kprobes' handler, asked before the die notifiers",
    "get_kprobe": f"{_DIE_CHAIN}: kprobes looks the address up",
    "notify_die": f"{_DIE_CHAIN}: calls the die notifiers",
    "atomic_notifier_call_chain": f"{_DIE_CHAIN}: walks the notifier chain under rcu_read_lock()",
    "notifier_call_chain": f"{_DIE_CHAIN}: calls each notifier",
    "kprobe_exceptions_notify": f"{_DIE_CHAIN}: kprobes' die notifier, called before the module's",
    "__rcu_read_lock": f"{_DIE_CHAIN}: atomic_notifier_call_chain()'s rcu_read_lock() (PREEMPT_RCU)",
    "__rcu_read_unlock": f"{_DIE_CHAIN}: atomic_notifier_call_chain()'s rcu_read_unlock() (PREEMPT_RCU)",
    "rcu_read_unlock_special": f"{_DIE_CHAIN}: entered from __rcu_read_unlock() (it returns at once in NMI "
                               "context)",
}


def guest_tables() -> Tuple[CodeTable, ...]:
    """The guest ISA's tables of code addresses that refuse a breakpoint (their one owner: the ISA's jump facts)."""
    return tuple(t for t in isa_registry.by_name(GUEST_ISA).jump.code_tables if t.breakpoint_doc)


# What a vmlinux's tables refuse: those the kernel rewrites at run time (masked), or finds by address.  What
# it rewrites once at boot, the live capture of its text already shows done.
SITE_TABLES: Tuple[CodeTable, ...] = tuple(t for t in guest_tables() if t.rewritten != "load")

# NOKPROBE_SYMBOL(): an unsigned long per function kprobes refuses (a vmlinux's between its bounds; a
# module's in its section).  Not a table of the ISA's: it names functions, not patched instructions.
KPROBE_BLACKLIST = CodeTable("_kprobe_blacklist", 8, 0, 0, -1, "a NOKPROBE_SYMBOL() function", absolute=True,
                             bounds=("__start_kprobe_blacklist", "__stop_kprobe_blacklist"),
                             breakpoint_doc="NOKPROBE_SYMBOL() (the module's _kprobe_blacklist)")
BLACKLIST = KPROBE_BLACKLIST.bounds


@dataclass(frozen=True)
class KernelRules:
    """The refusals one kernel's own records make, by address."""

    text: Tuple[int, int]  # [_stext, _etext)
    regions: Tuple[Tuple[int, int, str], ...]  # [start, end, reason), sorted
    blacklisted: FrozenSet[int]  # start addresses of NOKPROBE_SYMBOL() functions
    sites: Mapping[int, Tuple[bool, str]]  # instruction address -> (masked, reason)

    def function_reason(self, f: Function) -> str:
        """Why the kernel's rules refuse all of ``f``; "" when they do not."""
        lo, hi = self.text
        if not (lo <= f.address and f.address + f.size <= hi):
            return "not in the kernel's text [_stext, _etext): .init.text is freed after boot"
        if f.name in TRAP_PATH:
            return TRAP_PATH[f.name]
        for start, end, why in self.regions:
            if f.address < end and f.address + f.size > start:
                return why
        if f.address in self.blacklisted:
            return "NOKPROBE_SYMBOL() (the kprobe blacklist, section _kprobe_blacklist)"
        return ""


def _symbols(img: KernelImage, names: Tuple[str, ...]) -> Dict[str, int]:
    want = set(names)
    found = {s.name: s.value for s in img.symbols() if s.name in want}
    missing = sorted(want - set(found))
    if missing:
        raise UserError(f"{img.path}: no symbol {', '.join(missing)}: not a Linux 6.1 x86-64 vmlinux with symbols")
    return found


def _table(img: KernelImage, sym: Dict[str, int], t: CodeTable, lo: int, hi: int) -> List[int]:
    (first, last), offset = t.bounds, t.sites
    start, stop = sym[first], sym[last]
    if (stop - start) % t.entry:
        raise UserError(f"{img.path}: {first}..{last} is not a whole number of {t.entry}-byte entries")
    out = []
    raw = img.read(start, stop - start) if stop > start else b""
    fmt = struct.Struct("<Q" if t.absolute else "<i")
    for i in range(0, len(raw), t.entry):
        (value,) = fmt.unpack_from(raw, i + offset)
        addr = value if t.absolute else (start + i + offset + value) & 0xFFFFFFFFFFFFFFFF
        if lo <= addr < hi:
            out.append(addr)
    return out


def read_rules(img: KernelImage) -> KernelRules:
    """The kernel's rules, read from its vmlinux (the ``-dbg`` one: the tables and their symbols)."""
    names = TEXT + BLACKLIST + tuple(n for r in REGIONS for n in (r.start, r.end))
    names += tuple(n for t in SITE_TABLES for n in t.bounds)
    sym = _symbols(img, names)
    lo, hi = sym[TEXT[0]], sym[TEXT[1]]
    regions = tuple(sorted((sym[r.start], sym[r.end], r.reason) for r in REGIONS if sym[r.end] > sym[r.start]))
    start, stop = sym[BLACKLIST[0]], sym[BLACKLIST[1]]
    raw = img.read(start, stop - start) if stop > start else b""
    blacklisted = frozenset(a for (a,) in struct.iter_unpack("<Q", raw))
    sites: Dict[int, Tuple[bool, str]] = {}
    for t in SITE_TABLES:
        for addr in _table(img, sym, t, lo, hi):
            masked = bool(t.rewritten)
            if addr not in sites or masked:
                sites[addr] = (masked, t.breakpoint_doc)
    return KernelRules((lo, hi), regions, blacklisted, sites)


def by_function(sites: Mapping[int, Tuple[bool, str]],
                funcs: List[Function]) -> Dict[int, Dict[int, Tuple[bool, str]]]:
    """The rule ``sites`` (``KernelRules.sites``, or a module's) inside each of ``funcs``: function address ->
    {offset: (masked, reason)}."""
    out: Dict[int, Dict[int, Tuple[bool, str]]] = {}
    addrs = sorted(sites)
    for f in funcs:
        i = bisect.bisect_left(addrs, f.address)
        mine: Dict[int, Tuple[bool, str]] = {}
        while i < len(addrs) and addrs[i] < f.address + f.size:
            mine[addrs[i] - f.address] = sites[addrs[i]]
            i += 1
        if mine:
            out[f.address] = mine
    return out


def describe(rules: KernelRules) -> str:
    """One line of figures, for reports."""
    masked = sum(1 for m, _ in rules.sites.values() if m)
    return (f"{len(rules.regions)} refused text regions, {len(rules.blacklisted)} NOKPROBE_SYMBOL() functions, "
            f"{len(TRAP_PATH)} on the breakpoint's path, {len(rules.sites)} refused sites ({masked} masked)")
