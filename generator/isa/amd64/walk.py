"""amd64's host walk (``accel/kk_walk.c``) as data: what ``isa/hostcore.py`` builds it from and hands it.

The rule for one instruction is the portable core's
(``sys/modules/kinst/amd64/kinst_core.c``, ``kinst_core_dissect()``);
the step adds what needs capstone's text, from ``tables.py``: the
mnemonics refused by name, the %ss load, the capstone lengths that
``decode.py`` corrects.  Reason codes: the core's refusals first
(``tables.CORE_REFUSALS``, ``KINST_RF_*``), then the %ss load, then one per
reason text of ``tables.REFUSED``, in name order; ``opmap.py`` writes the
mnemonic's code into the opcode table, so a change here regenerates it.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any, Dict, List

from . import probe_md as M
from . import tables as T
from ..contract import Accelerator

ACCEL_DIR = Path(__file__).resolve().parent / "accel"
SS_REASON = len(T.CORE_REFUSALS) + 1
# One code per reason text of tables.REFUSED (names sharing a reason share its code), in name order.
_TEXTS = tuple(dict.fromkeys(T.REFUSED[n] for n in sorted(T.REFUSED)))
REASONS = (*(r.reason for r in T.CORE_REFUSALS), T.SS_LOAD_REASON, *_TEXTS)
NAME_REASONS = {n: SS_REASON + 1 + _TEXTS.index(T.REFUSED[n]) for n in sorted(T.REFUSED)}
PROLOGUE_OPCODE = 0x55  # push %rbp: kinst's frame-pointer prologue starts with it

# struct kinst_md's fields (kr_md of a row), as ProbeMd names them, and how JSON writes each.
_MD = {
    "flags": ("km_flags", "int"),
    "instlen": ("km_instlen", "int"),
    "tinstlen": ("km_tinstlen", "int"),
    "template": ("km_template", "hex"),
    "dispoff": ("km_dispoff", "int"),
    "disp": ("km_disp", "sint"),
    "reg1": ("km_reg1", "sint"),
    "reg2": ("km_reg2", "sint"),
    "scale": ("km_scale", "int"),
}
assert tuple(_MD) == M.ProbeMd._fields


def _md_record(row: Dict[str, Any]) -> M.ProbeMd:
    return M.ProbeMd(*(row[field] for field, _ in _MD.values()))


def _init(lib: Any) -> List[Any]:
    fixed = sorted(set(T.LENGTH_FIXES.values()))
    names = (ctypes.c_char_p * len(fixed))(*(n.encode() for n in fixed))
    lib.kk_amd64_init.argtypes = (ctypes.c_uint, ctypes.c_int, ctypes.c_void_p, ctypes.c_uint)
    lib.kk_amd64_init.restype = None
    lib.kk_amd64_init(SS_REASON, PROLOGUE_OPCODE, names, len(fixed))
    return [names]


ACCELERATOR = Accelerator(
    walk_c=ACCEL_DIR / "kk_walk.c",
    headers=(ACCEL_DIR / "kk_opmap.inc",),
    reasons=REASONS,
    names=NAME_REASONS,
    undecodable=T.UNDECODABLE_REASON,
    prologue_rules=("any", "first"),
    md_fields=tuple(field for field, _ in _MD.values()),
    md_record=_md_record,
    md_json=tuple((key, field, how) for key, (field, how) in _MD.items()),
    byte_fields=frozenset({"km_template"}),
    signed_fields=frozenset({"km_reg1", "km_reg2", "km_disp"}),
    init=_init,
)
