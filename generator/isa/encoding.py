"""The ISA's encodings as the template variables of ``kinst_encoding.h``.

``templates/kinst/kinst_encoding.h.j2`` is the one header that gives the
portable core (``sys/modules/kinst/<arch>/kinst_core.c``) its constants:
the breakpoint, the trampoline size, the flag bits, the table kinds and
record codes, the byte sets of opcode facts, the immediate fields
(``immediates.py``) and the codes of the refusals
the core itself makes (their owner is the ``Isa`` record), and the layout
of a table's function records, which every ISA shares (``kinst_funcs.c``
reads them).  ``generate`` renders it beside the table, and the host build
of the core (``isa/hostcore.py``) for the analysis.
"""

from __future__ import annotations

import struct
from typing import Any, Dict, List

from . import immediates
from .contract import Isa

# The function record of a table: little-endian fields, in this order (kinst_funcs.c reads them
# at the offsets kinst_encoding.h defines from FUNC_FIELDS).
FUNC_RECORD = struct.Struct("<QQIIII")
FUNC_FIELDS = (
    ("KINST_FUNC_ADDR_OFF", "link-time address (st_value)"),
    ("KINST_FUNC_DIGEST_OFF", "CRC-32 << 32 | Adler-32 of its bytes, relocated fields zeroed, then its records"),
    ("KINST_FUNC_SIZE_OFF", "st_size"),
    ("KINST_FUNC_NAME_OFF", "offset of its name in the names blob"),
    ("KINST_FUNC_RECORDS_OFF", "offset of its first instruction record"),
    ("KINST_FUNC_FIRST_OFF", "table index of its first probe"),
)


def _field_offsets() -> List[Dict[str, object]]:
    offsets, off = [], 0
    for (name, doc), code in zip(FUNC_FIELDS, FUNC_RECORD.format[1:]):
        offsets.append({"name": name, "value": off, "doc": doc})
        off += struct.calcsize("<" + code)
    return offsets


def byte_set_words(members) -> List[str]:
    """A set of byte values as eight 32-bit words, bit (b & 31) of word (b >> 5), in C hex."""
    words = [0] * 8
    for b in members:
        words[b >> 5] |= 1 << (b & 31)
    return [f"{w:#010x}" for w in words]


def context(isa: Isa) -> Dict[str, Any]:
    """What ``kinst_encoding.h`` says of ``isa``, every value pre-formatted."""
    return {
        "patchval": isa.patchval,
        "tramp_size": isa.tramp_size,
        "flags": [{"name": f.c_name, "value": f.value, "doc": f.doc} for f in isa.flag_bits],
        "kinds": [{"name": k.c_name, "value": i, "doc": k.doc} for i, k in enumerate(isa.table_kinds)],
        "record_codes": [{"name": c.c_name, "value": c.value, "doc": c.doc} for c in isa.record_codes],
        "byte_sets": [{"name": s.c_name, "words": byte_set_words(s.members), "doc": s.doc} for s in isa.byte_sets],
        "consts": [{"name": c.c_name, "value": f"{c.value:#x}" if c.value > 9 else str(c.value), "doc": c.doc}
                   for c in isa.core_consts],
        "word_sets": [{"name": w.c_name, "members": ", ".join(f"{v:#x}" for v in w.members), "n": len(w.members),
                       "doc": w.doc} for w in isa.word_sets],
        "imm_layouts": immediates.c_layouts(isa.imm_layouts, isa.table_kinds),
        "imm_maxpieces": immediates.max_pieces(isa.imm_layouts),
        "refusals": [{"name": r.c_name, "value": i + 1, "doc": r.key} for i, r in enumerate(isa.refusals)],
        "func_recsize": FUNC_RECORD.size,
        "func_fields": _field_offsets(),
    }
