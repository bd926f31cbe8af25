"""Stage 3b: the probe plan -- what goes into a generated kinst table.

A table is compact, so that a whole kernel's fits in a module: per function
its name, link-time address, size, a digest of its bytes and one small record
per instruction (the ISA's ``stream_record``: length, how a hit resumes, and
the few facts that cannot be read back from the bytes).  Everything else --
the original bytes, the trampoline template, displacements, the registers of
an emulated call -- is derived when a probe is made, by the portable core,
from the live instruction, once the function's digest has shown the live
bytes to be the analysed ones.

The digest covers the function's bytes with every field a relocation fills
zeroed (module tables: the loader writes those, and the core reads them from
the live copy): CRC-32 (IEEE) in the high half, Adler-32 in the low half,
the two checksums zlib computes here and the core recomputes in C.

Only probes the analysis proved safe go in.  Every refusal -- a whole function
(offset -1) or one instruction -- is listed with its reason, so the generated
sources say what was left out and why.  Functions are kept in link-time
address order; a function whose every instruction is refused is listed as
refused and not tabled.

Planning a whole image goes through the ISA's host library where it has one
(``isa/hostcore.py``: the portable core's verdict on every instruction, as rows),
falling back to ``analysis.probes.analyse`` for any function it hands back.
"""

from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass
from typing import Iterator, List, NamedTuple, Optional, Sequence, Tuple

from .. import isa as isa_registry
from .exclusions import excluded, for_image
from .probes import analyse, function_code
from .records import STATUS_OK, FunctionReport
from .whole import map_chunks
from ..common.defaults import DEFAULT_PROLOGUE_RULE
from ..image.elf import Function, KernelImage
from ..isa import hostcore
from ..isa.contract import Isa


class PlanFunc(NamedTuple):
    """A function with at least one probe in the table."""

    name: str  # symbol name, as the kernel linker knows it
    qualified: str  # name@file for a local symbol
    address: int  # st_value (link-time)
    size: int  # st_size
    digest: int  # CRC-32 << 32 | Adler-32 of its bytes, relocated fields zeroed
    records: bytes  # the ISA's per-instruction records
    first: int  # table index of its first probe
    probes: int  # how many of its instructions are probes


class Refusal(NamedTuple):
    function: str  # qualified name
    offset: int  # -1: the whole function
    reason: str


class TableProbe(NamedTuple):
    """One probe of a plan, read back from the records (for reports and tests)."""

    index: int  # table index
    func: int  # index into ProbePlan.funcs
    offset: int
    length: int
    kind: str
    dispoff: int


@dataclass(frozen=True)
class ProbePlan:
    """Everything the kinst templates need, and nothing they must decide."""

    arch: str  # the ISA's name
    image: str
    e_type: str  # ET_EXEC (a kernel), ET_REL (a module) or ET_DYN
    build_id: str
    sha256: str
    funcs: Tuple[PlanFunc, ...]
    refused: Tuple[Refusal, ...]
    # The ISA's exclusions by name for this image (kinst_md_excluded() and the NMI closure), name -> reason,
    # sorted: what the module's glue applies again.
    md_excluded: Tuple[Tuple[str, str], ...] = ()

    @property
    def nprobes(self) -> int:
        return sum(f.probes for f in self.funcs)

    def probes(self) -> Iterator[TableProbe]:
        """Every probe of the table, in table order."""
        decode = isa_registry.by_name(self.arch).stream_decode
        index = 0
        for fi, f in enumerate(self.funcs):
            for insn in decode(f.records, f.size):
                if insn.kind is not None:
                    yield TableProbe(index, fi, insn.offset, insn.length, insn.kind, insn.dispoff)
                    index += 1

    def probe_name(self, p: TableProbe) -> str:
        return f"{self.funcs[p.func].qualified}:{p.offset}"

    def link_address(self, p: TableProbe) -> int:
        return self.funcs[p.func].address + p.offset


def digest(code: bytes, masks: Sequence[Tuple[int, int]] = ()) -> int:
    """The table digest of a function's bytes, the fields at ``masks`` (offset, width) zeroed."""
    if masks:
        buf = bytearray(code)
        for off, width in masks:
            buf[off : off + width] = bytes(width)
        code = bytes(buf)
    return zlib.crc32(code) << 32 | zlib.adler32(code)


class _Planned(NamedTuple):
    """One function as a worker planned it (not yet numbered)."""

    func: Function
    records: bytes
    digest: int
    probes: int
    refused: Tuple[Refusal, ...]


def _masks(img: KernelImage, func: Function) -> Tuple[List[Tuple[int, int]], str]:
    """The fields relocations fill inside the function, as (offset, width); and why the function
    cannot be tabled ("" when it can)."""
    if img.e_type != "ET_REL":
        return [], ""
    out = []
    for r in img.relocs_in(func.address, func.size):
        if r.width == 0:
            return [], f"holds a {r.type} relocation, a type kinstkit does not know"
        out.append((r.address - func.address, r.width))
    return out, ""


def _fast(isa: Isa, lib: hostcore.Host, func: Function, code: bytes,
          rule: str) -> Optional[Tuple[bytes, List[Refusal], str, int]]:
    """(records, instruction refusals, function refusal, probes) from the host library's rows; None where it
    hands the function back."""
    rows = lib.rows(code, func.size, func.address)
    if rows is None:
        return None
    if not rows.prologue & 1 << isa.accelerator.prologue_rules.index(rule):
        return b"", [], isa.prologue_reasons[rule], 0
    refused = []
    if rows.reasons:
        offsets = rows.offsets()
        refused = [Refusal(func.qualified, offsets[i], why) for i, why in sorted(rows.reasons.items())]
    return rows.records(), refused, "", rows.n - len(refused)


def _capstone(img: KernelImage, isa: Isa, func: Function, rule: str,
              rep: Optional[FunctionReport] = None) -> Tuple[bytes, List[Refusal], str, int]:
    """(records, instruction refusals, function refusal, probes) through the decoder of record."""
    rep = rep or analyse(img, func, rule, isa)
    if not rep.eligible:
        return b"", [], rep.reason, 0
    out = bytearray()
    refused = []
    for p in rep.probes:
        ok = p.status == STATUS_OK
        out += isa.stream_record(p.length, p.kind if ok else None, p.md.dispoff if ok else 0, ())
        if not ok:
            refused.append(Refusal(rep.qualified, p.offset, p.reason))
    return bytes(out), refused, "", len(rep.probes) - len(refused)


def plan_function(img: KernelImage, func: Function, rule: str = DEFAULT_PROLOGUE_RULE,
                  lib: Optional[hostcore.Host] = None, report: Optional[FunctionReport] = None) -> _Planned:
    """One function's records, digest and refusals; from the rows of the ISA's host library ``lib`` when
    given, else from ``analysis.probes.analyse`` (its ``report`` when the caller has it already)."""
    isa = img.isa
    why = excluded(func.name, isa.name, for_image(img))
    if why:
        return _Planned(func, b"", 0, 0, (Refusal(func.qualified, -1, why),))
    masks, why = _masks(img, func)
    if why:
        return _Planned(func, b"", 0, 0, (Refusal(func.qualified, -1, why),))
    code = function_code(img, func)
    result = _fast(isa, lib, func, code, rule) if lib is not None and not isa.mapping_symbols else None
    records, refused, why, probes = result if result is not None else _capstone(img, isa, func, rule, report)
    if why:
        return _Planned(func, b"", 0, 0, (Refusal(func.qualified, -1, why),))
    if masks:
        records = isa.stream_masks(records, masks)
    return _Planned(func, records, digest(code[: func.size], masks), probes, tuple(refused))


def _plan_chunk(img: KernelImage, funcs: Sequence[Function], rule: str, fast: bool) -> List[_Planned]:
    lib = hostcore.for_isa(img.isa) if fast else None
    return [plan_function(img, f, rule, lib) for f in funcs]


def make_plan(img: KernelImage, funcs: Sequence[Function], rule: str = DEFAULT_PROLOGUE_RULE, *,
              fast: bool = True, jobs: int = 1) -> ProbePlan:
    """The plan for ``funcs`` of ``img``: from the ISA's host library's rows, or with ``fast`` False every
    function through ``analysis.probes.analyse``."""
    if fast:
        hostcore.for_isa(img.isa)  # built and loaded before any worker forks
    funcs = sorted(funcs, key=lambda f: (f.address, f.name))
    md_excluded = for_image(img)  # before the workers fork: they share it
    out: List[PlanFunc] = []
    refused: List[Refusal] = []
    first = 0
    work = functools.partial(_plan_chunk, rule=rule, fast=fast)
    for chunk in map_chunks(img, funcs, work, jobs):
        for p in chunk:
            refused.extend(p.refused)
            if p.probes:
                f = p.func
                out.append(PlanFunc(f.name, f.qualified, f.address, f.size, p.digest, p.records, first, p.probes))
                first += p.probes
    return ProbePlan(
        arch=img.isa.name,
        image=img.path,
        e_type=img.e_type,
        build_id=img.build_id or "",
        sha256=img.sha256(),
        funcs=tuple(out),
        refused=tuple(refused),
        md_excluded=tuple(sorted(md_excluded.items())),
    )
