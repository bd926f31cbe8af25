"""The variables at a probe site: every parameter and local in scope there, each with where its value is.

``perf probe -V FUNC:LINE`` lists the variables available at a site and
SystemTap reads ``$var``; gdb's ``info scope`` lists a block's symbols.
This module does the same for a kinst probe: from the subprogram whose code
holds the address down through the lexical blocks and inlined copies whose
ranges hold it, every ``DW_TAG_formal_parameter`` and ``DW_TAG_variable``
(an inlined copy's with the inline function they belong to; those its
abstract origin declares but the copy does not list are there too,
optimized out, as gdb shows them), with its C type and its location at the
address (``locations``): a D expression over kinst's ``regs[]`` and typed
memory reads, or why there is none.

``resolve`` reads ``VAR``, ``VAR->member``, ``VAR.member`` chains (``fs->entry``,
``m->flags``) as ``perf probe`` accepts them, through the type information.
"""

from __future__ import annotations

import re
from typing import Dict, List, NamedTuple, Optional, Set, Tuple

from . import locations as L
from .ctypes import BOOL, CType, ENUM, FLOAT, INT, POINTER, Types, members_path
from .dwarfindex import DwarfIndex
from ..common.errors import UserError
from ..image.dwarf import spec as S
from ..image.dwarf.cfi import FrameTable, cfa_at
from ..image.dwarf.expr import decode, text as ops_text
from ..image.dwarf.lists import locations as location_list, ranges as range_list
from ..image.dwarf.sections import DwarfError
from ..image.dwarf.units import Unit, UnitReader
from ..isa.contract import Isa

PARAMETER = "parameter"
LOCAL = "local"
SCALARS = (INT, FLOAT, POINTER, ENUM, BOOL)
MAX_SCOPES = 512


class Variable(NamedTuple):
    """One variable in scope at a site."""

    name: str
    kind: str  # PARAMETER or LOCAL
    function: str  # the function it belongs to: the subprogram's, or the inline function a copy is of
    inlined: bool  # it belongs to an inlined copy
    scope: int  # how deep its scope is (0: the subprogram's own; each block and inlined copy one more)
    ctype: CType
    location: L.Location  # at the site's address
    dwarf: str  # the DWARF location expression in force at the address ("" when none), in words
    die: int  # the variable's DIE (.debug_info offset)
    concrete: bool = True  # False: only the abstract origin declares it (the copy dropped it): optimized out
    expr: bytes = b""  # the expression's bytes


class Reading(NamedTuple):
    """A value to print at a site: a variable, or a member chain from one, as D and as the harness's program."""

    spec: str  # what was asked: "fs->entry"
    variable: Optional[Variable]  # the variable it starts from (None: no such variable here)
    ctype: Optional[CType]  # the type of the value read
    value: Optional[L.Node]  # the computation (None: not available)
    d: str  # the D expression ("" when not available)
    reason: str  # why not available ("" when it is)
    where: str  # where the value comes from, in words


class VariableReader:
    """Reads the variables at addresses of one image (see the module docstring)."""

    def __init__(self, index: DwarfIndex, units: UnitReader, frames: List[FrameTable], isa: Isa):
        self.index = index
        self.units = units
        self.types = Types(units)
        self.frames = frames
        self.names = {r.number: r.d_name for r in isa.dwarf_regs}
        self.reg_names = {r.number: r.name for r in isa.dwarf_regs}

    # -- scopes ------------------------------------------------------------------------

    def at(self, address: int) -> List[Variable]:
        """Every variable in scope at ``address``, outermost scope first, parameters before locals."""
        sub = self.index.sub_at(address)
        if sub is None:
            return []
        die = self.index.sub_die[sub]
        unit = self.units.unit_of(die)
        ab, attrs, _ = unit.die(die)
        if ab is None:
            return []
        frame_base = attrs.get(S.DW_AT_frame_base)
        name = self.index.names[self.index.sub_name[sub]]
        out: List[Variable] = []
        walk = _Scope(self, unit, address, frame_base)
        walk.visit(die, name, False, 0, out)
        return out

    # -- one variable ----------------------------------------------------------------------

    def reading(self, variables: List[Variable], spec: str) -> Reading:
        """``spec`` (``VAR``, ``VAR->m``, ``VAR.m.n``...) read at the site whose variables are ``variables``."""
        name, path = parse_spec(spec)
        found = [v for v in variables if v.name == name]
        if not found:
            return Reading(spec, None, None, None, "", f"no variable '{name}' is in scope here", "")
        var = max(found, key=lambda v: v.scope)  # the innermost, as C's scoping and gdb pick it
        steps, why = members_path(self.types, var.ctype, path)
        if why:
            return Reading(spec, var, None, None, "", why, "")
        loc: L.Location = var.location
        ctype = var.ctype
        for access, offset, mtype in steps:
            if access == "->":
                base = L.value(loc, ctype.size) if ctype.size else L.Unavailable(f"{ctype.name} has no size")
                if isinstance(base, L.Unavailable):
                    loc = base
                else:
                    loc = L.Memory(L.add(base, offset))
            elif isinstance(loc, L.Memory):
                loc = L.Memory(L.add(loc.address, offset))
            elif not isinstance(loc, L.Unavailable):
                loc = L.Unavailable(f"'.': {var.name} is not in memory here ({L.describe(loc, self.names)}), "
                                    "so its members have no address")
            ctype = mtype
        return self._read(spec, var, ctype, loc)

    def read(self, var: Variable) -> Reading:
        """``var``'s own value (a listing's line; ``reading`` picks the innermost of same-named variables)."""
        return self._read(var.name, var, var.ctype, var.location)

    def _read(self, spec: str, var: Variable, ctype: CType, loc: L.Location) -> Reading:
        where = L.describe(loc, self.names) if not isinstance(loc, L.Unavailable) else ""
        if isinstance(loc, L.Unavailable):
            return Reading(spec, var, ctype, None, "", loc.reason, where)
        if ctype.kind not in SCALARS or not 1 <= ctype.size <= 8:
            return Reading(spec, var, ctype, None, "", f"a {ctype.name} is not a scalar of 1 to 8 bytes: name a "
                                                       "member (VAR->member, VAR.member) to read", where)
        node = L.value(loc, ctype.size)
        if isinstance(node, L.Unavailable):
            return Reading(spec, var, ctype, None, "", node.reason, where)
        missing = sorted({r for r in L.registers(node) if r not in self.names})
        if missing:
            regs = ", ".join(f"DWARF register {r}" for r in missing)
            return Reading(spec, var, ctype, None, "", f"it is in {regs}, which kinst's regs[] does not hold "
                                                       "(a floating-point or vector register)", where)
        return Reading(spec, var, ctype, node, L.d_value(node, ctype.size, ctype.signed, self.names), "", where)

    # -- frame base and CFA ----------------------------------------------------------------

    def cfa(self, address: int) -> L.Node:
        rule = cfa_at(self.frames, address)
        if rule.problem:
            raise L.unavailable(f"DW_OP_call_frame_cfa: {rule.problem}")
        return L.add(L.Reg(rule.register), rule.offset)


class _Scope:
    """One walk down the scopes that hold an address."""

    def __init__(self, reader: VariableReader, unit: Unit, address: int, frame_base):
        self.reader = reader
        self.unit = unit
        self.address = address
        self.frame_base_attr = frame_base
        self.visits = 0

    def holds(self, unit: Unit, attrs) -> Optional[bool]:
        """Whether a scope's ranges hold the address (None: it has none, so it is not a scope of its own)."""
        got = attrs.get(S.DW_AT_ranges)
        if got is not None:
            return any(lo <= self.address < hi for lo, hi in range_list(unit, got[0], got[1]))
        low, high = attrs.get(S.DW_AT_low_pc), attrs.get(S.DW_AT_high_pc)
        if low is None or high is None:
            return None
        lo = unit.address(low[0], low[1])
        hi = lo + high[1] if high[0] in S.CONSTANTS else unit.address(high[0], high[1])
        return lo <= self.address < hi

    def visit(self, die: int, function: str, inlined: bool, scope: int, out: List[Variable]) -> None:
        self.visits += 1
        if self.visits > MAX_SCOPES:
            raise DwarfError(f".debug_info: more than {MAX_SCOPES} nested scopes at {self.address:#x}")
        unit = self.unit
        seen_origins: Set[int] = set()
        for child in unit.children(die):
            ab, attrs, _ = unit.die(child)
            if ab is None:
                continue
            tag = ab.tag
            if tag in (S.DW_TAG_formal_parameter, S.DW_TAG_variable):
                if S.DW_AT_declaration in attrs:
                    continue
                origin = self._origin(attrs)
                if origin:
                    seen_origins.add(origin)
                var = self.variable(child, attrs, tag, function, inlined, scope)
                if var is not None:
                    out.append(var)
            elif tag == S.DW_TAG_lexical_block:
                held = self.holds(unit, attrs)
                if held is None or held:
                    origin = self._origin(attrs)
                    if origin:
                        seen_origins.add(origin)
                    self.visit(child, function, inlined, scope + (1 if held else 0), out)
            elif tag == S.DW_TAG_inlined_subroutine:
                if self.holds(unit, attrs):
                    origin = self._origin(attrs)
                    callee = self._name(origin) if origin else "?"
                    self.visit(child, callee or "?", True, scope + 1, out)
        # What the abstract origin declares and this concrete copy leaves out is optimized out (gdb shows it).
        _, attrs, _ = unit.die(die)
        origin = self._origin(attrs)
        if origin:
            self._abstract(origin, seen_origins, function, inlined, scope, out)

    def _abstract(self, origin: int, seen: Set[int], function: str, inlined: bool, scope: int,
                  out: List[Variable]) -> None:
        units = self.reader.units
        unit = units.unit_of(origin)
        ab, _, _ = unit.die(origin)
        if ab is None or not ab.children:
            return
        for child in unit.children(origin):
            cab, attrs, _ = unit.die(child)
            if cab is None or child in seen or cab.tag not in (S.DW_TAG_formal_parameter, S.DW_TAG_variable):
                continue
            if S.DW_AT_declaration in attrs or S.DW_AT_name not in attrs:
                continue
            name = unit.string(*attrs[S.DW_AT_name])
            tdie = unit.ref(*attrs[S.DW_AT_type]) if S.DW_AT_type in attrs else 0
            kind = PARAMETER if cab.tag == S.DW_TAG_formal_parameter else LOCAL
            out.append(Variable(name, kind, function, inlined, scope, self.reader.types.ctype(tdie or 0),
                                L.Unavailable(L.OPTIMIZED_OUT), "", child, False))

    def _origin(self, attrs) -> int:
        got = attrs.get(S.DW_AT_abstract_origin)
        return (self.unit.ref(*got) or 0) if got is not None else 0

    def _name(self, off: int) -> Optional[str]:
        """The name at the end of ``off``'s origin and specification chain."""
        units = self.reader.units
        for _ in range(16):
            unit = units.unit_of(off)
            ab, attrs, _ = unit.die(off)
            if ab is None:
                return None
            if S.DW_AT_name in attrs:
                return unit.string(*attrs[S.DW_AT_name])
            nxt = attrs.get(S.DW_AT_abstract_origin) or attrs.get(S.DW_AT_specification)
            if nxt is None:
                return None
            off = unit.ref(*nxt) or 0
            if not off:
                return None
        return None

    def _attr_through_origin(self, attrs, at: int) -> Tuple[Optional[Unit], Optional[Tuple[int, object]]]:
        units = self.reader.units
        unit = self.unit
        for _ in range(16):
            if at in attrs:
                return unit, attrs[at]
            nxt = attrs.get(S.DW_AT_abstract_origin) or attrs.get(S.DW_AT_specification)
            if nxt is None:
                return None, None
            off = unit.ref(*nxt)
            if not off:
                return None, None
            unit = units.unit_of(off)
            ab, attrs, _ = unit.die(off)
            if ab is None:
                return None, None
        return None, None

    def variable(self, die: int, attrs, tag: int, function: str, inlined: bool, scope: int) -> Optional[Variable]:
        nunit, name = self._attr_through_origin(attrs, S.DW_AT_name)
        if name is None or nunit is None:
            return None
        text = nunit.string(*name)
        tunit, tattr = self._attr_through_origin(attrs, S.DW_AT_type)
        tdie = (tunit.ref(*tattr) or 0) if tattr is not None and tunit is not None else 0
        ctype = self.reader.types.ctype(tdie)
        loc, dwarf, expr = self.location(attrs, ctype)
        kind = PARAMETER if tag == S.DW_TAG_formal_parameter else LOCAL
        return Variable(text, kind, function, inlined, scope, ctype, loc, dwarf, die, True, expr)

    def location(self, attrs, ctype: CType) -> Tuple[L.Location, str, bytes]:
        unit = self.unit
        got = attrs.get(S.DW_AT_location)
        if got is None:
            const = attrs.get(S.DW_AT_const_value)
            if const is not None:
                return _constant(const, ctype), "DW_AT_const_value", b""
            return L.Unavailable(L.OPTIMIZED_OUT), "", b""
        form, value = got
        if isinstance(value, bytes):
            expr = value
        else:
            entries = location_list(unit, form, value)
            here = [e for e in entries if not e.default and e.low <= self.address < e.high]
            if not here:
                here = [e for e in entries if e.default]
            if not here:
                return L.Unavailable("optimized out here: the address is outside every range of its location "
                                     "list"), "", b""
            expr = here[0].expr
        ops = decode(expr, unit.addr_size, unit.offset_size)
        loc = L.evaluate(ops, self.frame_base, lambda: self.reader.cfa(self.address), unit.indexed_address,
                         unit.addr_size, self.base_type)
        return loc, ops_text(ops), expr

    def base_type(self, offset: int) -> Tuple[int, bool, bool]:
        """The base type at unit offset ``offset`` (a typed operation's operand): (bytes, signed, integer)."""
        t = self.reader.types.ctype(self.unit.offset + offset)
        return t.size, t.signed, t.kind in (INT, ENUM, BOOL, POINTER)

    def frame_base(self) -> L.Node:
        got = self.frame_base_attr
        if got is None:
            raise L.unavailable("DW_OP_fbreg, but the function has no DW_AT_frame_base")
        unit = self.unit
        form, value = got
        if isinstance(value, bytes):
            expr = value
        else:
            entries = [e for e in location_list(unit, form, value) if e.low <= self.address < e.high]
            if not entries:
                raise L.unavailable("DW_OP_fbreg, and the function's frame base has no location here")
            expr = entries[0].expr
        loc = L.evaluate(decode(expr, unit.addr_size, unit.offset_size), _no_frame_base,
                         lambda: self.reader.cfa(self.address), unit.indexed_address, unit.addr_size)
        if isinstance(loc, L.Register):
            return L.Reg(loc.number)
        if isinstance(loc, L.Memory):
            return loc.address
        if isinstance(loc, L.Value):
            return loc.value
        raise L.unavailable(f"DW_OP_fbreg, and the function's frame base is not an address here "
                            f"({loc.reason if isinstance(loc, L.Unavailable) else type(loc).__name__})")


def _no_frame_base() -> L.Node:
    raise L.unavailable("a frame base defined through itself (DW_OP_fbreg in DW_AT_frame_base; corrupt)")


def _constant(const: Tuple[int, object], ctype: CType) -> L.Location:
    form, value = const
    if isinstance(value, bytes):
        return L.Bytes(value)
    size = ctype.size if 1 <= ctype.size <= 8 else 8
    return L.Bytes((value & ((1 << (8 * size)) - 1)).to_bytes(size, "little"))  # type: ignore[operator]


_SPEC = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)((?:(?:->|\.)[A-Za-z_][A-Za-z0-9_]*)*)$")
_STEP = re.compile(r"(->|\.)([A-Za-z_][A-Za-z0-9_]*)")


def parse_spec(spec: str) -> Tuple[str, List[Tuple[str, str]]]:
    """``fs->entry.start`` -> ("fs", [("->", "entry"), (".", "start")]); a one-line UserError otherwise."""
    m = _SPEC.match(spec.strip())
    if m is None:
        raise UserError(f"{spec!r}: expected a variable and members, as VAR, VAR->member or VAR.member")
    return m.group(1), _STEP.findall(m.group(2))


def variable_dict(v: Variable, reading: Reading) -> Dict[str, object]:
    """The JSON of one variable at a site: the keys ``probes --vars --json`` documents."""
    return {
        "name": v.name,
        "kind": v.kind,
        "function": v.function,
        "inlined": v.inlined,
        "type": v.ctype.name,
        "d": reading.d or None,
        "where": reading.where or None,
        "reason": reading.reason,
        "dwarf": v.dwarf,
    }
