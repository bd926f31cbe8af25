"""amd64's probe metadata: kinst's ``struct kinst_probe_md``, its flag bits and the table kinds.

One owner for these encodings: the generated ``kinst_encoding.h`` is rendered
from ``FLAG_BITS`` and ``TABLE_KINDS`` (the rows of ``kinds.txt``), and
nothing else defines them.
"""

import enum
from pathlib import Path
from typing import Any, NamedTuple

from ...common.cstring import c_bytes
from ..contract import FlagBit, load_kinds


class KinstFlag(enum.IntFlag):
    """``KINST_F_*`` from kinst_isa.c; mirrored by the generated C header.  What each bit means is said
    once, in ``_FLAG_DOCS``, the comments the header carries."""

    CALL = 0x01
    DIRECT_CALL = 0x02
    RIPREL = 0x04
    JMP = 0x08
    MOD_DIRECT = 0x10


_FLAG_DOCS = {
    KinstFlag.CALL: "instruction is a call",
    KinstFlag.DIRECT_CALL: "call rel32",
    KinstFlag.RIPREL: "position-dependent: rel32 rewritten in the trampoline",
    KinstFlag.JMP: "a jump",
    KinstFlag.MOD_DIRECT: "call operand is a register, not memory",
}
FLAG_BITS = tuple(FlagBit(f"KINST_F_{f.name}", int(f), _FLAG_DOCS[f]) for f in KinstFlag)

# The kinds a generated table can hold, in the order of their C enum values (enum kinst_kind in the
# rendered kinst_encoding.h): how a hit on an instruction is resumed.
TABLE_KINDS = load_kinds(Path(__file__).with_name("kinds.txt"))


class ProbeMd(NamedTuple):
    """``struct kinst_probe_md`` for one instruction, as ``kinst_instr_dissect()`` fills it.

    Except where docs/refusals.md lists a deliberate correction.
    """

    flags: int  # KINST_F_* bits
    instlen: int  # original length
    tinstlen: int  # length in the trampoline (widened short jumps are longer)
    template: bytes  # 16 bytes, the displacement hole zeroed
    dispoff: int  # where the rel32 hole is in template
    disp: int  # displacement (widened jumps: adjusted by -3/-4)
    reg1: int  # call operand base: -1 none; 0..15 in trapframe order rax..r15
    reg2: int  # call operand index
    scale: int  # call operand scale (a shift)

    def to_json(self) -> dict[str, Any]:
        d = self._asdict()
        d["template"] = self.template.hex()
        return d


def skip_md(length: int) -> ProbeMd:
    """The metadata of a refused instruction nobody will trampoline."""
    return ProbeMd(0, length, length, bytes(16), 0, 0, 0, 0, 0)


def table_row(md: ProbeMd) -> dict[str, object]:
    """The fields of ``struct kinst_entry`` for this metadata, formatted for C."""
    return {
        "flags": f"{md.flags:#04x}",
        "instlen": md.instlen,
        "tinstlen": md.tinstlen,
        "dispoff": md.dispoff,
        "reg1": md.reg1,
        "reg2": md.reg2,
        "scale": md.scale,
        "disp": md.disp,
        "template": c_bytes(md.template),
    }
