"""arm64's host walk (``accel/kk_walk.c``) as data: what ``isa/hostcore.py`` builds it from and hands it.

The rule for one word is the portable core's
(``sys/modules/kinst/arm64/kinst_core.c``, ``kinst_core_dissect()``), whose
refusals are ``tables.CORE_REFUSALS``.  Two of their reasons name a register
or a system register: the reason codes hold one text per register (x0-x31)
and per ``tables.EXCEPTION_SYSREGS`` member, and the step picks among them
(``kk_arm64_init()``: each refusal's first code, and what picks).
"""

from __future__ import annotations

import ctypes
from typing import Any, Dict, List, Tuple

from . import probe_md as M
from . import tables as T
from ..dbp import accelerator

BY_NONE, BY_REG, BY_SYSREG = 0, 1, 2  # kk_walk.c's KK_BY_*


def _expand(reason: str) -> Tuple[int, Tuple[str, ...]]:
    """A refusal's reason texts, and what picks among them (KK_BY_*)."""
    if "{reg}" in reason:
        return BY_REG, tuple(reason.format(reg=r) for r in range(32))
    if "{sysreg}" in reason:
        return BY_SYSREG, tuple(reason.format(sysreg=s) for s in T.EXCEPTION_SYSREGS.values())
    return BY_NONE, (reason,)


_EXPANDED = [_expand(r.reason) for r in T.CORE_REFUSALS]
REASONS = tuple(text for _, texts in _EXPANDED for text in texts)
FIRST = tuple(1 + sum(len(t) for _, t in _EXPANDED[:i]) for i in range(len(_EXPANDED)))
assert len(REASONS) < 256  # kr_reason is a byte

# The row fields ProbeMd is made from.
_FIELDS = ("kr_class", "km_insn", "kr_len", "km_reg", "km_imm", "km_cond", "km_bit", "km_flags", "km_size")


def _md_record(row: Dict[str, Any]) -> M.ProbeMd:
    typ, flags = T.KINST_TYPES[row["kr_class"]], row["km_flags"]
    return M.ProbeMd(typ, typ in T.KINST_EMULATED, row["km_insn"], row["kr_len"], row["km_reg"], row["km_imm"],
                     row["km_cond"], row["km_bit"], bool(flags & M.FLAG_NONZERO), bool(flags & M.FLAG_LINK),
                     row["km_size"], bool(flags & M.FLAG_SIGNED))


def _init(lib: Any) -> List[Any]:
    n = len(FIRST)
    first = (ctypes.c_uint8 * n)(*FIRST)
    by = (ctypes.c_uint8 * n)(*(b for b, _ in _EXPANDED))
    lib.kk_arm64_init.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint)
    lib.kk_arm64_init.restype = ctypes.c_int
    if lib.kk_arm64_init(first, by, n) != 0:
        raise ValueError("kk_arm64_init: more refusals than the step holds")
    return [first, by]


# capstone's mnemonics of each emulated kind (b.cond is any "b." or "bc."; kk_walk.c checks it).
MNEMONICS = {"b": ("b",), "bl": ("bl",), "cbz": ("cbz", "cbnz"), "tbz": ("tbz", "tbnz"), "adr": ("adr",),
             "adrp": ("adrp",), "ldr-literal": ("ldr", "ldrsw", "prfm"), "br-reg": ("br", "blr", "ret")}

ACCELERATOR = accelerator(__file__, T, M.TABLE_KINDS, MNEMONICS, reasons=REASONS, md_fields=_FIELDS,
                          md_record=_md_record, classes=T.KINST_TYPES, init=_init, signed_fields=frozenset({"km_imm", "km_reg", "km_cond", "km_bit"}))
