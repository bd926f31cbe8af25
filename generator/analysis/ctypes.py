"""C types from DWARF type DIEs: their spelling, their size and signedness, and struct members by name.

A variable's type is shown as C spells it (``struct vm_map_entry *``,
``const char *``, ``int (*)(void *)``), as llvm-dwarfdump quotes it beside
``DW_AT_type``; its value is read by the facts under the typedefs and
qualifiers: how many bytes, signed or not, a pointer (to what), a struct
(with which members at which offsets).  Type graphs can be cyclic (a
struct pointing to itself is the rule, a corrupt reference loop the
exception): every walk is bounded, and a chain longer than ``MAX_CHAIN``
gives ``?`` rather than a hang.
"""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Tuple

from ..image.dwarf import spec as S
from ..image.dwarf.sections import DwarfError, Reads
from ..image.dwarf.units import Unit, UnitReader

MAX_CHAIN = 64  # typedef/qualifier/pointer links followed before a type counts as a loop

INT, FLOAT, POINTER, ENUM, BOOL, STRUCT, UNION, ARRAY, FUNCTION, VOID, UNKNOWN = (
    "int", "float", "pointer", "enum", "bool", "struct", "union", "array", "function", "void", "unknown")
_QUALIFIERS = {S.DW_TAG_const_type: "const", S.DW_TAG_volatile_type: "volatile", S.DW_TAG_restrict_type: "restrict",
               S.DW_TAG_atomic_type: "_Atomic"}
_AGGREGATES = {S.DW_TAG_structure_type: "struct", S.DW_TAG_union_type: "union", S.DW_TAG_class_type: "class",
               S.DW_TAG_enumeration_type: "enum"}


class CType(NamedTuple):
    """What a value of a type is, under its typedefs and qualifiers."""

    name: str  # as C spells the declared type
    kind: str  # INT, FLOAT, POINTER, ENUM, BOOL, STRUCT, UNION, ARRAY, FUNCTION, VOID or UNKNOWN
    size: int  # bytes; 0 when unknown
    signed: bool
    die: int  # the DIE of the type under typedefs and qualifiers (0: void)
    target: int  # a pointer's pointee (0: void); an array's element


class Member(NamedTuple):
    name: str
    offset: int  # bytes from the start of the struct
    type_die: int  # 0: void (corrupt)
    bit_size: int  # 0 unless a bit field


class Types:
    """Type DIEs of one file, read on demand through a ``UnitReader``."""

    def __init__(self, units: UnitReader, reads: Optional[Reads] = None):
        self.units = units
        self.reads = reads
        self._names: Dict[int, str] = {}

    def _die(self, off: int):
        unit = self.units.unit_of(off, self.reads)
        ab, attrs, _ = unit.die(off)
        if ab is None:
            raise DwarfError(f".debug_info: a type reference points to a null entry at {off:#x}")
        return unit, ab, attrs

    def _ref(self, unit: Unit, attrs, at: int = S.DW_AT_type) -> int:
        got = attrs.get(at)
        if got is None:
            return 0
        ref = unit.ref(*got)
        return ref or 0

    def _text(self, unit: Unit, attrs, at: int = S.DW_AT_name) -> Optional[str]:
        got = attrs.get(at)
        return None if got is None else unit.string(got[0], got[1], self.reads)

    def _int(self, attrs, at: int) -> Optional[int]:
        got = attrs.get(at)
        return got[1] if got is not None and isinstance(got[1], int) else None

    # -- facts ----------------------------------------------------------------------

    def ctype(self, off: int) -> CType:
        """The type at DIE ``off`` (0: void)."""
        name = self.name(off)
        seen = 0
        while off:
            seen += 1
            if seen > MAX_CHAIN:
                return CType(name, UNKNOWN, 0, False, 0, 0)
            unit, ab, attrs = self._die(off)
            tag = ab.tag
            if tag == S.DW_TAG_typedef or tag in _QUALIFIERS:
                off = self._ref(unit, attrs)
                continue
            size = self._int(attrs, S.DW_AT_byte_size) or 0
            if tag == S.DW_TAG_base_type:
                enc = self._int(attrs, S.DW_AT_encoding) or 0
                if enc == S.DW_ATE_float:
                    return CType(name, FLOAT, size, True, off, 0)
                if enc == S.DW_ATE_boolean:
                    return CType(name, BOOL, size, False, off, 0)
                return CType(name, INT, size, enc in (S.DW_ATE_signed, S.DW_ATE_signed_char), off, 0)
            if tag in (S.DW_TAG_pointer_type, S.DW_TAG_reference_type):
                return CType(name, POINTER, size or unit.addr_size, False, off, self._ref(unit, attrs))
            if tag == S.DW_TAG_enumeration_type:
                under = self._ref(unit, attrs)
                signed = self.ctype(under).signed if under else False
                return CType(name, ENUM, size, signed, off, under)
            if tag in (S.DW_TAG_structure_type, S.DW_TAG_class_type):
                return CType(name, STRUCT, size, False, off, 0)
            if tag == S.DW_TAG_union_type:
                return CType(name, UNION, size, False, off, 0)
            if tag == S.DW_TAG_array_type:
                return CType(name, ARRAY, size, False, off, self._ref(unit, attrs))
            if tag == S.DW_TAG_subroutine_type:
                return CType(name, FUNCTION, 0, False, off, 0)
            return CType(name, UNKNOWN, size, False, off, 0)
        return CType(name, VOID, 0, False, 0, 0)

    def members(self, off: int) -> List[Member]:
        """The members of the struct or union at ``off``, in order; anonymous members' own members follow them
        at their offset (C's anonymous structs and unions)."""
        out: List[Member] = []
        self._members(off, 0, out, 0)
        return out

    def _members(self, off: int, base: int, out: List[Member], depth: int) -> None:
        if depth > 16:
            return
        unit, ab, _ = self._die(off)
        if not ab.children:
            return
        for child in unit.children(off):
            cab, attrs, _ = unit.die(child)
            if cab is None or cab.tag != S.DW_TAG_member:
                continue
            where = attrs.get(S.DW_AT_data_member_location)
            offset = 0
            if where is not None:
                if isinstance(where[1], int):
                    offset = where[1]
                elif isinstance(where[1], bytes) and where[1][:1] == b"\x23":  # DW_OP_plus_uconst N
                    from ..image.dwarf.units import uleb

                    offset = uleb(where[1], 1)[0]
            bit = self._int(attrs, S.DW_AT_data_bit_offset)
            if where is None and bit is not None:
                offset = bit // 8
            name = self._text(unit, attrs)
            tdie = self._ref(unit, attrs)
            if name is None:
                if tdie:
                    inner = self.ctype(tdie)
                    if inner.kind in (STRUCT, UNION):
                        self._members(inner.die, base + offset, out, depth + 1)
                continue
            out.append(Member(name, base + offset, tdie, self._int(attrs, S.DW_AT_bit_size) or 0))

    # -- spelling ---------------------------------------------------------------------

    def name(self, off: int) -> str:
        """The type at ``off`` as C spells it."""
        got = self._names.get(off)
        if got is None:
            try:
                got = self._declare(off, "", 0)
            except RecursionError:
                got = "?"
            self._names[off] = got
        return got

    def _declare(self, off: int, inner: str, depth: int) -> str:
        if depth > MAX_CHAIN:
            return _join("?", inner)
        if not off:
            return _join("void", inner)
        unit, ab, attrs = self._die(off)
        tag = ab.tag
        if tag in (S.DW_TAG_pointer_type, S.DW_TAG_reference_type):
            target = self._ref(unit, attrs)
            star = "*" if tag == S.DW_TAG_pointer_type else "&"
            wrapped = star + inner
            if target and self._tag(target) in (S.DW_TAG_array_type, S.DW_TAG_subroutine_type):
                wrapped = f"({wrapped})"
            return self._declare(target, wrapped, depth + 1)
        if tag in _QUALIFIERS:
            target = self._ref(unit, attrs)
            q = _QUALIFIERS[tag]
            if target and self._tag(target) in (S.DW_TAG_pointer_type, S.DW_TAG_reference_type):
                return self._declare(target, _join(q, inner), depth + 1)
            return f"{q} {self._declare(target, inner, depth + 1)}"
        if tag == S.DW_TAG_array_type:
            dims = ""
            for child in unit.children(off) if ab.children else ():
                cab, cattrs, _ = unit.die(child)
                if cab is None or cab.tag != S.DW_TAG_subrange_type:
                    continue
                count = self._int(cattrs, S.DW_AT_count)
                upper = self._int(cattrs, S.DW_AT_upper_bound)
                n = count if count is not None else (upper + 1 if upper is not None and upper < 1 << 62 else None)
                dims += f"[{n}]" if n is not None else "[]"
            return self._declare(self._ref(unit, attrs), f"{inner}{dims or '[]'}", depth + 1)
        if tag == S.DW_TAG_subroutine_type:
            params = []
            for child in unit.children(off) if ab.children else ():
                cab, cattrs, _ = unit.die(child)
                if cab is None:
                    continue
                if cab.tag == S.DW_TAG_formal_parameter:
                    params.append(self._declare(self._ref(unit, cattrs), "", depth + 1))
                elif cab.tag == S.DW_TAG_unspecified_parameters:
                    params.append("...")
            return self._declare(self._ref(unit, attrs), f"{inner}({', '.join(params) or 'void'})", depth + 1)
        name = self._text(unit, attrs)
        if tag in _AGGREGATES:
            name = f"{_AGGREGATES[tag]} {name or '{...}'}"  # gdb's spelling of an anonymous one
        elif name is None:
            name = "void" if tag == S.DW_TAG_unspecified_type else "?"
        return _join(name, inner)

    def _tag(self, off: int) -> int:
        return self._die(off)[1].tag


def _join(left: str, inner: str) -> str:
    """A type's spelling around a declarator, spaced as llvm-dwarfdump spaces it: ``int *``, ``char[8]``."""
    if not inner:
        return left
    return left + inner if inner[0] == "[" else f"{left} {inner}"


def members_path(types: Types, ctype: CType, path: List[Tuple[str, str]]) -> Tuple[List[Tuple[str, int, CType]], str]:
    """Follow ``path`` ((``->`` or ``.``, member name) steps) from a value of ``ctype``: per step, the access,
    the member's offset and its type; or, where a step cannot be taken, [] and why."""
    steps: List[Tuple[str, int, CType]] = []
    current = ctype
    for access, member in path:
        if access == "->":
            if current.kind != POINTER:
                return [], f"'->{member}' on {current.name}, which is not a pointer"
            target = types.ctype(current.target) if current.target else None
            if target is None or target.kind not in (STRUCT, UNION):
                return [], f"'->{member}' on {current.name}, which does not point to a struct or union"
            holder = target
        else:
            if current.kind not in (STRUCT, UNION):
                return [], f"'.{member}' on {current.name}, which is not a struct or union"
            holder = current
        found = [m for m in types.members(holder.die) if m.name == member]
        if not found:
            names = ", ".join(m.name for m in types.members(holder.die)[:12])
            return [], f"{holder.name} has no member '{member}' (it has {names})"
        m = found[0]
        if m.bit_size:
            return [], f"{holder.name}.{member} is a bit field, which kinstkit does not read"
        current = types.ctype(m.type_die)
        steps.append((access, m.offset, current))
    return steps, ""
