"""The independent oracles for variables at an address: llvm-dwarfdump's DIE tree and readelf's CFA table.

``llvm-dwarfdump --debug-info`` prints every DIE with its depth, its
ranges and each variable's ``DW_AT_location`` (one expression, or a
location list with the address range of each entry).  From that dump
alone -- LLVM's reader, not kinstkit's -- ``scope_variables`` says which
concrete variable DIEs are in scope at an address (their enclosing
subprogram, lexical blocks and inlined copies all hold it) and which
expression is in force there.  ``readelf --debug-dump=frames-interp``
(binutils) gives the CFA rule at every address, which the frame base of
gcc's ``DW_OP_fbreg`` locations goes through.

Expressions are compared operation by operation, register names dropped
(llvm prints ``DW_OP_breg9 R9+16``, kinstkit ``DW_OP_breg9 16``); the
operands of the typed operations, which LLVM prints as DIE offsets and
the DWARF holds as unit offsets, are left out.
"""

from __future__ import annotations

import bisect
import re
import subprocess
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from helpers.skips import require_tool

WHY = "the independent oracle for variables' locations"
_DIE = re.compile(r"^(0x[0-9a-f]+):(\s+)(DW_TAG_\w+|NULL)", re.M)
_LOW = re.compile(r"DW_AT_low_pc\s+\((0x[0-9a-f]+)\)")
_HIGH = re.compile(r"DW_AT_high_pc\s+\((0x[0-9a-f]+)\)")
_RANGE = re.compile(r"\[(0x[0-9a-f]+), (0x[0-9a-f]+)\)")
_LOC_ONE = re.compile(r"DW_AT_location\s+\((DW_OP[^\n]*)\)\s*$", re.M)
_LOC_LIST = re.compile(r"DW_AT_location\s+\(0x[0-9a-f]+:\s*\n(.*?)\)\s*\n\s*(?:DW_AT|$)", re.S)
_LOC_ENTRY = re.compile(r"\[(0x[0-9a-f]+), (0x[0-9a-f]+)\): (.*)")
_TYPE = re.compile(r'DW_AT_type\s+\(0x[0-9a-f]+ "([^"]*)"\)')
_ORIGIN = re.compile(r"DW_AT_abstract_origin\s+\((0x[0-9a-f]+)")
_NAME = re.compile(r'DW_AT_name\s+\("([^"]*)"\)')
_FRAME_BASE = re.compile(r"DW_AT_frame_base\s+\((DW_OP[^\n]*)\)")
_SCOPES = ("DW_TAG_subprogram", "DW_TAG_lexical_block", "DW_TAG_inlined_subroutine")
_VARS = ("DW_TAG_formal_parameter", "DW_TAG_variable")
# Operations whose operands LLVM prints as DIE offsets (the DWARF has unit offsets): compared by name only.
_TYPED = ("DW_OP_convert", "DW_OP_regval_type", "DW_OP_const_type", "DW_OP_deref_type", "DW_OP_implicit_value",
          "DW_OP_GNU_convert", "DW_OP_GNU_regval_type", "DW_OP_GNU_const_type", "DW_OP_GNU_deref_type")


class DumpVar(NamedTuple):
    """One variable DIE of the dump."""

    offset: int
    name: str  # its own DW_AT_name, else its origin's
    type: str  # the type llvm-dwarfdump quotes, its own or its origin's
    single: Optional[str]  # a one-expression DW_AT_location
    entries: Tuple[Tuple[int, int, str], ...]  # a location list's (low, high, expression)
    scopes: Tuple[Tuple[Tuple[int, int], ...], ...]  # the ranges of each enclosing scope that has some
    frame_base: str  # the enclosing subprogram's DW_AT_frame_base, as llvm-dwarfdump prints it
    const_value: bool  # it has DW_AT_const_value (a constant, no location)


class Dump(NamedTuple):
    variables: List[DumpVar]


def _ranges(block: str) -> Tuple[Tuple[int, int], ...]:
    if "DW_AT_ranges" in block:
        part = block.split("DW_AT_ranges", 1)[1].split("DW_AT_", 1)[0]
        return tuple((int(a, 16), int(b, 16)) for a, b in _RANGE.findall(part))
    low, high = _LOW.search(block), _HIGH.search(block)
    if low and high:
        return ((int(low.group(1), 16), int(high.group(1), 16)),)
    return ()


def dump(path: str) -> Dump:
    """Every concrete variable DIE of ``path`` with its enclosing scopes' ranges and its location."""
    tool = require_tool("llvm-dwarfdump", "llvm", WHY)
    text = subprocess.run([tool, "--debug-info", path], capture_output=True, text=True, check=True).stdout
    starts = list(_DIE.finditer(text))
    names: Dict[int, str] = {}
    types: Dict[int, str] = {}
    origins: Dict[int, int] = {}
    raw = []
    stack: List[Tuple[int, Tuple[Tuple[int, int], ...], str]] = []  # (depth, ranges, frame base) of open scopes
    for m, nxt in zip(starts, starts[1:] + [None]):
        offset = int(m.group(1), 16)
        depth = (len(m.group(2)) - 1) // 2
        tag = m.group(3)
        block = text[m.end(): nxt.start() if nxt else len(text)]
        while stack and stack[-1][0] >= depth:
            stack.pop()
        if tag == "NULL":
            continue
        name, typ, origin = _NAME.search(block), _TYPE.search(block), _ORIGIN.search(block)
        if name:
            names[offset] = name.group(1)
        if typ:
            types[offset] = typ.group(1)
        if origin:
            origins[offset] = int(origin.group(1), 16)
        if tag in _SCOPES:
            fb = _FRAME_BASE.search(block)
            stack.append((depth, _ranges(block), fb.group(1).strip() if fb else (stack[-1][2] if stack else "")))
        elif tag in _VARS and stack and any(s[1] for s in stack) and "DW_AT_declaration" not in block:
            one = _LOC_ONE.search(block)
            many = _LOC_LIST.search(block)
            entries = tuple((int(a, 16), int(b, 16), e.strip()) for a, b, e in _LOC_ENTRY.findall(many.group(1))) \
                if many else ()
            raw.append((offset, one.group(1).strip() if one else None, entries, tuple(s[1] for s in stack if s[1]),
                        stack[-1][2], "DW_AT_const_value" in block))

    def through(off: int, table: Dict[int, str]) -> str:
        for _ in range(16):
            if off in table:
                return table[off]
            if off not in origins:
                return ""
            off = origins[off]
        return ""

    return Dump([DumpVar(o, through(o, names), through(o, types), one, entries, scopes, fb, const)
                 for o, one, entries, scopes, fb, const in raw])


def in_scope(var: DumpVar, address: int) -> bool:
    return all(any(lo <= address < hi for lo, hi in ranges) for ranges in var.scopes)


def expression_at(var: DumpVar, address: int) -> Optional[str]:
    """The expression in force at ``address``, or None where the variable has none."""
    if var.single is not None:
        return var.single
    for lo, hi, expr in var.entries:
        if lo <= address < hi:
            return expr
    return None


_REGISTER = re.compile(r"\b[A-Z][A-Z0-9]*\b")
_NUMBER = re.compile(r"[-+]?(?:0x[0-9a-fA-F]+|\d+)")


def undecoded(expr: str) -> Optional[bytes]:
    """The bytes LLVM 14 could not decode at the end of an expression (``<decoding error> a0 91 63 00 00 00``:
    it does not know DW_OP_implicit_pointer, DW_OP_const_type and the GNU operations), else None."""
    if "<decoding error>" not in expr:
        return None
    return bytes(int(b, 16) for b in expr.split("<decoding error>", 1)[1].split())


def c_spelling(llvm_type: str, ours: str) -> bool:
    """Whether LLVM's spelling of a type is ours: LLVM 14 names a struct, union or enum without its keyword, and
    an anonymous one by its keyword alone (ours, as gdb's: ``union {...}``)."""
    anonymous = ours.replace(" {...}", " ")
    return llvm_type in (ours, anonymous, re.sub(r"\b(struct|union|enum) ", "", ours))


# The names llvm-dwarfdump prints for x86-64 DWARF registers a DW_OP_regx names (System V AMD64 psABI,
# figure 3.36): its number is printed only for the fixed-number operations.
X86_64_REGISTERS = {**{f"XMM{i}": 17 + i for i in range(16)}, **{f"ST{i}": 33 + i for i in range(8)},
                    **{f"MM{i}": 41 + i for i in range(8)}, **{n: i for i, n in enumerate(
                        ("RAX", "RDX", "RCX", "RBX", "RSI", "RDI", "RBP", "RSP", "R8", "R9", "R10", "R11", "R12",
                         "R13", "R14", "R15", "RIP"))}}


def normalise(expr: str) -> List[Tuple[str, Tuple[int, ...]]]:
    """An expression as (operation, operands) pairs: register names dropped, numbers as ints, nested
    expressions (entry_value) flattened in order."""
    out = []
    for part in re.split(r",\s*|\(|\)", expr):
        part = part.strip()
        if not part.startswith("DW_OP"):
            continue
        name, _, rest = part.partition(" ")
        if name in _TYPED:
            out.append((name, ()))
            continue
        regx = []
        if name in ("DW_OP_regx", "DW_OP_bregx"):
            reg = re.match(r"\s*([A-Z][A-Z0-9]*)", rest)
            if reg and reg.group(1) in X86_64_REGISTERS:
                regx = [X86_64_REGISTERS[reg.group(1)]]
        rest = _REGISTER.sub(" ", rest)
        out.append((name, tuple(regx + [int(n, 0) for n in _NUMBER.findall(rest.replace("+", " +"))])))
    return out


class CfaRow(NamedTuple):
    register: str  # readelf's name (rsp, rbp)
    offset: int


def cfa_rows(path: str) -> Tuple[List[int], List[Optional[CfaRow]]]:
    """readelf's interpreted CFA rows of ``path``'s CFI (.debug_frame, .eh_frame): row start addresses and
    rules (None past an FDE's end, and where the CFA is an expression).  An FDE readelf prints no rows for
    has its CIE's initial rule."""
    tool = require_tool("readelf", "binutils", WHY)
    text = subprocess.run([tool, "--debug-dump=frames-interp", path], capture_output=True, text=True).stdout
    rows: List[Tuple[int, Optional[CfaRow]]] = []
    entry = re.compile(r"^([0-9a-f]{8}) [0-9a-f]+ [0-9a-f]+ (CIE|FDE)(?: cie=([0-9a-f]+) pc=([0-9a-f]+)\.\.([0-9a-f]+))?")
    row = re.compile(r"^([0-9a-f]{8,16}) (\S+)\s")
    rule = re.compile(r"^([a-z][a-z0-9]*)([+-]\d+)$")
    cies: Dict[int, Optional[CfaRow]] = {}
    current = None  # ("CIE", offset) or ("FDE", cie, low, high, rows seen)
    fde_rows = 0

    def close() -> None:
        if current and current[0] == "FDE":
            if not fde_rows:
                rows.append((current[2], cies.get(current[1])))
            rows.append((current[3], None))

    for line in text.splitlines():
        m = entry.match(line)
        if m:
            close()
            fde_rows = 0
            if m.group(2) == "CIE":
                current = ("CIE", int(m.group(1), 16))
            else:
                current = ("FDE", int(m.group(3), 16), int(m.group(4), 16), int(m.group(5), 16))
            continue
        m = row.match(line)
        if not m or current is None:
            continue
        r = rule.match(m.group(2))
        value = CfaRow(r.group(1), int(r.group(2))) if r else None
        if current[0] == "CIE":
            cies.setdefault(current[1], value)
        else:
            rows.append((int(m.group(1), 16), value))
            fde_rows += 1
    close()
    rows.sort(key=lambda r: r[0])
    return [r[0] for r in rows], [r[1] for r in rows]


def cfa_at(table: Tuple[List[int], List[Optional[CfaRow]]], address: int) -> Optional[CfaRow]:
    starts, rules = table
    i = bisect.bisect_right(starts, address) - 1
    return rules[i] if i >= 0 else None


def sample(addresses: Sequence[int], count: int) -> List[int]:
    step = max(1, len(addresses) // count)
    return list(addresses[::step])
