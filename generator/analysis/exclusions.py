"""kinst's function exclusion list (``kinst.c: kinst_excluded()``), machine-independent part.

Functions that probe context may call, or whose tracing would make a broken
kinst impossible to debug.  The ISA adds its own (``Isa.md_excluded``), and
every function its NMI entry points (``Isa.nmi_entries``) reach by direct
calls in the image at hand (``nmi_closure``): a breakpoint there is taken in
NMI context as surely as one in the entry point.  The module's glue
(``sys/modules/kinst/kinst.c``) applies the same lists again at probe
creation, from the generated ``kinst_target.c``, rendered from here: this
module is their only owner.
"""

from __future__ import annotations

import weakref
from typing import Dict, Mapping, Tuple

from ..image.elf import Function, KernelImage

# Prefixes and exact names, with their reasons and exceptions.
# NOTE: kinst itself excludes exactly owner_mtx/owner_rm/owner_rw/owner_sx; we
# refuse every owner_* (a superset).
EXCLUDED_PREFIXES: Tuple[Tuple[str, str], ...] = (
    ("dtrace_", "may be called from probe context"),
    ("kinst_", "part of kinst itself"),
    ("db_", "DDB: tracing it makes a broken kinst impossible to debug"),
    ("kdb_", "KDB: tracing it makes a broken kinst impossible to debug"),
    ("owner_", "lock owner method, may be called from probe context"),
)
EXCLUDED_EXCEPTIONS: Tuple[str, ...] = ("dtrace_safe_",)
_ANY_PREFIX = tuple(p for p, _ in EXCLUDED_PREFIXES)  # one C-level test clears most names
EXCLUDED_NAMES: Dict[str, str] = {
    "cpu_switch": "changes curthread; a probe here crashes in probe context",
    "trap_check": "part of the trap path kinst itself runs on",
}


def excluded(name: str, isa_name: str, md_excluded: Mapping[str, str]) -> str:
    """kinst's name-based verdict: the reason, or "" when the name is allowed."""
    if name in md_excluded:
        return f"excluded by name ({isa_name}): {md_excluded[name]}"
    if name in EXCLUDED_NAMES:
        return f"excluded by name: {EXCLUDED_NAMES[name]}"
    if not name.startswith(_ANY_PREFIX) or name.startswith(EXCLUDED_EXCEPTIONS):
        return ""
    for prefix, why in EXCLUDED_PREFIXES:
        if name.startswith(prefix):
            return f"excluded by name ({prefix}*): {why}"
    return ""


def excluded_names(md_excluded: Mapping[str, str]) -> Dict[str, str]:
    """Every exactly-named exclusion, machine-independent and ISA, name -> reason."""
    return {**EXCLUDED_NAMES, **md_excluded}


# Where the NMI closure is not followed further, though the function itself is refused: the panic path
# (the system is going down, and what it calls -- shutdown, dumps, unmounting -- is half the kernel).
# Functions the lists above refuse (the debugger, DTrace itself) are not followed either.
NMI_CLOSURE_ENDS: Dict[str, str] = {
    "panic": "the panic path ends the system",
    "vpanic": "the panic path ends the system",
}


def nmi_closure(img: KernelImage) -> Dict[str, str]:
    """Every function the ISA's NMI entry points reach by direct calls in ``img`` (the entry points themselves
    left to ``md_excluded``), name -> reason naming the chain of calls."""
    isa = img.isa
    if not isa.nmi_entries:
        return {}
    entries = frozenset(isa.nmi_entries)
    # A pass over every function of the image (a kernel has 50,000): a set lookup each, no tuple or set made.
    roots = [f for f in img.functions() if f.name in entries or (f.aliases and not entries.isdisjoint(f.aliases))]
    if not roots:
        return {}
    from .callgraph import reach  # here: an image without NMI entry points (a library) never needs it

    def expand(f: Function) -> bool:
        """Follow an entry point, and any other function but the ends and those refused anyway."""
        if f in roots:
            return True
        return f.name not in NMI_CLOSURE_ENDS and not excluded(f.name, isa.name, {})

    out: Dict[str, str] = {}
    for f, chain in sorted(reach(img, roots, expand).items(), key=lambda kv: (len(kv[1]), kv[0].address)):
        end = f" (its callees are not: {NMI_CLOSURE_ENDS[f.name]})" if f.name in NMI_CLOSURE_ENDS else ""
        why = f"called directly on the NMI path {' -> '.join(chain)}{end}; it {isa.nmi_reason}"
        for name in (f.name, *f.aliases):
            if name not in entries and name not in out:
                out[name] = why
    return out


_IMAGES: "weakref.WeakKeyDictionary[KernelImage, Dict[str, str]]" = weakref.WeakKeyDictionary()


def for_image(img: KernelImage) -> Mapping[str, str]:
    """``md_excluded`` for one image: the ISA's names and the NMI closure (computed once per image)."""
    got = _IMAGES.get(img)
    if got is None:
        got = {**nmi_closure(img), **img.isa.md_excluded}
        _IMAGES[img] = got
    return got
