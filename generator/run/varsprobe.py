"""Variable readings in the user-space harness: the values ``--vars`` and ``kinst-line --print`` promise, read
by real code's probes at every hit.

For each chosen site, every reading that has a value there (``analysis.variables``) is printed as a
program for the harness's evaluator (``locations.program``, from the same location record the D
expression is printed from) into ``kinst_harness_vars.h``; ``harness.build(optional=(GLUE,), ...)``
compiles it with the optional glue ``harness_c/vars/kh_vars.c``, whose ``kh_hit()`` the trap handler calls.  At each of a site's first ``nhits`` hits, the trap handler runs every program
against the trap's registers and memory and records the 64-bit result in
``$KINST_HARNESS_OUT.<pid>.vars``; ``read_values`` reads them back, as the reading's type reads
them (``locations.typed``).
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from ..analysis import locations as L
from ..analysis.variables import Reading
from ..isa.contract import Isa

GLUE = "vars"  # the optional folder of harness_c/ that evaluates the readings
DEFAULT_HITS = 5
MAGIC = 0x3153524156484B  # "KHVARS1"
STATUS = {0: "not recorded", 1: "ok", 2: "memory unreadable", 3: "malformed program", 4: "register not held",
          5: "division by zero"}


class VarSite(NamedTuple):
    """A site and the readings the harness evaluates there."""

    address: int  # the link address in the target
    label: str  # the probe's name, for reports
    readings: Tuple[Reading, ...]  # each with a value computation


class Value(NamedTuple):
    """One reading at one hit."""

    value: Optional[int]  # as the type reads it; None when not read
    status: str  # "ok", or why there is no value (STATUS)


def header_context(sites: Sequence[VarSite], isa: Isa, nhits: int = DEFAULT_HITS) -> Dict[str, object]:
    """The template context of ``kinst_harness_vars.h``: sites by address, their readings' programs."""
    ordered = sorted(sites, key=lambda s: s.address)
    if len({s.address for s in ordered}) != len(ordered):
        raise ValueError("two variable sites at one address")
    ctx_sites, reads, program = [], [], []
    for s in ordered:
        ctx_sites.append({"pc": f"{s.address:#x}", "first": len(reads), "count": len(s.readings)})
        for r in s.readings:
            assert r.value is not None, r
            ops = L.program(r.value)
            reads.append({"first": len(program), "len": len(ops), "what": f"{s.label} {r.spec}: {r.d}"})
            program += [(op, f"{arg:#x}ULL") for op, arg in ops]
    names = {"reg": "REG", "const": "CONST", "load": "LOAD", "+": "ADD", "-": "SUB", "*": "MUL", "&": "AND",
             "|": "OR", "^": "XOR", "<<": "SHL", ">>": "SHR", ">>a": "SHRA", "neg": "NEG", "not": "NOT", "ext": "EXT",
             "/s": "DIV", "%": "MOD"}
    return {
        "sites": ctx_sites,
        "reads": reads or [{"first": 0, "len": 0, "what": "none"}],
        "program": program or [(0, "0")],
        "nreads": max(len(reads), 1),
        "nops": max(len(program), 1),
        "nhits": nhits,
        "ops": [(f"KH_OP_{names[k]}", v) for k, v in L.PROGRAM_OPS.items()],
        "regs": isa.dwarf_regs,
    }


def render(sites: Sequence[VarSite], isa: Isa, command: str, inputs, nhits: int = DEFAULT_HITS) -> Tuple[str, str]:
    """(file name, text) of the generated header, for ``harness.build(generated=...)``."""
    from ..render import c_header, environment

    name = "harness_vars/kinst_harness_vars.h.j2"
    text = environment().get_template(name).render(header=c_header(name, inputs, command),
                                                    **header_context(sites, isa, nhits))
    return "kinst_harness_vars.h", text


def read_values(prefix: Path, sites: Sequence[VarSite]) -> Dict[int, List[List[Value]]]:
    """Per process id: per site (in ``sites``' order), per recorded hit, per reading, the value it had."""
    ordered = sorted(range(len(sites)), key=lambda i: sites[i].address)
    out: Dict[int, List[List[Value]]] = {}
    for path in sorted(prefix.parent.glob(prefix.name + ".*.vars")):
        pid = int(path.name[len(prefix.name) + 1:].split(".")[0])
        data = path.read_bytes()
        magic, nsites, nreads, nhits = struct.unpack_from("<4Q", data, 0)
        if magic != MAGIC or nsites != len(sites):
            raise ValueError(f"{path}: not this build's values file")
        counts = struct.unpack_from(f"<{nsites}Q", data, 32)
        base = 32 + 8 * nsites
        per_site: List[List[Value]] = [[] for _ in sites]
        for k, i in enumerate(ordered):
            s = sites[i]
            for hit in range(min(counts[k], nhits)):
                row = []
                for j, r in enumerate(s.readings):
                    at = base + 8 * 2 * ((k * nhits + hit) * nreads + j)
                    raw, status = struct.unpack_from("<2Q", data, at)
                    if status == 1:
                        row.append(Value(L.typed(raw, r.ctype.size, r.ctype.signed), "ok"))
                    else:
                        row.append(Value(None, STATUS.get(status, f"status {status}")))
                per_site[i].append(row)
        out[pid] = per_site
    return out
