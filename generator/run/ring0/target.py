"""The ring-0 guest's target module: the call forms Linux 6.1 never runs, built, and planned from its .ko.

Linux 6.1 is built with retpolines, so its compiler emits no ``call *disp(%reg)``,
and the kernel patches every ``call *pv_ops+N(%rip)`` at boot: two kinds of
kinst's amd64 record (``call-mem``, ``call-riprel``) never run in its text.
``sys/modules/kinst/linux/target/kk_target.c`` holds them, in assembly,
and runs them when the workload reads ``/proc/kk_target``.  This module:

- ``build()``: kbuilds it with the pinned headers and the QEMU plugin's
  anchor marker (``oracle.MARK_ANCHOR``, which the module runs when it
  loads, at the start of its probed code), cached by content in
  ``<cache>/ring0/target/<key>/``;
- the rules to plan the named functions from the ``.ko`` itself, an ET_REL
  file (``KernelImage`` applies its relocations and the plan masks every
  relocated field in the digests, so the live copy's loader-filled fields
  are read back, not trusted), with the module loader's own no-probe rules
  (``LOADER_TABLES``: every site the loader or the kernel rewrites, read
  from the relocations of the module's own tables: ``loader_rules()``,
  ``refusal()``).

The table keeps the ``.ko``'s addresses: a module lands where the kernel
puts it, which differs from boot to boot even without KASLR, so the kinst
module places each such function by its offset from the start of the range
the target exports (``kk_target_text``, ``TEXT_SYMBOL``) and checks it
lies inside before it reads a byte; the QEMU plugin counts those probes
from the anchor; the report places them from the module's ``.text`` as the
guest saw it (``sys/module/kk_target/sections/.text``):
``range_offset()``, ``live_address()``.  ``plan.plan_guest()`` puts the
pieces together.

Its functions are named ``kk_target_*``: kinst refuses every ``kinst_*``
function as its own (``analysis/exclusions.py``).

Why a module and not the kernel: nothing can be linked into Debian's
vmlinux, and a module is what the loader relocates, which is what kinst's
ET_REL tables are for.
"""

from __future__ import annotations

import bisect
from typing import Dict, List, Mapping, Tuple

from ...common.ccache import compile_cached, content_key
from ...common.errors import UserError
from ...common.paths import CACHE, SYS_MODULES
from ...common.tools import tool_version
from ...image import open_image
from ...image.elf import Function, KernelImage
from ...isa.contract import CodeTable
from . import kbuild, oracle
from .kernel import KernelAssets
from .rules import KPROBE_BLACKLIST, guest_tables

SOURCE_DIR = SYS_MODULES / "kinst" / "linux" / "target"
MODULE = "kk_target.ko"
NAME = "kk_target"  # the module's name in the guest (/sys/module/<NAME>)
TEXT_SYMBOL = kbuild.MODULE_TEXT  # exported: [start, end) of its probed code, which the kinst glue checks
RANGE = ("kk_target_text_start", "kk_target_text_end")  # the labels around that code
SECTION = ".text"  # the only section whose functions are probed
BUILD_DIR = CACHE / "ring0" / "target"


# Every site table of the guest ISA that refuses a breakpoint (``rules.guest_tables()``): those the kernel
# rewrites at run time, and those the module loader rewrites at load (Linux 6.1's module_finalize():
# alternatives, paravirt, retpolines, return thunks, IBT seal), which the vmlinux's live capture already shows
# applied but a .ko does not; then kprobes' own list of functions.
LOADER_TABLES: Tuple[CodeTable, ...] = guest_tables() + (KPROBE_BLACKLIST,)


def _refused_whole(t: CodeTable) -> bool:
    """Whether a site of ``t`` refuses its whole function: the rewrite spans a length the entry's bytes give
    (which the plan, reading only relocations, does not read), or the table names functions."""
    return t.len_field >= 0 or t is KPROBE_BLACKLIST


def sources() -> List[str]:
    return sorted(p.name for p in SOURCE_DIR.iterdir() if p.is_file())


def build(assets: KernelAssets) -> KernelImage:
    """The built target module (cached by its sources, the headers and the compiler), opened."""
    kbuild.require_tools()
    files = [SOURCE_DIR / n for n in sources()]
    variables = [f"KINST_TARGET_MARK={oracle.MARK_ANCHOR:#x}"]
    parts = [str(assets.headers), tool_version(kbuild.KERNEL_CC), *variables]
    parts += [f.name.encode() + b"\0" + f.read_bytes() for f in files]

    def make(out) -> None:
        for f in files:
            (out / f.name).write_bytes(f.read_bytes())
        kbuild.kbuild(assets, out, "the guest's target module", variables)

    return open_image(str(compile_cached(BUILD_DIR, content_key(parts), make, marker=MODULE) / MODULE))


def _section_of(img: KernelImage, name: str):
    return next((s for s in img.sections if s.name == name), None)


def _place(img: KernelImage, symbol: str, addend: int, funcs: Mapping[str, int]) -> int:
    """The synthetic address ``symbol + addend`` designates: a section's (a section symbol) or a function's."""
    sec = _section_of(img, symbol)
    if sec is not None:
        return sec.addr + addend
    if symbol in funcs:
        return funcs[symbol] + addend
    raise UserError(f"{img.path}: a code table names '{symbol}', which kinstkit cannot place; "
                    "refusing to plan the module")


def loader_rules(img: KernelImage) -> Tuple[Dict[int, str], Dict[int, Tuple[bool, str]]]:
    """The module's own rules: functions refused whole (address -> reason) and instruction sites
    (address -> (masked, reason)), from the relocations of its ``LOADER_TABLES``."""
    funcs = sorted(img.functions(), key=lambda f: f.address)
    starts = [f.address for f in funcs]
    by_name = {n: f.address for f in funcs for n in (f.name, *f.aliases)}
    whole: Dict[int, str] = {}
    sites: Dict[int, Tuple[bool, str]] = {}
    relocs = img.relocations()
    addrs = [r.address for r in relocs]
    read = set()
    for t in LOADER_TABLES:
        sec = _section_of(img, t.section)
        # A section with several layouts (Linux versions): the first whose entries fill it.
        if sec is None or t.section in read or sec.size % t.entry:
            continue
        read.add(t.section)
        lo, hi = bisect.bisect_left(addrs, sec.addr), bisect.bisect_left(addrs, sec.addr + sec.size)
        for r in relocs[lo:hi]:
            if (r.address - sec.addr) % t.entry != t.sites:
                continue
            at = _place(img, r.symbol, r.addend, by_name)
            i = bisect.bisect_right(starts, at) - 1
            if i < 0 or at >= funcs[i].address + funcs[i].size:
                continue
            if _refused_whole(t):
                whole.setdefault(funcs[i].address, t.breakpoint_doc)
            elif at not in sites or t.rewritten:
                sites[at] = (bool(t.rewritten), t.breakpoint_doc)
    return whole, sites


def probed_range(img: KernelImage) -> Tuple[int, int]:
    """[start, end) of the code the module exports as probeable (``RANGE``), synthetic addresses."""
    text = _section_of(img, SECTION)
    syms = {s.name: s.value for s in img.symbols() if s.name in RANGE}
    if text is None or len(syms) != len(RANGE):
        raise UserError(f"{img.path}: no {SECTION} or no {' / '.join(RANGE)}: not kinstkit's target module")
    return text.addr + syms[RANGE[0]], text.addr + syms[RANGE[1]]


def refusal(f: Function, whole: Mapping[int, str], span: Tuple[int, int]) -> str:
    """Why the target's rules refuse all of ``f``; "" when they do not."""
    if f.section != SECTION:
        return f"in the module's {f.section}, not {SECTION} (.init.text is freed after load)"
    if not (span[0] <= f.address and f.address + f.size <= span[1]):
        return (f"outside [{RANGE[0]}, {RANGE[1]}), the code the module exports as {TEXT_SYMBOL}: the kinst "
                "module arms nothing else of it")
    return whole.get(f.address, "")


def range_offset(img: KernelImage, address: int) -> int:
    """How far synthetic ``address`` of the .ko lies from the start of its probed range (the anchor)."""
    return address - probed_range(img)[0]


def live_address(img: KernelImage, text_base: int, address: int) -> int:
    """Where synthetic ``address`` of the .ko runs, the module's .text being at ``text_base``."""
    text = _section_of(img, SECTION)
    assert text is not None
    return text_base + address - text.addr
