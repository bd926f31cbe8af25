"""Where a variable's value is at one address, as one record: the single owner of what a DWARF location means.

A DWARF location expression (``DW_AT_location``, one entry of a location
list, ``DW_AT_frame_base``) is evaluated symbolically here into a
``Location``: in memory at an address computed from registers and
constants, in a register, a computed value (``DW_OP_stack_value``), literal
bytes (``DW_OP_implicit_value``), several pieces (``DW_OP_piece``), or not
available, with the reason (optimized out, ``DW_OP_entry_value``, an
operation kinstkit does not translate -- named).  ``DW_OP_fbreg`` goes
through the function's frame base, and ``DW_OP_call_frame_cfa`` through the
CFA rule the image's CFI gives at the address.

Everything else only prints the record: ``value`` turns a location and a
type's size into one 64-bit value computation (a tree of ``Reg``,
``Const``, ``Load`` and arithmetic); ``d_text`` spells it in D over kinst's
``regs[]`` for dtrace(1); ``program`` spells the same tree in postfix for
the user-space harness's evaluator (``generator/run/harness_c/vars/
kh_vars.c``), which runs it in its trap handler so that the tests can hold
its values to gdb's.  Neither printer decides anything about DWARF.
"""

from __future__ import annotations

from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

from ..image.dwarf.expr import DW_OP_breg0, DW_OP_lit0, DW_OP_reg0, Op

MASK = (1 << 64) - 1


# -- value computations ------------------------------------------------------------


class Reg(NamedTuple):
    """The value of a register (a DWARF register number) when the probe fires."""

    number: int


class Const(NamedTuple):
    value: int  # 0 .. 2**64 - 1


class Load(NamedTuple):
    """``size`` bytes of memory at ``address``, zero-extended."""

    address: "Node"
    size: int


class Bin(NamedTuple):
    op: str  # one of BINARY
    a: "Node"
    b: "Node"


class Un(NamedTuple):
    op: str  # "-" or "~"
    a: "Node"


class Ext(NamedTuple):
    """``a`` cut to its low ``bits`` and extended back to 64 bits, with its sign when ``signed`` (the typed
    operations of DWARF 5: DW_OP_convert, DW_OP_regval_type, DW_OP_deref_type to an integer base type)."""

    a: "Node"
    bits: int
    signed: bool


Node = Union[Reg, Const, Load, Bin, Un, Ext]
# DWARF's binary operations kinstkit translates, by the symbol the D and the harness spell them with
# (">>" is DW_OP_shr, logical; ">>a" is DW_OP_shra, arithmetic).
BINARY = {"DW_OP_plus": "+", "DW_OP_minus": "-", "DW_OP_mul": "*", "DW_OP_and": "&", "DW_OP_or": "|",
          "DW_OP_xor": "^", "DW_OP_shl": "<<", "DW_OP_shr": ">>", "DW_OP_shra": ">>a", "DW_OP_div": "/s",
          "DW_OP_mod": "%"}
# ("/s" is DW_OP_div, signed on DWARF's generic type, as gdb computes it; "%" is DW_OP_mod, unsigned.)


def add(a: Node, k: int) -> Node:
    """``a + k``, folding constants so that ``regs[R_RBP] - 48`` stays that."""
    k &= MASK
    if k == 0:
        return a
    if isinstance(a, Const):
        return Const((a.value + k) & MASK)
    if isinstance(a, Bin) and a.op == "+" and isinstance(a.b, Const):
        total = (a.b.value + k) & MASK
        return a.a if total == 0 else Bin("+", a.a, Const(total))
    return Bin("+", a, Const(k))


# -- locations -------------------------------------------------------------------------


class Memory(NamedTuple):
    """The object is in memory at ``address``."""

    address: Node


class Register(NamedTuple):
    """The object is in a register."""

    number: int


class Value(NamedTuple):
    """The object has no location; its value is computed (``DW_OP_stack_value``)."""

    value: Node


class Bytes(NamedTuple):
    """The object's value is these bytes (``DW_OP_implicit_value``, ``DW_AT_const_value``)."""

    data: bytes


class Pieces(NamedTuple):
    """The object is split (``DW_OP_piece``): (size in bytes, its location, None when that piece is gone)."""

    parts: Tuple[Tuple[int, Optional["Location"]], ...]


class Unavailable(NamedTuple):
    """No value at this address, and why."""

    reason: str


Location = Union[Memory, Register, Value, Bytes, Pieces, Unavailable]

OPTIMIZED_OUT = "optimized out: no location here"
ENTRY_VALUE = ("needs DW_OP_entry_value: the value is the one a register had when the function was entered, "
               "which no register or memory holds at this address")


class _Gone(Exception):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


BaseType = Callable[[int], Tuple[int, bool, bool]]  # unit offset -> (bytes, signed, integer)


def evaluate(ops: Sequence[Op], frame_base: Callable[[], Node], cfa: Callable[[], Node],
             address_of: Callable[[int], int], addr_size: int = 8,
             base_type: Optional[BaseType] = None) -> Location:
    """The location ``ops`` describe.  ``frame_base`` and ``cfa`` give the function's frame base and the CFA at
    the address (raising ``unavailable(reason)`` when there is none); ``address_of`` reads ``.debug_addr``;
    ``base_type`` reads the base type a typed operation names (its unit offset)."""
    if not ops:
        return Unavailable(OPTIMIZED_OUT)
    try:
        return _evaluate(ops, frame_base, cfa, address_of, addr_size, base_type)
    except _Gone as e:
        return Unavailable(e.reason)


def unavailable(reason: str) -> _Gone:
    """What ``frame_base`` and ``cfa`` raise when they have no value."""
    return _Gone(reason)


def _typed(base_type: Optional[BaseType], offset: int, name: str) -> Tuple[int, bool]:
    """(bits, signed) of the integer base type a typed operation names; 0 bits: the generic type."""
    if offset == 0:
        return 0, False
    if base_type is None:
        raise _Gone(f"{name} names a base type this reader was not given")
    size, signed, integer = base_type(offset)
    if not integer or not 1 <= size <= 8:
        raise _Gone(f"{name} to a {size}-byte non-integer type: kinstkit computes integers only")
    return 8 * size, signed


def _ext(a: Node, bits: int, signed: bool) -> Node:
    return a if bits in (0, 64) and not signed else Ext(a, bits or 64, signed)


def _evaluate(ops, frame_base, cfa, address_of, addr_size, base_type) -> Location:
    stack: List[Node] = []
    parts: List[Tuple[int, Optional[Location]]] = []
    current: Optional[Location] = None  # a register, stack value or implicit value ended this piece

    def pop() -> Node:
        if not stack:
            raise _Gone("the DWARF expression pops an empty stack (corrupt)")
        return stack.pop()

    def close() -> Optional[Location]:
        if current is not None:
            return current
        if stack:
            return Memory(stack[-1])
        return None

    for op in ops:
        code, name, args = op.code, op.name, op.args
        if current is not None and name not in ("DW_OP_piece", "DW_OP_nop"):
            raise _Gone(f"{name} after a register or a value ends a location (corrupt)")
        if DW_OP_lit0 <= code < DW_OP_lit0 + 32:
            stack.append(Const(code - DW_OP_lit0))
        elif DW_OP_reg0 <= code < DW_OP_reg0 + 32:
            current = Register(code - DW_OP_reg0)
        elif DW_OP_breg0 <= code < DW_OP_breg0 + 32:
            stack.append(add(Reg(code - DW_OP_breg0), args[0]))  # type: ignore[arg-type]
        elif name == "DW_OP_regx":
            current = Register(args[0])  # type: ignore[arg-type]
        elif name == "DW_OP_bregx":
            stack.append(add(Reg(args[0]), args[1]))  # type: ignore[arg-type]
        elif name == "DW_OP_fbreg":
            stack.append(add(frame_base(), args[0]))  # type: ignore[arg-type]
        elif name == "DW_OP_call_frame_cfa":
            stack.append(cfa())
        elif name == "DW_OP_addr":
            stack.append(Const(args[0]))  # type: ignore[arg-type]
        elif name in ("DW_OP_addrx", "DW_OP_constx", "DW_OP_GNU_addr_index", "DW_OP_GNU_const_index"):
            stack.append(Const(address_of(args[0])))  # type: ignore[arg-type]
        elif name.startswith("DW_OP_const") and name[11:12] in ("1", "2", "4", "8", "u", "s"):
            stack.append(Const(args[0] & MASK))  # type: ignore[operator]
        elif name == "DW_OP_deref":
            stack.append(Load(pop(), addr_size))
        elif name == "DW_OP_deref_size":
            size = args[0]
            if not 1 <= size <= 8:  # type: ignore[operator]
                raise _Gone(f"DW_OP_deref_size {size} (corrupt)")
            stack.append(Load(pop(), size))  # type: ignore[arg-type]
        elif name == "DW_OP_dup":
            top = pop()
            stack += [top, top]
        elif name == "DW_OP_drop":
            pop()
        elif name == "DW_OP_over":
            if len(stack) < 2:
                raise _Gone("DW_OP_over on a stack of fewer than two (corrupt)")
            stack.append(stack[-2])
        elif name == "DW_OP_pick":
            i = args[0]
            if i >= len(stack):  # type: ignore[operator]
                raise _Gone(f"DW_OP_pick {i} past the stack (corrupt)")
            stack.append(stack[-1 - i])  # type: ignore[operator]
        elif name == "DW_OP_swap":
            b, a = pop(), pop()
            stack += [b, a]
        elif name == "DW_OP_rot":
            c, b, a = pop(), pop(), pop()
            stack += [c, a, b]
        elif name in BINARY:
            b, a = pop(), pop()
            if BINARY[name] == "+" and isinstance(b, Const):
                stack.append(add(a, b.value))
            elif BINARY[name] == "-" and isinstance(b, Const):
                stack.append(add(a, -b.value))
            else:
                stack.append(Bin(BINARY[name], a, b))
        elif name == "DW_OP_plus_uconst":
            stack.append(add(pop(), args[0]))  # type: ignore[arg-type]
        elif name == "DW_OP_neg":
            stack.append(Un("-", pop()))
        elif name == "DW_OP_not":
            stack.append(Un("~", pop()))
        elif name in ("DW_OP_convert", "DW_OP_GNU_convert", "DW_OP_reinterpret", "DW_OP_GNU_reinterpret"):
            bits, signed = _typed(base_type, args[0], name)  # type: ignore[arg-type]
            stack.append(_ext(pop(), bits, signed) if bits else pop())
        elif name in ("DW_OP_regval_type", "DW_OP_GNU_regval_type"):
            bits, signed = _typed(base_type, args[1], name)  # type: ignore[arg-type]
            stack.append(_ext(Reg(args[0]), bits, signed))  # type: ignore[arg-type]
        elif name in ("DW_OP_deref_type", "DW_OP_GNU_deref_type"):
            bits, signed = _typed(base_type, args[1], name)  # type: ignore[arg-type]
            stack.append(_ext(Load(pop(), args[0]), bits, signed))  # type: ignore[arg-type]
        elif name in ("DW_OP_const_type", "DW_OP_GNU_const_type"):
            bits, signed = _typed(base_type, args[0], name)  # type: ignore[arg-type]
            data = args[1]
            if not isinstance(data, bytes) or not 1 <= len(data) <= 8:
                raise _Gone(f"{name} with a constant of {len(data)} bytes (corrupt)")  # type: ignore[arg-type]
            stack.append(_ext(Const(int.from_bytes(data, "little")), bits or 8 * len(data), signed))
        elif name == "DW_OP_stack_value":
            current = Value(pop())
        elif name == "DW_OP_implicit_value":
            current = Bytes(args[0])  # type: ignore[arg-type]
        elif name == "DW_OP_piece":
            parts.append((args[0], close()))  # type: ignore[arg-type]
            stack, current = [], None
        elif name == "DW_OP_nop":
            pass
        elif name in ("DW_OP_entry_value", "DW_OP_GNU_entry_value"):
            raise _Gone(ENTRY_VALUE)
        elif name in ("DW_OP_implicit_pointer", "DW_OP_GNU_implicit_pointer"):
            raise _Gone(f"{name}: the pointer itself was optimized away (it would point to another variable's "
                        "value, which has no address)")
        else:
            raise _Gone(f"{name} is a DWARF operation kinstkit does not translate")
    if parts:
        if stack or current is not None:
            parts.append((0, close()))
        return Pieces(tuple((s, loc) for s, loc in parts if s))
    loc = close()
    return loc if loc is not None else Unavailable(OPTIMIZED_OUT)


# -- one value of a type's size -------------------------------------------------------------


def value(loc: Location, size: int) -> Union[Node, Unavailable]:
    """The computation of a scalar of ``size`` bytes (1 to 8) at ``loc``, zero-extended to 64 bits except where
    it is a register or a computed value (the type's cast truncates those)."""
    if isinstance(loc, Unavailable):
        return loc
    if not 1 <= size <= 8:
        return Unavailable(f"a {size}-byte value: only values of 1 to 8 bytes are computed")
    if isinstance(loc, Memory):
        return Load(loc.address, size)
    if isinstance(loc, Register):
        return Reg(loc.number)
    if isinstance(loc, Value):
        return loc.value
    if isinstance(loc, Bytes):
        if len(loc.data) < size:
            return Unavailable(f"DW_OP_implicit_value gives {len(loc.data)} bytes of a {size}-byte value")
        return Const(int.from_bytes(loc.data[:size], "little"))
    return _pieces(loc, size)


def _pieces(loc: Pieces, size: int) -> Union[Node, Unavailable]:
    total = sum(s for s, _ in loc.parts)
    if total < size:
        return Unavailable(f"split into pieces of {total} bytes in all, short of the {size}-byte value")
    out: Optional[Node] = None
    shift = 0
    for psize, part in loc.parts:
        if shift >= size * 8:
            break
        if part is None:
            return Unavailable("split into pieces (DW_OP_piece), and the piece at byte "
                               f"{shift // 8} is optimized out")
        if psize > 8:
            return Unavailable(f"a piece of {psize} bytes: only pieces of 1 to 8 bytes are computed")
        v = value(part, psize)
        if isinstance(v, Unavailable):
            return Unavailable(f"the piece at byte {shift // 8}: {v.reason}")
        if psize < 8:
            v = Bin("&", v, Const((1 << (8 * psize)) - 1))
        if shift:
            v = Bin("<<", v, Const(shift))
        out = v if out is None else Bin("|", out, v)
        shift += 8 * psize
    assert out is not None
    return out


def registers(node: Node) -> List[int]:
    """The registers a computation reads."""
    if isinstance(node, Reg):
        return [node.number]
    if isinstance(node, Load):
        return registers(node.address)
    if isinstance(node, Bin):
        return registers(node.a) + registers(node.b)
    if isinstance(node, (Un, Ext)):
        return registers(node.a)
    return []


# -- printers ----------------------------------------------------------------------------


def d_text(node: Node, names: Dict[int, str]) -> str:
    """``node`` in D over kinst's ``regs[]`` (``names``: DWARF register -> dtrace(1)'s ``R_*``), 64-bit
    unsigned arithmetic as D does it on ``regs[]``."""
    if isinstance(node, Reg):
        return f"regs[{names[node.number]}]"
    if isinstance(node, Const):
        v = node.value
        return str(v) if v < 10 else hex(v)
    if isinstance(node, Load):
        return f"*(uint{8 * node.size}_t *)({d_text(node.address, names)})"
    if isinstance(node, Bin):
        if node.op == "+" and isinstance(node.b, Const) and node.b.value >= 1 << 63:
            return f"{d_text(node.a, names)} - {(-node.b.value) & MASK}"
        if node.op == "+" and isinstance(node.b, Const):
            return f"{d_text(node.a, names)} + {d_text(node.b, names)}"
        if node.op == ">>a":
            return f"((int64_t)({d_text(node.a, names)}) >> {_d_operand(node.b, names)})"
        if node.op == "/s":
            return f"(uint64_t)((int64_t)({d_text(node.a, names)}) / (int64_t)({d_text(node.b, names)}))"
        return f"({_d_operand(node.a, names)} {node.op} {_d_operand(node.b, names)})"
    if isinstance(node, Ext):
        kind = f"{'' if node.signed else 'u'}int{node.bits}_t"
        return f"(uint64_t)({kind})({d_text(node.a, names)})"
    return f"({node.op}{_d_operand(node.a, names)})"


def _d_operand(node: Node, names: Dict[int, str]) -> str:
    text = d_text(node, names)
    return f"({text})" if isinstance(node, Bin) and node.op == "+" and not text.startswith("(") else text


def d_value(node: Node, size: int, signed: bool, names: Dict[int, str]) -> str:
    """A scalar of ``size`` bytes computed by ``node``, cast to its width and signedness, in D."""
    kind = f"{'' if signed else 'u'}int{8 * size}_t"
    if isinstance(node, Load) and node.size == size:
        return f"*({kind} *)({d_text(node.address, names)})"
    return f"({kind})({d_text(node, names)})"


# The harness evaluator's operations (generator/run/harness_c/vars/kh_vars.c mirrors these numbers).
PROGRAM_OPS = {"reg": 1, "const": 2, "load": 3, "+": 4, "-": 5, "*": 6, "&": 7, "|": 8, "^": 9, "<<": 10, ">>": 11,
               ">>a": 12, "neg": 13, "not": 14, "ext": 15, "/s": 16, "%": 17}


def program(node: Node) -> List[Tuple[int, int]]:
    """``node`` in postfix: (operation, operand) pairs for the harness's stack evaluator."""
    out: List[Tuple[int, int]] = []

    def emit(n: Node) -> None:
        if isinstance(n, Reg):
            out.append((PROGRAM_OPS["reg"], n.number))
        elif isinstance(n, Const):
            out.append((PROGRAM_OPS["const"], n.value))
        elif isinstance(n, Load):
            emit(n.address)
            out.append((PROGRAM_OPS["load"], n.size))
        elif isinstance(n, Bin):
            emit(n.a)
            emit(n.b)
            out.append((PROGRAM_OPS[n.op], 0))
        elif isinstance(n, Ext):  # operand: the width in bits, and 256 when signed
            emit(n.a)
            out.append((PROGRAM_OPS["ext"], n.bits | (256 if n.signed else 0)))
        else:
            emit(n.a)
            out.append((PROGRAM_OPS["neg" if n.op == "-" else "not"], 0))

    emit(node)
    return out


def typed(raw: int, size: int, signed: bool) -> int:
    """A 64-bit result as the type reads it: cut to ``size`` bytes and, when ``signed``, sign-extended -- what
    the D cast does."""
    raw &= (1 << (8 * size)) - 1
    if signed and raw >> (8 * size - 1):
        raw -= 1 << (8 * size)
    return raw


def describe(loc: Location, names: Dict[int, str]) -> str:
    """A location in words, for listings: ``register rdi``, ``memory at regs[R_RBP] - 48``."""
    if isinstance(loc, Register):
        return f"register {names.get(loc.number, f'DWARF {loc.number}')}"
    if isinstance(loc, Memory):
        try:
            return f"memory at {d_text(loc.address, names)}"
        except KeyError:
            return "memory"
    if isinstance(loc, Value):
        return "computed value"
    if isinstance(loc, Bytes):
        return f"constant {loc.data.hex()}"
    if isinstance(loc, Pieces):
        return f"{len(loc.parts)} pieces"
    return loc.reason
