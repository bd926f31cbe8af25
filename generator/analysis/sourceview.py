"""Text views of source-line and inline sites, for people; the JSON is in ``lines`` and ``inlines``.

Every site line starts with the probe name a D script uses
(``kinst::vm_fault:12``), as ``probes`` does, and ends with the same
verdict: how a hit resumes, or why kinst refuses the instruction.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from .inlines import InlineCopy
from .lines import LineSite
from .variables import Reading, Variable
from .records import STATUS_OK
from ..image.elf import Function

NOT_STMT = "*"  # marks a site whose row is not is_stmt
NO_BYTES = "="  # marks a site whose row owns no bytes: the instruction starts the next row's line too
REFUSED = "!"  # marks a site kinst refuses


def probe_name(function: Optional[str], offset: Optional[int]) -> str:
    if function is None:
        return "(no symbol)"
    return f"kinst::{function}:{'?' if offset is None else offset}"


def _verdict(status: str, kind: str, reason: str) -> str:
    return kind if status == STATUS_OK else f"SKIP: {reason}"


def line_text(spec: str, sites: Sequence[LineSite]) -> str:
    """``probes --line``: a header, then one line per site."""
    ok = sum(1 for s in sites if s.status == STATUS_OK)
    funcs = len({s.function for s in sites})
    head = (f"{sites[0].file}:{sites[0].line}: {len(sites)} site{'s' if len(sites) != 1 else ''} in {funcs} "
            f"function{'s' if funcs != 1 else ''}, {ok} traceable")
    lines = [head]
    for s in sites:
        marks = (" " if s.is_stmt else NOT_STMT) + (" " if s.owns else NO_BYTES)
        inl = f"  [inlined: {' < '.join(s.inlined)}]" if s.inlined else ""
        view = f"  [view {s.view}]" if s.view else ""
        lines.append(f"{probe_name(s.function, s.offset):<32} {s.address:#x} {marks} "
                     f"{_verdict(s.status, s.kind, s.reason)}{inl}{view}")
    if any(not s.is_stmt for s in sites):
        lines.append(f"({NOT_STMT}: the line table does not mark the site is_stmt)")
    if any(not s.owns for s in sites):
        lines.append(f"({NO_BYTES}: the line begins here with no bytes of its own: the instruction is also the "
                     "first of the next line in the table, as at a call whose code is all the inlined callee's)")
    return "\n".join(lines)


def _source(path: str) -> Optional[List[str]]:
    try:
        with open(path, errors="replace") as f:
            return f.read().splitlines()
    except OSError:
        return None


def _offsets(sites: Sequence[LineSite]) -> str:
    words = []
    for s in sites:
        mark = (NOT_STMT if not s.is_stmt else "") + (REFUSED if s.status != STATUS_OK else "")
        words.append(f"{'?' if s.offset is None else s.offset}{mark}")
    return " ".join(words)


def listing_text(func: Function, primary: str, decl_line: int, sites: Sequence[LineSite]) -> str:
    """``probes --function F --lines``: like ``perf probe -L``, the function's own lines (from its declaration
    to its last line with code) with the probe offsets of each, then the lines of each inlined function."""
    own: Dict[int, List[LineSite]] = {}
    inlined: Dict[Tuple[str, str], Dict[int, List[LineSite]]] = {}
    for s in sites:
        if not s.inlined and s.file == primary:
            own.setdefault(s.line, []).append(s)
        else:
            key = (s.inlined[0] if s.inlined else "", s.file)
            inlined.setdefault(key, {}).setdefault(s.line, []).append(s)
    width = max([len(_offsets(v)) for v in own.values()] + [8])
    out = [f"<{func.name}@{primary}> kinst::{func.name}:OFFSET; {NOT_STMT} not is_stmt, {REFUSED} refused by kinst"]
    out += _numbered(primary, own, decl_line, width)
    for (name, file), by_line in sorted(inlined.items()):
        where = f"inlined {name}" if name else "code"
        out.append(f"<{where}@{file}>")
        out += _numbered(file, by_line, 0, width, every_line=False)
    return "\n".join(out)


def _numbered(path: str, by_line: Dict[int, List[LineSite]], first: int, width: int,
              every_line: bool = True) -> List[str]:
    """Lines of ``path``: numbered with their offsets where they have sites; with ``every_line`` and a
    readable source, the lines between too, unnumbered, as perf prints them."""
    if not by_line:
        return []
    text = _source(path)
    lines = sorted(by_line)
    lo = min(first, lines[0]) if first else lines[0]
    numbers = range(lo, lines[-1] + 1) if text is not None and every_line else lines
    out = []
    for n in numbers:
        src = text[n - 1] if text is not None and 0 < n <= len(text) else ""
        hits = by_line.get(n)
        label = f"{n:>7}" if hits else " " * 7
        out.append(f"{label}  {_offsets(hits) if hits else '':<{width}}  {src}".rstrip())
    return out


def inline_text(name: str, copies: Sequence[InlineCopy]) -> str:
    """``probes --inline``: a header, then each copy with its entry and return probes."""
    inlined = [c for c in copies if c.caller is not None]
    outs = [c for c in copies if c.caller is None]
    callers = len({c.caller for c in inlined})
    lines = [f"{name}: {len(inlined)} inlined cop{'ies' if len(inlined) != 1 else 'y'} in {callers} "
             f"function{'s' if callers != 1 else ''}, "
             f"{len(outs)} out-of-line definition{'s' if len(outs) != 1 else ''}"]
    for c in copies:
        ranges = ", ".join(f"{lo:#x}-{hi:#x}" for lo, hi in c.ranges)
        if c.caller is None:
            lines.append(f"out of line as {c.symbol} (fbt::{c.symbol}:entry and :return), ranges {ranges}")
            continue
        where = f"{c.call_file}:{c.call_line}" if c.call_file else "an unknown call site"
        lines.append(f"in {c.caller}, called at {where}, ranges {ranges}")
        for s in c.sites:
            lines.append(f"  {s.role:<7} {probe_name(s.function, s.offset):<32} {s.address:#x} "
                         f"{_verdict(s.status, s.kind, s.reason)}")
    return "\n".join(lines)


def vars_text(site: LineSite, variables: Sequence[Variable], readings: Sequence[Reading]) -> str:
    """``probes --vars``: the site's line as ``--line`` prints it, then one line per variable in scope: name, C
    type, what it is, and its value as D, or why it has none here."""
    where = f"{site.file}:{site.line}" if site.line else "(no line)"
    inl = f"  [inlined: {' < '.join(site.inlined)}]" if site.inlined else ""
    lines = [f"{probe_name(site.function, site.offset):<32} {site.address:#x} {where}  "
             f"{_verdict(site.status, site.kind, site.reason)}{inl}"]
    if not variables:
        lines.append("    (no variable is in scope here)")
    for v, r in zip(variables, readings):
        owner = f"{v.kind} of {v.function}" + (" (inlined)" if v.inlined else "")
        value = r.d if r.d else f"not available: {r.reason}"
        lines.append(f"    {v.name:<16} {v.ctype.name:<28} {owner:<34} {value}")
    return "\n".join(lines)
