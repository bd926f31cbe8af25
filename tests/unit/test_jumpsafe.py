"""The jump probe's per-site proof on hand-made instruction lists: each condition, its order, and the
cases it must let through (a call whose return address is the jump's end, a branch to the jump's first
byte).  The fixtures that break each condition on real code, and the objdump oracle, are in
tests/toolchain/test_jump_fixtures.py."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from generator.analysis import jumpsafe as J
from generator.analysis.jumprefs import CodeRefs, Held
from generator.isa import by_name
from helpers.textimage import lay_out

ISA = by_name("amd64")
CALL, PLAIN = "call-reg", "trampoline"


def _refs(targets: Sequence[int] = (), held: Sequence[Held] = (), unread: Tuple[str, ...] = ()) -> CodeRefs:
    held = sorted(held)
    reach = list(np.maximum.accumulate([h.end for h in held])) if held else []
    return CodeRefs(np.array(sorted(targets), dtype=np.uint64), tuple(held), unread, tuple(h.start for h in held),
                    tuple(int(r) for r in reach), {})


def _case(insns: List[Tuple[int, Optional[str]]], branches: Optional[Dict[int, int]] = None, indirect: int = -1):
    """An image of one function whose instructions are ``insns`` ((length, kind or None) from offset 0), and
    its proof record; ``branches``: target offset -> the offset of a branch to it."""
    img, (func,) = lay_out(ISA, [b"\x90" * sum(n for n, _ in insns)])
    offs = np.cumsum([0] + [n for n, _ in insns[:-1]]).astype(np.int64)
    fc = J.FuncCode(offs, np.array([n for n, _ in insns], dtype=np.int64),
                    np.array([k is not None for _, k in insns]), np.array([k == CALL for _, k in insns]),
                    {i: "refused here" for i, (_, k) in enumerate(insns) if k is None},
                    {func.address + t: o for t, o in (branches or {}).items()}, (), indirect, int(indirect >= 0))
    return img, func, fc


def _prove(insns: List[Tuple[int, Optional[str]]], branches: Optional[Dict[int, int]] = None,
           refs: Optional[CodeRefs] = None, indirect: int = -1) -> Dict[int, str]:
    """Each probe's refusal code ("" when proven), by offset."""
    img, func, fc = _case(insns, branches, indirect)
    return {v.offset: v.code for v in J.prove(img, func, fc, refs or _refs(), ISA.jump)}


def test_call_returning_inside_the_jump_is_refused_and_one_returning_at_its_end_is_not():
    got = _prove([(2, CALL), (3, PLAIN), (5, CALL), (1, PLAIN), (1, PLAIN), (1, PLAIN), (1, PLAIN), (1, PLAIN)])
    assert got[0] == "call-inside"  # returns to +2, inside [0, 5)
    assert got[2] == ""  # addl + the 5-byte call: the call is last, it returns to +10, the end of the window
    assert got[5] == ""  # the 5-byte call alone: returns to +10


def test_past_the_end_and_displaced_refusals():
    got = _prove([(3, PLAIN), (1, None), (3, PLAIN), (2, PLAIN)])
    assert got[0] == "displaced-refused"
    assert got[4] == ""  # the 3- and 2-byte instructions after the refused one: exactly 5 bytes, to the end
    assert got[7] == "past-end"  # 7 + 5 > 9
    assert 3 not in got  # not a probe: no verdict


def test_branches_into_the_jump_but_not_to_its_first_byte():
    insns = [(2, PLAIN)] * 8
    got = _prove(insns, branches={4: 14})
    assert got[0] == got[2] == "branch-into"  # +4 lies in (0, 5) and in (2, 7)
    assert got[4] == got[6] == ""  # +4 is the jump's first byte, then nothing enters (6, 11)
    refs_only = _prove(insns, refs=_refs([0xFFFFFFFF80200000 + 3]))  # a kernel address, above 2**63
    assert refs_only[0] == refs_only[2] == "branch-into" and refs_only[4] == ""


def test_held_bytes_come_before_entry_points_and_unread_tables_refuse_all():
    base = 0xFFFFFFFF80200000
    insns = [(2, PLAIN)] * 8
    got = _prove(insns, branches={3: 14}, refs=_refs(held=[Held(base + 5, base + 6, "a faulting load")]))
    assert got[0] == got[2] == got[4] == "held" and got[6] == ""  # held first, though +3 is entered too
    assert _prove(insns, branches={3: 14})[0] == "branch-into"
    assert set(_prove(insns, refs=_refs(unread=(".altinstructions",))).values()) == {"unread-table"}


def test_an_unbounded_indirect_jump_refuses_the_function():
    got = _prove([(2, PLAIN)] * 6, indirect=8)
    assert set(got.values()) == {"indirect-jump"}
    img, func, fc = _case([(2, PLAIN)] * 6, indirect=8)
    reasons = {v.reason for v in J.prove(img, func, fc, _refs(), ISA.jump)}
    assert reasons == {J.REASONS["indirect-jump"].format(off=8, jumps=1, tables=0)}
