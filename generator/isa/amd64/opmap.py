"""amd64 opcode map for the analysis's table walk, derived from capstone.

The host walk (``accel/kk_walk.c``) finds where an instruction ends with a
table lookup instead of a decoder call where it can.  Its table is this
module's output, ``accel/kk_opmap.inc``, made the way Linux makes its
instruction attributes from ``x86-opcode-map.txt``: data in, a small C
table out, through a template (``templates/accel/kk_opmap.inc.j2``).  The
data is capstone itself, the decoder of record: every encoding class is
decoded by capstone, and kept only if one attribute predicts, for every
probe of the class, both capstone's length and the refusal its mnemonic
carries (the host library's own ``kk_amd64_named()``, over ``tables.py``'s
names).  What kinst does with the instruction is the portable core's
``kinst_core_dissect()``'s, from the bytes; where the core's verdict (kind
and refusal) is the same for every probe of a class, the table keeps it,
so that a summary or a table need not run the core on every instruction
(its metadata comes from the core all the same).  The probes carry the
prefixes the class is keyed on, each once; the walk takes the kept verdict
only for an instruction whose prefixes are just those (``kk_walk.c``), and
asks the core about any other: a segment prefix, or a dozen prefixes, can
change it (a call through %gs memory, a short jump too long to widen).
Where capstone's length is wrong (ud0, ud1: ``tables.LENGTH_FIXES``), the
length the table predicts is ``decode.py``'s correction of it, the one the
reference walk uses.  Classes where no attribute predicts the length
(VEX-like escapes, odd mod/rm rules, invalid encodings, mnemonics whose
region Python decides) are left unknown, and capstone decodes each such
instruction.

A class is (opcode map, opcode, 66/F2/F3 prefixes, REX, LOCK) and, inside
it, a cell per ModR/M reg and form: memory, %rip-relative memory, or
register with each r/m (``0f 01 d0`` is xgetbv, ``0f 01 f8`` swapgs).

Run ``python3 -m generator.isa.amd64.opmap`` to rewrite the header (about
a minute); the tests hold the committed header equal to a fresh one.
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from . import tables as T
from .decode import _fixed_length, _modrm_end
from .walk import ACCEL_DIR

HEADER = ACCEL_DIR / "kk_opmap.inc"
TEMPLATE = "kk_opmap.inc.j2"

IMM_SIZES = (0, 1, 2, 3, 4, 8)
IMM_MASK, HAS_MODRM, KNOWN, VERDICT = 0x07, 0x08, 0x10, 0x20
KIND_SHIFT, REASON_SHIFT = 6, 10
KIND_MASK = 0xF << KIND_SHIFT
UNKNOWN = 0

MAPS = ((), (0x0F,), (0x0F, 0x38), (0x0F, 0x3A))
PFX = ((), (0x66,), (0xF3,), (0xF2,), (0x66, 0xF3), (0x66, 0xF2))  # prefix classes, as kk_walk.c picks them
REX = ((None,), (0x40, 0x47), (0x48, 0x4F))  # none, REX.W=0, REX.W=1: each probed with RXB clear and set
NKEYS = len(MAPS) * 256 * len(PFX) * len(REX) * 2
CELLS = 8 * 10

# Bytes the C walk consumes before the opcode, or leaves to capstone; they are never opcodes.
_NOT_OPCODES = {0: frozenset([0x26, 0x2E, 0x36, 0x3E, 0x64, 0x65, 0x66, 0x67, 0xF0, 0xF2, 0xF3, 0x0F,
                              0xC4, 0xC5, 0x62, *range(0x40, 0x50)]),
                1: frozenset([0x0F, 0x38, 0x3A])}

# ModR/M bytes probed per cell: memory forms with a base and a SIB (and each displacement size), the
# %rip-relative form, and every register form.
_MEM_RM = tuple((mod << 6) | rm for mod in (0, 1, 2) for rm in (0, 4, 5) if (mod, rm) != (0, 5))
_RIP_RM = (0x05,)
_REG_RM = tuple(0xC0 | rm for rm in range(8))
FORMS = (_MEM_RM, _RIP_RM, *((rm,) for rm in _REG_RM))  # a cell's ModR/M bytes, in kk_walk.c's order
_TAIL = bytes(14)
_FIXED = frozenset(T.LENGTH_FIXES.values())


def key(m: int, op: int, pfx: int, rex: int, lock: int) -> int:
    """The class index, as ``kk_walk.c`` computes it."""
    return (((m * 256 + op) * len(PFX) + pfx) * len(REX) + rex) * 2 + lock


def _modrm_len(modrm: int) -> int:
    """ModR/M, SIB and displacement bytes, with a zero SIB byte (no base-less disp32), as the probes have it."""
    return _modrm_end(bytes([modrm]) + bytes(6), 0)


class _Prober:
    """capstone's length and mnemonic refusal of one probe, the refusal asked of the host library once per text."""

    def __init__(self) -> None:
        import capstone

        from . import ISA
        from ..hostcore import host

        self.cs = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
        self.cs.syntax = capstone.CS_OPT_SYNTAX_ATT
        lib = host(ISA.name).lib
        self.named = lib.kk_amd64_named
        self.named.argtypes = (ctypes.c_char_p, ctypes.c_char_p)
        self.named.restype = ctypes.c_uint
        self.verdict_of = lib.kk_amd64_verdict
        self.verdict_of.argtypes = (ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_void_p,
                                    ctypes.c_void_p)
        self.verdict_of.restype = ctypes.c_int
        self.seen: Dict[Tuple[str, str], int] = {}
        self.kind, self.reason = ctypes.c_uint(), ctypes.c_uint()

    def _named(self, code: bytes) -> Tuple[int, Optional[int]]:
        for _, size, mnem, ops in self.cs.disasm_lite(code, 0, 1):
            if ops.endswith("%gs") or mnem.startswith("lgs"):
                return 0, None  # Python decides these functions (classify.context_refusals)
            if mnem in _FIXED:
                size = _fixed_length(code, 0, size)  # decode.py's length, not capstone's
            got = self.seen.get((mnem, ops))
            if got is None:
                got = self.seen[(mnem, ops)] = self.named(mnem.encode(), ops.encode())
            return size, got
        return 0, None

    def _verdict(self, code: bytes, named: int) -> Optional[Tuple[int, int]]:
        if self.verdict_of(code, len(code), named, ctypes.byref(self.kind), ctypes.byref(self.reason)) != 0:
            return None
        return self.kind.value, self.reason.value

    def probe(self, head: bytes, tail: bytes) -> Tuple[int, Optional[int], Optional[Tuple[int, int]]]:
        """(capstone's length, the reason code by mnemonic, the core's verdict (kind, reason)) of ``head +
        tail``; (0, None, None) where the table must not decide."""
        size, named = self._named(head + tail)
        if named is None:
            return 0, None, None
        return size, named, self._verdict((head + tail)[:size], named)


def _cell(probes: Sequence[Tuple[int, int, int, Optional[int], Optional[Tuple[int, int]]]]) -> int:
    """One attribute that predicts every (modrm, bytes before ModR/M, length, reason code, verdict), or UNKNOWN."""
    modrm0, pre0, len0, r0, v0 = probes[0]
    if r0 is None or any(r != r0 or ln == 0 for _, _, ln, r, _ in probes):
        return UNKNOWN
    for has_modrm in (True, False):
        imm = len0 - pre0 - (_modrm_len(modrm0) if has_modrm else 0)
        if imm in IMM_SIZES and all(ln == pre + (_modrm_len(m) if has_modrm else 0) + imm
                                    for m, pre, ln, _, _ in probes):
            attr = KNOWN | IMM_SIZES.index(imm) | (HAS_MODRM if has_modrm else 0)
            if v0 is not None and all(v == v0 for _, _, _, _, v in probes):
                return attr | VERDICT | v0[0] << KIND_SHIFT | v0[1] << REASON_SHIFT
            return attr | r0 << REASON_SHIFT
    return UNKNOWN


def _orders(lock: int, pfx: Sequence[int]) -> List[List[int]]:
    """The legacy prefixes of a class in the orders probed: LOCK first and, with others, LOCK last."""
    if not lock:
        return [list(pfx)]
    return [[0xF0, *pfx], [*pfx, 0xF0]] if pfx else [[0xF0]]


def _class_cells(prober: _Prober, m: int, op: int, pfx: int, rex: int, lock: int) -> List[int]:
    """The cells of one class: per reg, the memory forms, the %rip-relative one, then the register form for each
    r/m."""
    cells = []
    for reg in range(8):
        for forms in FORMS:
            probes = []
            for rm in forms:
                modrm = rm | reg << 3
                for rex_byte in REX[rex]:
                    rest = ([rex_byte] if rex_byte is not None else []) + list(MAPS[m]) + [op]
                    # The walk keys on which prefixes there are, capstone decodes them in order: both.
                    for legacy in _orders(lock, PFX[pfx]):
                        head = bytes(legacy + rest)
                        length, reason, verdict = prober.probe(head, bytes([modrm]) + _TAIL)
                        probes.append((modrm, len(head), length, reason, verdict))
            cells.append(_cell(probes))
    return cells


def build() -> Tuple[List[int], List[Tuple[int, ...]]]:
    """(a 16-bit entry per class, the rows of cells of classes whose cells differ).

    Reason codes and kinds must fit their bits (``walk.REASONS``, ``Isa.table_kinds``).

    An entry without the row bit is the attribute of all its cells;
    otherwise its low bits index the rows.  Equal rows are stored once.
    """
    from . import ISA
    from .walk import REASONS

    # Bit 15 of a class entry marks a row of cells: an attribute must leave it clear.
    assert len(REASONS) < 1 << (15 - REASON_SHIFT) and len(ISA.table_kinds) <= KIND_MASK >> KIND_SHIFT
    prober = _Prober()
    top = [UNKNOWN] * NKEYS
    rows: List[Tuple[int, ...]] = []
    row_index: Dict[Tuple[int, ...], int] = {}
    for m in range(len(MAPS)):
        for op in range(256):
            if op in _NOT_OPCODES.get(m, ()):
                continue
            for pfx in range(len(PFX)):
                for rex in range(len(REX)):
                    for lock in (0, 1):
                        cells = _class_cells(prober, m, op, pfx, rex, lock)
                        k = key(m, op, pfx, rex, lock)
                        if len(set(cells)) == 1:
                            top[k] = cells[0]
                            continue
                        row = tuple(cells)
                        if row not in row_index:
                            row_index[row] = len(rows)
                            rows.append(row)
                        top[k] = 0x8000 | row_index[row]
    return top, rows


def context(top: Sequence[int], rows: Sequence[Sequence[int]]) -> Dict[str, object]:
    """The template's variables: the tables as lines of C, every value pre-formatted."""
    import capstone

    def lines(values: Sequence[int], per: int) -> List[str]:
        return [", ".join(f"0x{v:04x}" for v in values[i : i + per]) + "," for i in range(0, len(values), per)]

    return {
        "capstone": capstone.__version__,
        "npfx": len(PFX), "nrex": len(REX), "ncells": CELLS,
        "imm_mask": IMM_MASK, "has_modrm": HAS_MODRM, "known": KNOWN, "verdict": VERDICT,
        "kind_mask": KIND_MASK, "kind_shift": KIND_SHIFT, "reason_shift": REASON_SHIFT,
        "imm_sizes": ", ".join(str(s) for s in IMM_SIZES),
        "ntop": len(top), "top": lines(top, 8),
        "nrows": max(1, len(rows)), "rows": [lines(r, 8) for r in (rows or [(0,) * CELLS])],
    }


def write(top: Sequence[int], rows: Sequence[Sequence[int]], out_dir: Path = ACCEL_DIR) -> Path:
    from ...render import render_tree

    (path,) = render_tree("accel", out_dir, context(top, rows), [], "python3 -m generator.isa.amd64.opmap",
                          only=(TEMPLATE,))
    return path


def main(argv: Sequence[str] = ()) -> int:
    """Rewrite ``kk_opmap.inc`` from capstone; ``--empty`` writes one that knows nothing (capstone decides all)."""
    if "--empty" in argv:
        path = write([UNKNOWN] * NKEYS, [])
    else:
        path = write(*build())
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
