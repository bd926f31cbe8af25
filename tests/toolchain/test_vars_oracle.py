"""``--vars`` against llvm-dwarfdump and readelf: the same variables in scope, the same expression in force,
the same register or stack slot, the same C type -- at thousands of addresses.

At a sample of every function's instruction addresses (``varoracle.sample``),
the concrete variable DIEs kinstkit lists must be exactly those whose
enclosing scopes' ranges in llvm-dwarfdump's dump hold the address; for
each, the expression llvm-dwarfdump shows in force there must be the one
kinstkit evaluated (none where kinstkit says it is not available), a
register location must be that register, a ``DW_OP_breg`` one that
register plus that offset, and a ``DW_OP_fbreg`` one the frame base plus
that offset -- the frame base being ``DW_OP_call_frame_cfa`` at the CFA
readelf's interpreted unwind table gives at the address, or the register
llvm-dwarfdump shows.  The type kinstkit spells must be the one
llvm-dwarfdump quotes.
"""

from __future__ import annotations

import bisect
from collections import Counter
from typing import Dict, List

import pytest

from helpers import varoracle as V


def _agree(path: str, count: int) -> Counter:
    from generator.analysis import locations as L
    from generator.analysis.indexcache import open_source
    from generator.analysis.lines import Verdicts
    from generator.image.elf import KernelImage

    img = KernelImage.open(path)
    src = open_source(img)
    index = src.for_all(lines=False)
    reader = src.variables(index).reader
    number = {r.name: r.number for r in img.isa.dwarf_regs}
    theirs = V.dump(src.info.path)
    cfa = V.cfa_rows(src.info.path) if src.info.path == path else V.cfa_rows(path)
    by_sub: Dict[tuple, List[V.DumpVar]] = {}  # by the ranges of the subprogram around them
    for v in theirs.variables:
        by_sub.setdefault(v.scopes[0], []).append(v)
    spans = sorted((lo, hi, key) for key in by_sub for lo, hi in key)
    starts = [s[0] for s in spans]
    verdicts = Verdicts(img, "any")
    addresses = []
    for f in img.functions():
        rep, _ = verdicts.report(f)
        addresses += [p.address for p in rep.probes]
    stats: Counter = Counter()
    bad: List[str] = []

    def disagree(kind: str, text: str) -> None:
        stats["bad " + kind] += 1
        if len(bad) < 30:
            bad.append(f"{kind}: {text}")

    for a in V.sample(sorted(addresses), count):
        ours = {v.die: v for v in reader.at(a) if v.concrete}
        i = bisect.bisect_right(starts, a)
        keys = {spans[j][2] for j in range(max(0, i - 8), i) if spans[j][0] <= a < spans[j][1]}
        expected = {v.offset: v for k in keys for v in by_sub[k] if V.in_scope(v, a) and v.name}
        stats["addresses"] += 1
        if set(ours) != set(expected):
            disagree("scope", f"{a:#x}: only ours {sorted(hex(d) for d in set(ours) - set(expected))}, only "
                              f"llvm-dwarfdump's {sorted(hex(d) for d in set(expected) - set(ours))}")
            continue
        for die, var in ours.items():
            t = expected[die]
            stats["variables"] += 1
            if t.type and not V.c_spelling(t.type, var.ctype.name):
                disagree("type", f"{var.name} at {a:#x}: ours {var.ctype.name!r}, llvm-dwarfdump {t.type!r}")
            expr = V.expression_at(t, a)
            if t.const_value:
                if var.dwarf != "DW_AT_const_value" or not isinstance(var.location, L.Bytes):
                    disagree("constant", f"{var.name} at {a:#x}: llvm-dwarfdump has DW_AT_const_value, ours "
                                         f"{var.location}")
                stats["constants"] += 1
                continue
            if expr is None:
                if not isinstance(var.location, L.Unavailable) or var.dwarf:
                    disagree("no location", f"{var.name} at {a:#x}: llvm-dwarfdump has none, ours {var.dwarf!r}")
                stats["not available"] += 1
                continue
            raw = V.undecoded(expr)
            if raw is not None:  # LLVM 14 cannot decode the end of it: those bytes must end ours
                if not var.expr.endswith(raw):
                    disagree("expression", f"{var.name} at {a:#x}: ours {var.expr.hex()}, llvm-dwarfdump {expr!r}")
                stats["undecoded by llvm-dwarfdump"] += 1
                continue
            if V.normalise(expr) != V.normalise(var.dwarf):
                disagree("expression", f"{var.name} at {a:#x}: ours {var.dwarf!r}, llvm-dwarfdump {expr!r}")
                continue
            stats["expressions"] += 1
            ops = V.normalise(expr)
            loc = var.location
            if len(ops) != 1:
                continue
            name, args = ops[0]
            if name.startswith("DW_OP_reg"):
                n = args[0] if name == "DW_OP_regx" else int(name[9:])
                ok = loc == L.Register(n)
            elif name.startswith("DW_OP_breg"):
                n, off = (args[0], args[1]) if name == "DW_OP_bregx" else (int(name[10:]), args[0])
                ok = loc == L.Memory(L.add(L.Reg(n), off))
            elif name == "DW_OP_fbreg":
                base = V.normalise(t.frame_base)
                if base == [("DW_OP_call_frame_cfa", ())]:
                    rule = V.cfa_at(cfa, a)
                    if rule is None:
                        ok = isinstance(loc, L.Unavailable)
                    else:
                        ok = loc == L.Memory(L.add(L.Reg(number[rule.register]), rule.offset + args[0]))
                elif len(base) == 1 and base[0][0].startswith("DW_OP_reg"):
                    ok = loc == L.Memory(L.add(L.Reg(int(base[0][0][9:])), args[0]))
                else:
                    continue
            else:
                continue
            stats["slots"] += 1
            if not ok:
                disagree("slot", f"{var.name} at {a:#x}: ours {loc}, llvm-dwarfdump {expr!r} (frame base "
                                 f"{t.frame_base!r}, readelf's CFA {V.cfa_at(cfa, a)})")
    assert not bad, "\n".join(bad)
    return stats


def test_lua_gcc_variables_agree(lua_gcc):
    stats = _agree(str(lua_gcc), 4000)
    assert stats["addresses"] >= 3000 and stats["slots"] >= 10_000 and stats["not available"] >= 1000, stats


def test_lua_clang_variables_agree(lua_clang):
    stats = _agree(str(lua_clang), 2000)
    assert stats["addresses"] >= 1500 and stats["slots"] >= 2000, stats


def test_sample_kernel_variables_agree(sample_kernel):
    stats = _agree(str(sample_kernel), 2000)
    assert stats["addresses"] >= 1000 and stats["slots"] >= 1000, stats


@pytest.mark.slow
def test_machine_library_variables_agree(libm_debug):
    stats = _agree(str(libm_debug), 6000)
    assert stats["addresses"] >= 5000 and stats["slots"] >= 5000, stats
