"""Immediate fields of an instruction word as data: one layout, read by C and written by Python.

An ISA whose branches and address computations hold their offset in bit
fields scattered over the word (a RISC-V J-type, an AArch64 imm26) writes
each such field once, in its ``tables.py``, the way its manual does: the
instruction bits of a group, high to low, and the immediate bits they hold,
``("31:12", "20|10:1|11|19:12")``.  From that one fact come

- ``insert``: the relocation code's write of a value into the field (the
  image reader applying an ET_REL object's branch relocations);
- ``c_layouts``: the ``KINST_IMM_LAYOUTS`` initialiser ``kinst_encoding.h``
  renders, which ``kinst_core_imm()`` (``sys/modules/kinst/dbp/``) reads to
  take the immediate out of a live instruction.

The immediate's top bit is its sign; bits below its lowest piece are zero
(a RISC-V branch offset's bit 0); ``scale`` multiplies the sign-extended
field (AArch64 counts words, adrp pages).
"""

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, Optional


class ImmPiece(NamedTuple):
    """Bits of the instruction that hold bits of the immediate, in the same order."""

    insn: int  # the lowest instruction bit of the run
    imm: int  # the immediate bit it holds
    width: int  # how many bits


class ImmLayout(NamedTuple):
    """One immediate field of an ISA: where its bits lie in the word, and what it counts."""

    name: str  # the manual's name of the format ("j", "imm26"); relocation tables name it
    pieces: tuple[ImmPiece, ...]  # in the manual's order
    bits: int  # the immediate's width; its bit (bits - 1) is the sign
    scale: int  # the field counts units of this many bytes
    kinds: tuple[str, ...]  # the table kinds whose km_imm the core takes from it
    doc: str  # which instructions hold it, for the C comment
    manual: str  # the groups as the manual writes them, "31:12=20|10:1|11|19:12", for the C comment


def _bit_range(text: str) -> tuple[int, int]:
    """``"h:l"`` or ``"b"`` -> (high, low)."""
    hi, _, lo = text.partition(":")
    return int(hi), int(lo or hi)


def layout(name: str, *groups: tuple[str, str], scale: int = 1, kinds: Sequence[str] = (),
           doc: str) -> ImmLayout:
    """The layout a manual writes as groups ``(instruction bits "h:l", immediate bits "a|b:c|...")``: the
    instruction's bits from ``h`` down hold the immediate's bits in the order listed."""
    pieces: list[ImmPiece] = []
    for insn_bits, imm_bits in groups:
        top, bottom = _bit_range(insn_bits)
        cursor = top
        for part in imm_bits.split("|"):
            hi, lo = _bit_range(part)
            width = hi - lo + 1
            pieces.append(ImmPiece(cursor - width + 1, lo, width))
            cursor -= width
        if cursor != bottom - 1:
            raise ValueError(f"immediate {name}: {imm_bits!r} does not fill instruction bits {insn_bits}")
    held = sorted(b for p in pieces for b in range(p.imm, p.imm + p.width))
    if len(held) != len(set(held)) or scale & (scale - 1) or not 1 <= scale < 1 << 16:
        raise ValueError(f"immediate {name}: an immediate bit held twice, or a scale not a power of two "
                         "below 2^16 (struct kinst_imm_layout's kl_scale)")
    if max(p.width for p in pieces) > 31 or held[-1] > 63:
        raise ValueError(f"immediate {name}: a run wider than 31 bits or an immediate wider than 64 "
                         "(kinst_core_imm() masks a run with a 32-bit shift)")
    return ImmLayout(name, tuple(pieces), held[-1] + 1, scale, tuple(kinds), doc,
                     " ".join(f"{i}={m}" for i, m in groups))


def for_kinds(table_kinds: Sequence[Any], *layouts: ImmLayout) -> tuple[ImmLayout, ...]:
    """``layouts``, every kind they name checked against ``table_kinds`` (the ISA's ``TableKind`` records):
    a misspelt kind, or one given two fields, stops the import of the ISA's tables."""
    named = [k for lay in layouts for k in lay.kinds]
    wrong = sorted(set(named) - {k.kind for k in table_kinds}) + sorted({k for k in named if named.count(k) > 1})
    if wrong:
        raise ValueError(f"immediate layouts name table kinds the ISA has not, or twice: {', '.join(wrong)}")
    return layouts


def insert(lay: ImmLayout, word: int, value: int) -> int:
    """``word`` with ``value`` (bytes; the field keeps ``value // scale``, its bits that fit) in ``lay``'s
    field; every other bit of ``word`` is kept."""
    units = value // lay.scale
    for p in lay.pieces:
        ones = (1 << p.width) - 1
        word = word & ~(ones << p.insn) | (units >> p.imm & ones) << p.insn
    return word


FieldWriter = Callable[[int, int], int]  # (the field's bytes as a little-endian int, value) -> the new field


def inserter(fields: Mapping[str, str], layouts: Sequence[ImmLayout],
             writers: Optional[Mapping[str, FieldWriter]] = None) -> Callable[[str, bytes, int], Optional[bytes]]:
    """``Isa.reloc_insert`` over a relocation table's ``fields`` (type name -> the layout, or one of the ISA's
    own ``writers``, its value goes in): None for a type that is a plain little-endian store."""
    how: dict[str, FieldWriter] = {lay.name: functools.partial(insert, lay) for lay in layouts}
    how.update(writers or {})
    unknown = sorted(set(fields.values()) - set(how))
    if unknown:
        raise ValueError(f"relocation table names fields no layout defines: {', '.join(unknown)}")

    def reloc_insert(name: str, field: bytes, value: int) -> Optional[bytes]:
        which = fields.get(name)
        if which is None:
            return None
        return how[which](int.from_bytes(field, "little"), value).to_bytes(len(field), "little")

    return reloc_insert


def c_layouts(layouts: Sequence[ImmLayout], table_kinds: Sequence[Any]) -> list[dict[str, object]]:
    """The rows of ``KINST_IMM_LAYOUTS`` (``kinst_encoding.h``): one per table kind, in the order of
    ``table_kinds`` (the ISA's ``TableKind`` records, by C enum value), so that the core indexes it by the
    kind; a kind with no immediate has no pieces.  None at all for an ISA without immediate layouts."""
    if not layouts:
        return []
    by_kind = {k: lay for lay in layouts for k in lay.kinds}
    rows: list[dict[str, object]] = []
    for k in table_kinds:
        lay = by_kind.get(k.kind)
        if lay is None:
            rows.append({"bits": 0, "scale": 0, "npieces": 0, "pieces": ["{ 0, 0, 0 }"], "doc": f"{k.c_name}: none"})
            continue
        rows.append({"bits": lay.bits, "scale": lay.scale, "npieces": len(lay.pieces),
                     "pieces": [", ".join(f"{{ {p.insn}, {p.imm}, {p.width} }}" for p in lay.pieces[i:i + 4])
                                for i in range(0, len(lay.pieces), 4)],
                     "doc": f"{k.c_name}: {lay.name} ({lay.doc}), {lay.manual}"})
    return rows


def max_pieces(layouts: Sequence[ImmLayout]) -> int:
    """The most pieces one layout has (``KINST_IMM_MAXPIECES``); 1 for none, so the C array is legal."""
    return max((len(lay.pieces) for lay in layouts), default=1)
