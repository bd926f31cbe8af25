"""kinst's function exclusion list (``kinst.c: kinst_excluded()``), machine-independent part.

Functions that probe context may call, or whose tracing would make a broken
kinst impossible to debug.  The ISA adds its own (``Isa.md_excluded``).  The
module's glue (``sys/modules/kinst/kinst.c``) applies the same lists again at
probe creation, from the generated ``kinst_target.c``, rendered from here:
this module is their only owner.
"""

from __future__ import annotations

from typing import Dict, Mapping, Tuple

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
