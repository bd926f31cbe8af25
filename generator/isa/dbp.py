"""What the "double breakpoint" ISAs, arm64 and riscv, share on the generator's side.

``sys/modules/kinst/dbp/`` holds what their kernel parts share; this module
holds the shapes their packages share, so that ``isa/arm64/`` and
``isa/riscv/`` keep only their facts: an encoding as ``(mask, match)``,
the host step's shared C (``isa/accel/kk_dbp.c``), the ``Accelerator`` and
the ``Isa`` fields every such ISA fills alike, the probe metadata's JSON,
objdump's and QEMU's view (``OracleQuirks``), the compact table's record
codes, and the two region refusals that span
instructions (exclusive blocks, trap-register regions).
"""

from __future__ import annotations

import ctypes
import functools
import itertools
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from . import hostcore, immediates, objdump_text
from ..common.errors import ClassifierError
from .contract import Accelerator, CConst, OracleQuirks, StreamInsn, TableKinds

ACCEL_DIR = Path(__file__).resolve().parent / "accel"
STEP_SOURCES = (ACCEL_DIR / "kk_dbp.c", ACCEL_DIR / "kk_dbp.h")  # the shared walk, over the ISA's hooks


class Encoding(NamedTuple):
    """An instruction class: a value ``v`` is of it when ``v & mask == match``."""

    mask: int
    match: int

    def has(self, value: int) -> bool:
        return value & self.mask == self.match


def encoding_consts(encodings: Dict[str, Encoding]) -> Tuple[CConst, ...]:
    """``KINST_<name>_MASK`` and ``_MATCH`` of each encoding, for ``kinst_encoding.h`` (``Isa.core_consts``)."""
    return tuple(c for name, enc in encodings.items()
                 for c in (CConst(f"KINST_{name}_MASK", enc.mask, name.lower()),
                           CConst(f"KINST_{name}_MATCH", enc.match, name.lower())))


def _mnemonics_init(by_kind: Sequence[Tuple[str, ...]]) -> Callable[[Any], List[Any]]:
    """The set-up that hands the shared step capstone's mnemonics of each table kind (``kk_dbp_init()``: by
    kind, a NULL-terminated list, or NULL for a kind with none)."""

    def init(lib: Any) -> List[Any]:
        lists = [(ctypes.c_char_p * (len(m) + 1))(*(n.encode() for n in m), None) if m else None
                 for m in by_kind]
        table = (ctypes.c_void_p * max(1, len(lists)))(*(ctypes.cast(x, ctypes.c_void_p) if x is not None
                                                         else None for x in lists))
        lib.kk_dbp_init.argtypes = (ctypes.c_void_p, ctypes.c_uint)
        lib.kk_dbp_init.restype = ctypes.c_int
        if lib.kk_dbp_init(table, len(lists)) != 0:
            raise ValueError("kk_dbp_init: more table kinds than the shared step holds")
        return [lists, table]  # the C keeps pointers into them

    return init


def accelerator(package_file: str, tables: Any, kinds: TableKinds, mnemonics: Dict[str, Tuple[str, ...]],
                init: Optional[Callable[[Any], List[Any]]] = None, **fields: Any) -> Accelerator:
    """The ISA's ``Accelerator``: its step ``accel/kk_walk.c`` beside ``package_file``, over the shared walk,
    with the prologue rules ``any`` and ``first`` and no mnemonic refused by name.  ``mnemonics``: capstone's
    mnemonics of each table kind (of ``kinds``, ``Isa.table_kinds``) that has its own, which the step checks
    capstone's text against (a key that is no kind stops the import); ``init``: the ISA's own set-up, after that."""
    kinds.names(*mnemonics)
    names = _mnemonics_init([mnemonics.get(k.kind, ()) for k in kinds])

    def both(lib: Any) -> List[Any]:
        return [*names(lib), *(init(lib) if init is not None else [])]

    return Accelerator(walk_c=Path(package_file).resolve().parent / "accel" / "kk_walk.c", headers=(),
                       sources=STEP_SOURCES, names={}, undecodable=tables.REASONS["undecodable"],
                       prologue_rules=("any", "first"),
                       md_json=(),  # the JSON fast path is not used on an ISA with mapping symbols (fastjson.py)
                       init=both, **fields)


def isa_parts(name: str, tables: Any, relocs: Any, accel: Accelerator) -> Dict[str, Any]:
    """The ``Isa`` fields a double-breakpoint ISA fills alike: its rule is its portable core's, run on the
    host (``isa/hostcore.py``), over the encodings and immediate layouts of its ``tables``; relocations fill
    those bit fields of an instruction (``relocs.TABLE`` says which, ``relocs.WRITERS`` writes what is not one
    layout); mapping symbols mark data in code."""
    return dict(
        classify=functools.partial(hostcore.classify, name),
        frame_verdict=functools.partial(hostcore.frame_verdict, name),
        accelerator=accel,
        refusals=tables.CORE_REFUSALS,
        core_consts=tables.CORE_CONSTS,
        word_sets=tables.CORE_WORD_SETS,
        imm_layouts=tables.IMM_LAYOUTS,
        reloc_insert=immediates.inserter(relocs.TABLE.fields, tables.IMM_LAYOUTS, relocs.WRITERS),
        branch_reloc=relocs.branch_field,
        mapping_symbols=True,
    )


def oracle_quirks(syntax: objdump_text.Syntax, gnu_triple: str, **fields: Any) -> OracleQuirks:
    """The ``OracleQuirks`` of a double-breakpoint ISA: objdump's lines read by its ``syntax``, a branch
    relocation's target S + A (its field is the whole instruction), its programs run under qemu-user."""
    return OracleQuirks(branch_mnemonic=syntax.is_branch, insn_text=syntax.insn_text,
                        branch_target=syntax.branch_target, reloc_target_bias=0,
                        qemu=f"qemu-{gnu_triple.split('-')[0]}", gnu_triple=gnu_triple, **fields)


def md_json(md: Any, length: int) -> Dict[str, Any]:
    """A probe metadata record's JSON: its fields, the instruction (``length`` bytes) in hex."""
    d = md._asdict()
    d["insn"] = f"{d['insn']:#0{2 + 2 * length}x}"
    return d


# What the plan hands ``stream_record`` as a probe metadata record's ``dispoff`` (amd64's rel32 position):
# these ISAs have no such field.
NO_DISPOFF = property(lambda md: 0, doc="amd64's rel32 position in the instruction: none here")


class ByteRecords(NamedTuple):
    """The compact table's per-instruction records of a double-breakpoint ISA: one byte per instruction, in
    order (a probe's offset is the sum of the lengths before it), holding a code (a table kind's index, or
    ``refused``: no probe), a bit for an instruction a relocation fills part of (module tables: the digest
    zeroes it and the core reads it from the live copy, where the loader put its final value) and, where
    the ISA has two lengths, a bit for the long one.  Every other bit is zero.  The ISA's ``table.py``
    gives the bits and the C names of them (``RECORD_CODES``); ``decode`` is the C walker's Python twin."""

    isa: str  # the ISA's name, for errors
    kinds: TableKinds  # the table kinds, codes 0, 1, ... in this order
    short: int  # bytes of an instruction whose record lacks ``long``
    long: int  # the record bit of a 4-byte instruction; 0: every instruction is ``short`` bytes
    code_shift: int  # the code's position in a record (4 bits)
    masked: int  # the record bit of an instruction a relocation fills part of
    refused: int = 15  # the code of a refused instruction

    def codes(self, extra: Iterable[CConst]) -> Tuple[CConst, ...]:
        """The record codes ``kinst_encoding.h`` defines: the kinds, the refusal, then the ISA's own bits."""
        return (CConst("KINST_NKINDS", len(self.kinds), "record codes below this are enum kinst_kind"),
                CConst("KINST_R_REFUSED", self.refused, "no probe: the instruction is refused"), *extra)

    def record(self, length: int, kind: Optional[str], dispoff: int = 0,
               masks: Sequence[Tuple[int, int]] = ()) -> bytes:
        """The record of one instruction: ``kind`` None for a refused one; any ``masks`` mark it relocated."""
        lengths = (self.short, 4) if self.long else (self.short,)
        if length not in lengths:
            raise ClassifierError(f"instruction of {length} bytes: kinstkit's {self.isa} instructions are "
                                  + " or ".join(map(str, lengths)))
        code = self.refused if kind is None else self.kinds.code(kind)
        return bytes(((self.long if length == 4 else 0) | code << self.code_shift | (self.masked if masks else 0),))

    def _length(self, b: int) -> int:
        return 4 if b & self.long else self.short

    def with_masks(self, records: bytes, masks: Sequence[Tuple[int, int]]) -> bytes:
        """``records`` with every instruction that a relocated field (offset, width) overlaps marked relocated."""
        out = bytearray(records)
        starts = list(itertools.accumulate((self._length(b) for b in records), initial=0))
        for moff, width in masks:
            hit = [i for i in range(len(records)) if starts[i] < moff + width and moff < starts[i + 1]]
            if not hit or moff + width > starts[-1]:
                raise ClassifierError(f"relocated field {width}@+{moff} lies past the function's instructions")
            for i in hit:
                out[i] |= self.masked
        return bytes(out)

    def decode(self, stream: bytes, size: Optional[int] = None) -> Iterator[StreamInsn]:
        """The instructions a function's records describe, in order (up to ``size`` bytes of function)."""
        known = self.long | 15 << self.code_shift | self.masked
        off = 0
        for i, b in enumerate(stream):
            if size is not None and off >= size:
                return
            length = self._length(b)
            code = b >> self.code_shift & 15
            if b & ~known or (code >= len(self.kinds) and code != self.refused):
                raise ClassifierError(f"record {b:#04x} at byte {i} of a table stream")
            kind = None if code == self.refused else self.kinds[code].kind
            yield StreamInsn(off, length, kind, 0, ((0, length),) if b & self.masked else ())
            off += length


def blocks(items: Sequence[Tuple[int, Any]], opens: Callable[[Any], bool], closes: Callable[[Any], bool],
           inside: str, unterminated: str, out: Dict[int, str]) -> None:
    """kinst's exclusive blocks (arm64's LDX/STX, riscv's LR/SC): each instruction ``(offset, value)`` from one
    that ``opens`` a block up to the next that ``closes`` it is refused with ``inside`` (the two ends are
    refused by the core already), and after an open block with no end, with ``unterminated``."""
    block: List[int] = []
    is_open = False
    for off, v in items:
        if opens(v):
            is_open = True
        elif closes(v):
            for o in block:
                out.setdefault(o, inside)
            block, is_open = [], False
            continue
        if is_open:
            block.append(off)
    for o in block:
        out.setdefault(o, unterminated)


def trap_register_regions(items: Sequence[Tuple[int, Any]], reads: Callable[[Any], Optional[str]],
                          writes: Callable[[Any], Optional[str]], returns: Callable[[Any], bool],
                          entry: Callable[[str, int], str], leaving: Callable[[str, int], str],
                          out: Dict[int, str]) -> None:
    """The regions a breakpoint trap would corrupt the registers of a trap of its own in (arm64's EL1
    exception registers, riscv's trap CSRs): every instruction up to the function's last that ``reads`` one
    (refused with ``entry(name, its offset)``), and from one that ``writes`` a register the exception return
    consumes through the return (``leaving(name, offset)``)."""
    last: Optional[Tuple[int, str]] = None
    for off, v in items:
        name = reads(v)
        if name is not None:
            last = (off, name)
    if last is not None:
        why = entry(last[1], last[0])
        for off, _ in items:
            if off <= last[0]:
                out.setdefault(off, why)
    live: Optional[str] = None
    for off, v in items:
        name = writes(v)
        if name is not None and live is None:
            live = leaving(name, off)
        if live is not None:
            out.setdefault(off, live)
            if returns(v):
                live = None
