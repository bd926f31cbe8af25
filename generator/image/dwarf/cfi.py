"""Call frame information (DWARF 6.4; ``.debug_frame``, and ``.eh_frame`` as the LSB specifies it): the CFA
rule at one address.

A variable gcc places relative to its function's frame base is at
``DW_OP_call_frame_cfa`` plus an offset, and the CFA at an address is what
the unwind table says there: a register plus an offset.  This module finds
the FDE covering an address and runs its CIE's initial instructions and
its own up to that address, keeping only the CFA rule (``remember_state``
and ``restore_state`` included).  Why not pyelftools: it decodes every
entry of the section to answer for one, and a kernel has 50,000 FDEs;
here the FDEs' address ranges are read once (a few fields each) and one
FDE is decoded per question.  tests/toolchain/test_dwarf_reader.py holds the
answers to pyelftools' decoded tables.
"""

from __future__ import annotations

import bisect
import struct
from typing import Dict, List, NamedTuple, Tuple

from . import spec as S
from .sections import DwarfError, Sections
from .units import sleb, uleb

_U16 = struct.Struct("<H").unpack_from
_U32 = struct.Struct("<I").unpack_from
_U64 = struct.Struct("<Q").unpack_from
_S32 = struct.Struct("<i").unpack_from

# DW_EH_PE_* pointer encodings (LSB, .eh_frame): the low four bits the format, 0x70 the base.
_PE_ABSPTR, _PE_ULEB, _PE_UDATA2, _PE_UDATA4, _PE_UDATA8 = 0x00, 0x01, 0x02, 0x03, 0x04
_PE_SLEB, _PE_SDATA2, _PE_SDATA4, _PE_SDATA8 = 0x09, 0x0A, 0x0B, 0x0C
_PE_PCREL = 0x10
_PE_OMIT = 0xFF
MAX_INSTRUCTIONS = 1 << 16


class CfaRule(NamedTuple):
    """The CFA at an address: ``register`` (a DWARF register number) plus ``offset``; or why it is not that."""

    register: int
    offset: int
    problem: str = ""  # "" when the rule is register + offset; else what it is (an expression, no FDE)


class _Cie(NamedTuple):
    code_align: int
    data_align: int
    ra_register: int
    initial: bytes
    fde_encoding: int
    has_augmentation_data: bool


class _Fde(NamedTuple):
    low: int
    high: int
    cie: int  # offset of its CIE in the section
    instructions: Tuple[int, int]  # [start, end) in the section


class FrameTable:
    """The FDEs of one CFI section, by address."""

    def __init__(self, sections: Sections, name: str, addr_size: int = 8):
        self.name = name
        self.data = sections.get(name)
        self.eh = name == ".eh_frame"
        self.base = sections.address(name)
        self.addr_size = addr_size
        self._cies: Dict[int, _Cie] = {}
        self._fdes: List[_Fde] = []
        self._lows: List[int] = []
        self._scan()

    def __bool__(self) -> bool:
        return bool(self._fdes)

    def _scan(self) -> None:
        data = self.data
        n = len(data)
        pos = 0
        fdes = []
        try:
            while pos + 4 <= n:
                start = pos
                length = _U32(data, pos)[0]
                pos += 4
                wide = False
                if length == 0:
                    if self.eh:
                        break  # the terminator
                    continue
                if length == 0xFFFFFFFF:
                    length = _U64(data, pos)[0]
                    pos += 8
                    wide = True
                end = pos + length
                if end > n:
                    raise DwarfError(f"{self.name}: the entry at {start:#x} runs past the section's end")
                id_pos = pos
                cie_id = _U64(data, pos)[0] if wide else _U32(data, pos)[0]
                pos += 8 if wide else 4
                is_cie = cie_id == 0 if self.eh else cie_id in (0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF)
                if not is_cie:
                    cie = id_pos - cie_id if self.eh else cie_id
                    c = self._cie(cie)
                    low, pos = self._pointer(c.fde_encoding, pos)
                    size, pos = self._pointer(c.fde_encoding & 0x0F, pos)
                    if c.has_augmentation_data:
                        alen, pos = uleb(data, pos)
                        pos += alen
                    if size and pos <= end:
                        fdes.append(_Fde(low, low + size, cie, (pos, end)))
                pos = end
        except (IndexError, struct.error):
            raise DwarfError(f"{self.name}: an entry runs past the section's end") from None
        fdes.sort()
        self._fdes = fdes
        self._lows = [f.low for f in fdes]

    def _pointer(self, encoding: int, pos: int) -> Tuple[int, int]:
        """A pointer in ``.eh_frame``'s ``encoding`` (an address in ``.debug_frame``)."""
        data = self.data
        if not self.eh:
            if self.addr_size == 8:
                return _U64(data, pos)[0], pos + 8
            return _U32(data, pos)[0], pos + 4
        fmt = encoding & 0x0F
        at = pos
        if fmt == _PE_ABSPTR or fmt == _PE_UDATA8 or fmt == _PE_SDATA8:
            v, pos = _U64(data, pos)[0], pos + 8
            if fmt == _PE_SDATA8 and v >= 1 << 63:
                v -= 1 << 64
        elif fmt == _PE_UDATA4:
            v, pos = _U32(data, pos)[0], pos + 4
        elif fmt == _PE_SDATA4:
            v, pos = _S32(data, pos)[0], pos + 4
        elif fmt == _PE_UDATA2 or fmt == _PE_SDATA2:
            v, pos = _U16(data, pos)[0], pos + 2
            if fmt == _PE_SDATA2 and v >= 0x8000:
                v -= 0x10000
        elif fmt == _PE_ULEB:
            v, pos = uleb(data, pos)
        elif fmt == _PE_SLEB:
            v, pos = sleb(data, pos)
        else:
            raise DwarfError(f"{self.name}: pointer encoding {encoding:#x} is not one this reader knows")
        if encoding & 0x70 == _PE_PCREL:
            v += self.base + at
        return v & 0xFFFFFFFFFFFFFFFF, pos

    def _cie(self, offset: int) -> _Cie:
        got = self._cies.get(offset)
        if got is not None:
            return got
        data = self.data
        if not 0 <= offset < len(data):
            raise DwarfError(f"{self.name}: a CIE pointer {offset:#x} lies outside the section")
        pos = offset
        length = _U32(data, pos)[0]
        pos += 4
        wide = length == 0xFFFFFFFF
        if wide:
            length = _U64(data, pos)[0]
            pos += 8
        end = pos + length
        pos += 8 if wide else 4
        version = data[pos]
        pos += 1
        aug_end = bytes(data[pos:end]).index(0) + pos
        augmentation = bytes(data[pos:aug_end])
        pos = aug_end + 1
        if version >= 4 and not self.eh:
            pos += 2  # address_size, segment_selector_size
        code_align, pos = uleb(data, pos)
        data_align, pos = sleb(data, pos)
        if version == 1:
            ra = data[pos]
            pos += 1
        else:
            ra, pos = uleb(data, pos)
        encoding = 0 if not self.eh else _PE_ABSPTR
        has_data = augmentation.startswith(b"z")
        if has_data:
            alen, pos = uleb(data, pos)
            adata_end = pos + alen
            p = pos
            for ch in augmentation[1:]:
                if ch == ord("R"):
                    encoding = data[p]
                    p += 1
                elif ch == ord("P"):
                    penc = data[p]
                    p += 1
                    _, p = self._pointer(penc & 0x7F, p)
                elif ch == ord("L"):
                    p += 1
                elif ch in (ord("S"), ord("B")):
                    pass
                else:
                    break
            pos = adata_end
        c = _Cie(code_align, data_align, ra, bytes(data[pos:end]), encoding, has_data)
        self._cies[offset] = c
        return c

    def cfa(self, address: int) -> CfaRule:
        """The CFA rule in force at ``address`` (before its instruction runs)."""
        i = bisect.bisect_right(self._lows, address) - 1
        if i < 0 or not self._fdes[i].low <= address < self._fdes[i].high:
            return CfaRule(0, 0, f"no FDE of {self.name} covers the address")
        fde = self._fdes[i]
        cie = self._cie(fde.cie)
        try:
            return _run(cie, bytes(self.data[fde.instructions[0]:fde.instructions[1]]), fde.low, address, self)
        except (IndexError, struct.error):
            raise DwarfError(f"{self.name}: the instructions of the FDE for {fde.low:#x} run past its end") from None


def _run(cie: _Cie, fde_code: bytes, low: int, target: int, table: FrameTable) -> CfaRule:
    state: Tuple[int, int, str] = (0, 0, "the CIE defines no CFA")
    state = _execute(cie.initial, cie, state, None, 0, 0, table)[0]
    initial = state
    state, _ = _execute(fde_code, cie, state, initial, low, target, table)
    reg, off, problem = state
    return CfaRule(reg, off, problem)


def _execute(code: bytes, cie: _Cie, state, initial, loc: int, target: int, table: FrameTable):
    """Run CFA instructions until the location passes ``target`` (``target`` 0: to the end)."""
    stack = []
    pos = 0
    n = len(code)
    steps = 0
    while pos < n:
        steps += 1
        if steps > MAX_INSTRUCTIONS:
            raise DwarfError(f"{table.name}: an FDE has over {MAX_INSTRUCTIONS} instructions")
        op = code[pos]
        pos += 1
        high, low6 = op & 0xC0, op & 0x3F
        advance = None
        if high == S.DW_CFA_advance_loc:
            advance = low6 * cie.code_align
        elif high == S.DW_CFA_offset:
            _, pos = uleb(code, pos)
        elif high == S.DW_CFA_restore:
            pass
        elif op == S.DW_CFA_nop:
            pass
        elif op == S.DW_CFA_set_loc:
            if table.eh:  # its operand is in the CIE's pointer encoding; compilers do not write it
                return (0, 0, "the FDE moves its location with DW_CFA_set_loc, which this reader does not follow"), pos
            new, pos = (_U64(code, pos)[0], pos + 8) if table.addr_size == 8 else (_U32(code, pos)[0], pos + 4)
            if target and new > target:
                return state, pos
            loc = new
        elif op == S.DW_CFA_advance_loc1:
            advance = code[pos] * cie.code_align
            pos += 1
        elif op == S.DW_CFA_advance_loc2:
            advance = _U16(code, pos)[0] * cie.code_align
            pos += 2
        elif op == S.DW_CFA_advance_loc4:
            advance = _U32(code, pos)[0] * cie.code_align
            pos += 4
        elif op in (S.DW_CFA_offset_extended, S.DW_CFA_register, S.DW_CFA_val_offset):
            _, pos = uleb(code, pos)
            _, pos = uleb(code, pos)
        elif op in (S.DW_CFA_restore_extended, S.DW_CFA_undefined, S.DW_CFA_same_value, S.DW_CFA_GNU_args_size):
            _, pos = uleb(code, pos)
        elif op in (S.DW_CFA_offset_extended_sf, S.DW_CFA_val_offset_sf, S.DW_CFA_GNU_negative_offset_extended):
            _, pos = uleb(code, pos)
            _, pos = (sleb if op != S.DW_CFA_GNU_negative_offset_extended else uleb)(code, pos)
        elif op == S.DW_CFA_remember_state:
            stack.append(state)
            if len(stack) > 1024:
                raise DwarfError(f"{table.name}: remember_state nests deeper than 1024")
        elif op == S.DW_CFA_restore_state:
            if stack:
                state = stack.pop()
        elif op == S.DW_CFA_def_cfa:
            reg, pos = uleb(code, pos)
            off, pos = uleb(code, pos)
            state = (reg, off, "")
        elif op == S.DW_CFA_def_cfa_sf:
            reg, pos = uleb(code, pos)
            off, pos = sleb(code, pos)
            state = (reg, off * cie.data_align, "")
        elif op == S.DW_CFA_def_cfa_register:
            reg, pos = uleb(code, pos)
            state = (reg, state[1], state[2])
        elif op == S.DW_CFA_def_cfa_offset:
            off, pos = uleb(code, pos)
            state = (state[0], off, state[2])
        elif op == S.DW_CFA_def_cfa_offset_sf:
            off, pos = sleb(code, pos)
            state = (state[0], off * cie.data_align, state[2])
        elif op == S.DW_CFA_def_cfa_expression:
            length, pos = uleb(code, pos)
            pos += length
            state = (0, 0, "the CFA is a DWARF expression here (DW_CFA_def_cfa_expression)")
        elif op in (S.DW_CFA_expression, S.DW_CFA_val_expression):
            _, pos = uleb(code, pos)
            length, pos = uleb(code, pos)
            pos += length
        else:
            raise DwarfError(f"{table.name}: unknown call frame instruction {op:#x}")
        if advance is not None:
            if target and loc + advance > target:
                return state, pos
            loc += advance
        if pos > n:
            raise DwarfError(f"{table.name}: a call frame instruction runs past its entry")
    return state, pos


def frame_tables(*candidates: Tuple[Sections, str]) -> List[FrameTable]:
    """The non-empty CFI sections among ``candidates`` ((sections, name) pairs), in the order given."""
    out = []
    for sections, name in candidates:
        if sections.has(name):
            table = FrameTable(sections, name)
            if table:
                out.append(table)
    return out


def cfa_at(tables: List[FrameTable], address: int) -> CfaRule:
    """The CFA rule at ``address`` from the first table with an FDE covering it."""
    problems = []
    for t in tables:
        rule = t.cfa(address)
        if not rule.problem or not rule.problem.startswith("no FDE"):
            return rule
        problems.append(rule.problem)
    return CfaRule(0, 0, "; ".join(problems) or "the image has no call frame information (.debug_frame, .eh_frame)")
