"""What the "double breakpoint" ISAs, arm64 and riscv, share on the generator's side.

``sys/modules/kinst/dbp/`` holds what their kernel parts share; this module
holds the shapes their packages share, so that ``isa/arm64/`` and
``isa/riscv/`` keep only their facts: an encoding as ``(mask, match)``,
the host step's shared C (``isa/accel/kk_dbp.c``), the ``Accelerator`` and
the ``Isa`` fields every such ISA fills alike, the probe metadata's table
row and JSON, and the compact table's record codes.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Dict, Iterable, NamedTuple, Tuple

from . import hostcore
from .contract import Accelerator, CConst

ACCEL_DIR = Path(__file__).resolve().parent / "accel"
STEP_SOURCES = (ACCEL_DIR / "kk_dbp.c", ACCEL_DIR / "kk_dbp.h")  # the shared walk, over the ISA's hooks


class Encoding(NamedTuple):
    """An instruction class: a value ``v`` is of it when ``v & mask == match``."""

    mask: int
    match: int

    def has(self, value: int) -> bool:
        return value & self.mask == self.match


def encoding_consts(encodings: Dict[str, Encoding]) -> Tuple[CConst, ...]:
    """``KINST_<name>_MASK`` and ``_MATCH`` of each encoding, for ``kinst_encoding.h`` (``Isa.core_consts``)."""
    return tuple(c for name, enc in encodings.items()
                 for c in (CConst(f"KINST_{name}_MASK", enc.mask, name.lower()),
                           CConst(f"KINST_{name}_MATCH", enc.match, name.lower())))


def accelerator(package_file: str, tables: Any, **fields: Any) -> Accelerator:
    """The ISA's ``Accelerator``: its step ``accel/kk_walk.c`` beside ``package_file``, over the shared walk,
    with the prologue rules ``any`` and ``first`` and no mnemonic refused by name."""
    return Accelerator(walk_c=Path(package_file).resolve().parent / "accel" / "kk_walk.c", headers=(),
                       sources=STEP_SOURCES, names={}, undecodable=tables.REASONS["undecodable"],
                       prologue_rules=("any", "first"),
                       md_json=(),  # the JSON fast path is not used on an ISA with mapping symbols (fastjson.py)
                       **fields)


def isa_parts(name: str, tables: Any, relocs: Any, accel: Accelerator) -> Dict[str, Any]:
    """The ``Isa`` fields a double-breakpoint ISA fills alike: its rule is its portable core's, run on the
    host (``isa/hostcore.py``), over the encodings of its ``tables``; relocations fill bit fields of an
    instruction (``relocs``); mapping symbols mark data in code."""
    return dict(
        classify=functools.partial(hostcore.classify, name),
        frame_verdict=functools.partial(hostcore.frame_verdict, name),
        accelerator=accel,
        refusals=tables.CORE_REFUSALS,
        core_consts=tables.CORE_CONSTS,
        word_sets=tables.CORE_WORD_SETS,
        reloc_insert=relocs.insert,
        branch_reloc=relocs.branch_field,
        mapping_symbols=True,
    )


def md_json(md: Any, length: int) -> Dict[str, Any]:
    """A probe metadata record's JSON: its fields, the instruction (``length`` bytes) in hex."""
    d = md._asdict()
    d["insn"] = f"{d['insn']:#0{2 + 2 * length}x}"
    return d


# What the plan hands ``stream_record`` as a probe metadata record's ``dispoff`` (amd64's rel32 position):
# these ISAs have no such field.
NO_DISPOFF = property(lambda md: 0, doc="amd64's rel32 position in the instruction: none here")


def record_codes(kinds: int, refused: int, extra: Iterable[CConst]) -> Tuple[CConst, ...]:
    """The compact table's record codes: the kinds, the refusal, then the ISA's own bits."""
    return (CConst("KINST_NKINDS", kinds, "record codes below this are enum kinst_kind"),
            CConst("KINST_R_REFUSED", refused, "no probe: the instruction is refused"), *extra)
