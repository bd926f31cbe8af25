"""DWARF expressions (section 2.5 and 2.6): decoded into operations, each with its spec name and operands.

Only decoding lives here; what a location means at a probe site is
``analysis.locations``.  Every operation of DWARF 5 and gcc's GNU ones is
known by name and operand shape, so an operation kinstkit does not
translate is named in the reason it gives; bytes that are no operation at
all are a ``DwarfError``.
"""

from __future__ import annotations

import struct
from typing import Dict, List, NamedTuple, Tuple

from .sections import DwarfError
from .units import sleb, uleb

# opcode -> (name, operand kinds): "u" uleb, "s" sleb, "a" address, "1u"/"1s"/"2u"/"2s"/"4u"/"4s"/"8u"/"8s"
# fixed, "r" a DIE offset of the unit's offset size, "b" a uleb length then that many bytes, "t" a type
# reference (uleb) then for const_type a 1-byte size and the bytes, "e" a uleb length and a nested
# expression (entry_value).
OPS: Dict[int, Tuple[str, Tuple[str, ...]]] = {
    0x03: ("DW_OP_addr", ("a",)), 0x06: ("DW_OP_deref", ()),
    0x08: ("DW_OP_const1u", ("1u",)), 0x09: ("DW_OP_const1s", ("1s",)), 0x0A: ("DW_OP_const2u", ("2u",)),
    0x0B: ("DW_OP_const2s", ("2s",)), 0x0C: ("DW_OP_const4u", ("4u",)), 0x0D: ("DW_OP_const4s", ("4s",)),
    0x0E: ("DW_OP_const8u", ("8u",)), 0x0F: ("DW_OP_const8s", ("8s",)), 0x10: ("DW_OP_constu", ("u",)),
    0x11: ("DW_OP_consts", ("s",)), 0x12: ("DW_OP_dup", ()), 0x13: ("DW_OP_drop", ()), 0x14: ("DW_OP_over", ()),
    0x15: ("DW_OP_pick", ("1u",)), 0x16: ("DW_OP_swap", ()), 0x17: ("DW_OP_rot", ()), 0x18: ("DW_OP_xderef", ()),
    0x19: ("DW_OP_abs", ()), 0x1A: ("DW_OP_and", ()), 0x1B: ("DW_OP_div", ()), 0x1C: ("DW_OP_minus", ()),
    0x1D: ("DW_OP_mod", ()), 0x1E: ("DW_OP_mul", ()), 0x1F: ("DW_OP_neg", ()), 0x20: ("DW_OP_not", ()),
    0x21: ("DW_OP_or", ()), 0x22: ("DW_OP_plus", ()), 0x23: ("DW_OP_plus_uconst", ("u",)), 0x24: ("DW_OP_shl", ()),
    0x25: ("DW_OP_shr", ()), 0x26: ("DW_OP_shra", ()), 0x27: ("DW_OP_xor", ()), 0x28: ("DW_OP_bra", ("2s",)),
    0x29: ("DW_OP_eq", ()), 0x2A: ("DW_OP_ge", ()), 0x2B: ("DW_OP_gt", ()), 0x2C: ("DW_OP_le", ()),
    0x2D: ("DW_OP_lt", ()), 0x2E: ("DW_OP_ne", ()), 0x2F: ("DW_OP_skip", ("2s",)),
    0x90: ("DW_OP_regx", ("u",)), 0x91: ("DW_OP_fbreg", ("s",)), 0x92: ("DW_OP_bregx", ("u", "s")),
    0x93: ("DW_OP_piece", ("u",)), 0x94: ("DW_OP_deref_size", ("1u",)), 0x95: ("DW_OP_xderef_size", ("1u",)),
    0x96: ("DW_OP_nop", ()), 0x97: ("DW_OP_push_object_address", ()), 0x98: ("DW_OP_call2", ("2u",)),
    0x99: ("DW_OP_call4", ("4u",)), 0x9A: ("DW_OP_call_ref", ("r",)), 0x9B: ("DW_OP_form_tls_address", ()),
    0x9C: ("DW_OP_call_frame_cfa", ()), 0x9D: ("DW_OP_bit_piece", ("u", "u")), 0x9E: ("DW_OP_implicit_value", ("b",)),
    0x9F: ("DW_OP_stack_value", ()), 0xA0: ("DW_OP_implicit_pointer", ("r", "s")), 0xA1: ("DW_OP_addrx", ("u",)),
    0xA2: ("DW_OP_constx", ("u",)), 0xA3: ("DW_OP_entry_value", ("e",)), 0xA4: ("DW_OP_const_type", ("u", "t")),
    0xA5: ("DW_OP_regval_type", ("u", "u")), 0xA6: ("DW_OP_deref_type", ("1u", "u")),
    0xA7: ("DW_OP_xderef_type", ("1u", "u")), 0xA8: ("DW_OP_convert", ("u",)), 0xA9: ("DW_OP_reinterpret", ("u",)),
    0xE0: ("DW_OP_GNU_push_tls_address", ()), 0xF0: ("DW_OP_GNU_uninit", ()),
    0xF2: ("DW_OP_GNU_implicit_pointer", ("r", "s")), 0xF3: ("DW_OP_GNU_entry_value", ("e",)),
    0xF4: ("DW_OP_GNU_const_type", ("u", "t")), 0xF5: ("DW_OP_GNU_regval_type", ("u", "u")),
    0xF6: ("DW_OP_GNU_deref_type", ("1u", "u")), 0xF7: ("DW_OP_GNU_convert", ("u",)),
    0xF9: ("DW_OP_GNU_reinterpret", ("u",)), 0xFA: ("DW_OP_GNU_parameter_ref", ("4u",)),
    0xFB: ("DW_OP_GNU_addr_index", ("u",)), 0xFC: ("DW_OP_GNU_const_index", ("u",)),
    0xFD: ("DW_OP_GNU_variable_value", ("r",)),
}
for _n in range(32):
    OPS[0x30 + _n] = (f"DW_OP_lit{_n}", ())
    OPS[0x50 + _n] = (f"DW_OP_reg{_n}", ())
    OPS[0x70 + _n] = (f"DW_OP_breg{_n}", ("s",))

DW_OP_lit0, DW_OP_reg0, DW_OP_breg0 = 0x30, 0x50, 0x70
MAX_OPS = 4096

_FIXED = {"1u": ("<B", 1), "1s": ("<b", 1), "2u": ("<H", 2), "2s": ("<h", 2), "4u": ("<I", 4), "4s": ("<i", 4),
          "8u": ("<Q", 8), "8s": ("<q", 8)}


class Op(NamedTuple):
    """One operation of an expression."""

    code: int
    name: str
    args: Tuple[object, ...]  # ints; bytes for a block; a tuple of Ops for entry_value's expression
    offset: int  # where it starts in the expression (DW_OP_bra and DW_OP_skip count from here)


def decode(expr: bytes, addr_size: int = 8, offset_size: int = 4) -> List[Op]:
    """The operations of ``expr``; a DwarfError for bytes that are not an expression."""
    out: List[Op] = []
    pos = 0
    n = len(expr)
    try:
        while pos < n:
            if len(out) >= MAX_OPS:
                raise DwarfError(f"a DWARF expression longer than {MAX_OPS} operations")
            start = pos
            code = expr[pos]
            pos += 1
            known = OPS.get(code)
            if known is None:
                raise DwarfError(f"a DWARF expression has the unknown operation {code:#x} at byte {start}")
            name, kinds = known
            args: List[object] = []
            for kind in kinds:
                if kind == "u":
                    v, pos = uleb(expr, pos)
                elif kind == "s":
                    v, pos = sleb(expr, pos)
                elif kind == "a":
                    v = int.from_bytes(expr[pos:pos + addr_size], "little")
                    if pos + addr_size > n:
                        raise IndexError
                    pos += addr_size
                elif kind == "r":
                    v = int.from_bytes(expr[pos:pos + offset_size], "little")
                    if pos + offset_size > n:
                        raise IndexError
                    pos += offset_size
                elif kind == "b":
                    length, pos = uleb(expr, pos)
                    if pos + length > n:
                        raise IndexError
                    v, pos = expr[pos:pos + length], pos + length
                elif kind == "t":
                    size = expr[pos]
                    pos += 1
                    if pos + size > n:
                        raise IndexError
                    v, pos = expr[pos:pos + size], pos + size
                elif kind == "e":
                    length, pos = uleb(expr, pos)
                    if pos + length > n:
                        raise IndexError
                    v = tuple(decode(expr[pos:pos + length], addr_size, offset_size))
                    pos += length
                else:
                    fmt, size = _FIXED[kind]
                    v = struct.unpack_from(fmt, expr, pos)[0]
                    pos += size
                args.append(v)
            out.append(Op(code, name, tuple(args), start))
    except (IndexError, struct.error):
        raise DwarfError("a DWARF expression ends inside an operation") from None
    return out


def text(ops: List[Op]) -> str:
    """The operations as llvm-dwarfdump and readelf spell them: ``DW_OP_breg6 -48, DW_OP_deref``."""
    parts = []
    for op in ops:
        if op.code in (0xA3, 0xF3):
            parts.append(f"{op.name}({text(list(op.args[0]))})")  # type: ignore[arg-type]
            continue
        args = " ".join(a.hex() if isinstance(a, bytes) else hex(a) if op.code == 0x03 else str(a)
                        for a in op.args)
        parts.append(f"{op.name} {args}".rstrip())
    return ", ".join(parts)
