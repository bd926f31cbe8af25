"""amd64 opcode map for the native summary accelerator, derived from iced-x86.

The C accelerator (``accel/kk_accel.c``) walks a function with a table
lookup per instruction instead of a decoder call.  Its table is this
module's output, ``accel/kk_opmap.h``, made the way Linux makes its
instruction attributes from ``x86-opcode-map.txt``: data in, a small C
table out.  The data here is iced-x86 itself.  Every encoding class is
decoded by iced, judged the way ``fast.summarise`` judges it, and kept only
if one attribute byte predicts, for every probe of the class, both iced's
length and that verdict.  Classes where it cannot (VEX-like escapes, odd
mod/rm rules, invalid encodings) get ``DECLINE``, and the function goes to
the iced path instead.

A class is (opcode map, opcode, 66/F2/F3 prefixes, REX, LOCK) and, inside
it, a cell per ModR/M reg and form: memory, or register with each r/m
(``0f 01 d0`` is xgetbv, ``0f 01 f8`` swapgs).  Attribute byte:
bits 0-3 the action, bits 4-6 the immediate size code, bit 7 "has ModR/M".

Run ``python3 -m generator.isa.amd64.opmap`` to rewrite the header; the
tests hold the committed header equal to a fresh one.
"""

from __future__ import annotations

import os
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from iced_x86 import Decoder, Mnemonic, Register

from . import fast as F
from . import probe_md as M
from .decode import _modrm_end

HEADER = os.path.join(os.path.dirname(__file__), "accel", "kk_opmap.h")

# Actions; 0 is DECLINE so that anything unset declines.
DECLINE, TRAMP, MEMPLAIN, CALLIND, REFUSE = 0, 1, 2, 3, 4
_FIXED_KINDS = (M.KIND_JMP32, M.KIND_JCC32, M.KIND_JMP_WIDEN, M.KIND_JCC_WIDEN, M.KIND_CALL_DIRECT)
FIXED = {kind: 5 + i for i, kind in enumerate(_FIXED_KINDS)}
IMM_SIZES = (0, 1, 2, 3, 4, 8)
HAS_MODRM = 0x80

MAPS = ((), (0x0F,), (0x0F, 0x38), (0x0F, 0x3A))
PFX = ((), (0x66,), (0xF3,), (0xF2,), (0x66, 0xF3), (0x66, 0xF2))  # prefix classes, as kk_accel.c picks them
REX = ((None,), (0x40, 0x47), (0x48, 0x4F))  # none, REX.W=0, REX.W=1: each probed with RXB clear and set
NKEYS = len(MAPS) * 256 * len(PFX) * len(REX) * 2

# Bytes the C walk consumes before the opcode, or declines on; they are never opcodes.
_NOT_OPCODES = {0: frozenset([0x26, 0x2E, 0x36, 0x3E, 0x64, 0x65, 0x66, 0x67, 0xF0, 0xF2, 0xF3, 0x0F,
                              0xC4, 0xC5, 0x62, *range(0x40, 0x50)]),
                1: frozenset([0x0F, 0x38, 0x3A])}

# ModR/M bytes probed per cell: memory forms with a base, a SIB and %rip (and each
# displacement size), and every register form.
_MEM_RM = tuple((mod << 6) | rm for mod in (0, 1, 2) for rm in (0, 4, 5))
_REG_RM = tuple(0xC0 | rm for rm in range(8))
_TAIL = bytes(14)
_KIND_OF_VERDICT = {M.KIND_CALL_REG, M.KIND_CALL_MEM, M.KIND_CALL_RIPREL}


def key(m: int, op: int, pfx: int, rex: int, lock: int) -> int:
    """The class index, as ``kk_accel.c`` computes it."""
    return (((m * 256 + op) * len(PFX) + pfx) * len(REX) + rex) * 2 + lock


def _modrm_len(modrm: int) -> int:
    """ModR/M, SIB and displacement bytes, with a zero SIB byte (no base-less disp32), as the probes have it."""
    return _modrm_end(bytes([modrm]) + bytes(6), 0)


def _verdict(dec: Decoder, probe: bytes) -> Optional[str]:
    """What ``fast.summarise`` makes of the instruction at the start of ``probe``: a kind, "refuse", or None."""
    dec.position = 0
    ins = dec.decode()
    a = F.SUMMARY_ACTIONS[ins.code]
    if a == 0 or a == F.PUSH_R64:
        return M.KIND_TRAMPOLINE
    if a == F.PLAIN_MEM:
        return M.KIND_RIPREL if ins.is_ip_rel_memory_operand else M.KIND_TRAMPOLINE
    if a < F.DETAIL:
        return F.KIND_NAMES[a]
    if a == F.REFUSE:
        return "refuse"
    if a == F.DECLINE:
        return None
    mn = ins.mnemonic
    if mn in F._GS_LOADERS and (mn == Mnemonic.LGS or ins.op0_register == Register.GS):
        return None
    kind = F._kind(probe, 0, ins.len, ins, mn)
    return "refuse" if kind is None else kind


def _predict(action: int, modrm: int) -> Optional[str]:
    if action == TRAMP:
        return M.KIND_TRAMPOLINE
    if action == MEMPLAIN:
        return M.KIND_RIPREL if modrm & 0xC7 == 0x05 else M.KIND_TRAMPOLINE
    if action == CALLIND:
        if modrm >> 6 == 3:
            return M.KIND_CALL_REG
        return M.KIND_CALL_RIPREL if modrm & 0xC7 == 0x05 else M.KIND_CALL_MEM
    if action == REFUSE:
        return "refuse"
    return next(k for k, v in FIXED.items() if v == action)


def _candidates(verdict: str) -> Tuple[int, ...]:
    if verdict in (M.KIND_TRAMPOLINE, M.KIND_RIPREL):
        return (TRAMP, MEMPLAIN)
    if verdict in _KIND_OF_VERDICT:
        return (CALLIND,)
    if verdict == "refuse":
        return (REFUSE,)
    return (FIXED[verdict],) if verdict in FIXED else ()


def _cell(probes: Sequence[Tuple[int, int, int, Optional[str]]]) -> int:
    """One attribute byte that predicts every (modrm, bytes before ModR/M, iced length, verdict), or DECLINE."""
    modrm0, pre0, len0, v0 = probes[0]
    if v0 is None or any(v is None for _, _, _, v in probes):
        return DECLINE
    for has_modrm in (True, False):
        imm = len0 - pre0 - (_modrm_len(modrm0) if has_modrm else 0)
        if imm not in IMM_SIZES:
            continue
        for action in _candidates(v0):
            if all(ln == pre + (_modrm_len(m) if has_modrm else 0) + imm and
                   _predict(action, m if has_modrm else 0xC0) == v for m, pre, ln, v in probes):
                return action | IMM_SIZES.index(imm) << 4 | (HAS_MODRM if has_modrm else 0)
    return DECLINE


CELLS = 8 * 9


def _class_cells(m: int, op: int, pfx: int, rex: int, lock: int) -> List[int]:
    """The cells of one class: per reg, the memory form, then the register form for each r/m."""
    cells = []
    for reg in range(8):
        for forms in (_MEM_RM, *((rm,) for rm in _REG_RM)):
            probes = []
            for rm in forms:
                modrm = rm | reg << 3
                for rex_byte in REX[rex]:
                    head = bytes(([0xF0] if lock else []) + list(PFX[pfx]) +
                                 ([rex_byte] if rex_byte is not None else []) + list(MAPS[m]) + [op])
                    probe = head + bytes([modrm]) + _TAIL
                    dec = Decoder(64, probe)
                    ins = dec.decode()
                    probes.append((modrm, len(head), ins.len, _verdict(dec, probe) if ins.len else None))
            cells.append(_cell(probes))
    return cells


def build() -> Tuple[List[int], List[bytes]]:
    """(a 16-bit entry per class, the rows of cells of classes whose cells differ).

    An entry below 0x8000 is the attribute of all its cells; otherwise its
    low bits index the rows.  Equal rows are stored once.
    """
    top = [DECLINE] * NKEYS
    rows: List[bytes] = []
    row_index: Dict[bytes, int] = {}
    for m in range(len(MAPS)):
        for op in range(256):
            if op in _NOT_OPCODES.get(m, ()):
                continue
            for pfx in range(len(PFX)):
                for rex in range(len(REX)):
                    for lock in (0, 1):
                        cells = _class_cells(m, op, pfx, rex, lock)
                        k = key(m, op, pfx, rex, lock)
                        if len(set(cells)) == 1:
                            top[k] = cells[0]
                            continue
                        row = bytes(cells)
                        if row not in row_index:
                            row_index[row] = len(rows)
                            rows.append(row)
                        top[k] = 0x8000 | row_index[row]
    return top, rows


def render(top: Sequence[int], rows: Sequence[bytes]) -> str:
    """The header text: constants, then the two tables, in style(9)."""
    import iced_x86

    lines = [
        "/*",
        " * Generated by generator/isa/amd64/opmap.py from iced-x86 "
        f"{getattr(iced_x86, '__version__', '?')}; do not edit.",
        " * Regenerate: python3 -m generator.isa.amd64.opmap",
        " */",
        "",
        f"#define\tKK_DECLINE\t{DECLINE}",
        f"#define\tKK_TRAMP\t{TRAMP}",
        f"#define\tKK_MEMPLAIN\t{MEMPLAIN}",
        f"#define\tKK_CALLIND\t{CALLIND}",
        f"#define\tKK_REFUSE\t{REFUSE}",
        f"#define\tKK_FIXED_FIRST\t{min(FIXED.values())}",
        f"#define\tKK_HAS_MODRM\t0x{HAS_MODRM:02x}",
        f"#define\tKK_NPFX\t\t{len(PFX)}",
        f"#define\tKK_NREX\t\t{len(REX)}",
        f"#define\tKK_CELLS\t{CELLS}\t/* per ModR/M reg: memory, then register r/m 0-7 */",
        "",
        "/* Kind codes (fast.KIND_CODES) of what the walk counts. */",
        f"#define\tKK_K_RIPREL\t{F.KIND_CODES[M.KIND_RIPREL]}",
        f"#define\tKK_K_CALL_REG\t{F.KIND_CODES[M.KIND_CALL_REG]}",
        f"#define\tKK_K_CALL_MEM\t{F.KIND_CODES[M.KIND_CALL_MEM]}",
        f"#define\tKK_K_CALL_RIPREL\t{F.KIND_CODES[M.KIND_CALL_RIPREL]}",
        "",
        "/* Kind code of each fixed action, KK_FIXED_FIRST on. */",
        "static const unsigned char kk_fixed_kind[] = {",
        "\t" + ", ".join(str(F.KIND_CODES[k]) for k in _FIXED_KINDS),
        "};",
        "",
        "static const unsigned char kk_imm_size[] = {",
        "\t" + ", ".join(str(s) for s in IMM_SIZES),
        "};",
        "",
        f"static const unsigned short kk_top[{len(top)}] = {{",
    ]
    for i in range(0, len(top), 12):
        lines.append("\t" + ", ".join(f"0x{v:04x}" for v in top[i : i + 12]) + ",")
    lines += ["};", "", f"static const unsigned char kk_rows[{max(1, len(rows))}][KK_CELLS] = {{"]
    for row in rows or [bytes(CELLS)]:
        lines.append("\t{")
        for i in range(0, CELLS, 9):
            lines.append("\t    " + ", ".join(f"0x{b:02x}" for b in row[i : i + 9]) + ",")
        lines.append("\t},")
    lines += ["};", ""]
    return "\n".join(lines)


def main() -> int:
    text = render(*build())
    tmp = HEADER + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, HEADER)
    print(f"wrote {HEADER}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
