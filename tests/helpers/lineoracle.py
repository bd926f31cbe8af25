"""The independent oracles for source lines and inlined copies: llvm-symbolizer and llvm-dwarfdump.

kinstkit reads DWARF with pyelftools into its own index; LLVM's tools read
it with LLVM's DWARF library.  ``symbolize`` asks ``llvm-symbolizer
--inlining --functions=short`` (functions by ``DW_AT_name``, as kinst's
inline tracing matches them) for the source line and the stack of inlined
functions at addresses; ``dwarfdump`` parses ``llvm-dwarfdump --debug-info``
for every ``DW_TAG_inlined_subroutine`` with its origin's name, its ranges
as listed and its call site, and for the units' compilation directories.

Paths are compared normalised (``a/../b``), as the tools join directories
without normalising.  ``same_path`` allows one known difference: LLVM 14
(like binutils' addr2line) prepends a relative ``DW_AT_comp_dir`` to a
DWARF 5 file in directory 0, which already is the compilation directory,
so Debian's packages (built with ``-fdebug-prefix-map=...=.``) read as
``./math/./math/x.c`` where the file is ``./math/x.c``; kinstkit follows
the DWARF 5 standard.
"""

from __future__ import annotations

import json
import posixpath
import re
import subprocess
from collections import Counter
from typing import Dict, FrozenSet, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from helpers.skips import require_tool

WHY = "the independent oracle for source lines and inlined copies"


class Frame(NamedTuple):
    """One frame of llvm-symbolizer's inlining stack, innermost first."""

    function: str
    file: str  # normalised; "" when unknown
    line: int  # 0 when unknown


def symbolize(obj: str, addresses: Sequence[int]) -> Dict[int, List[Frame]]:
    """llvm-symbolizer --inlining on ``addresses`` of ``obj`` (which finds its debug file itself)."""
    tool = require_tool("llvm-symbolizer", "llvm", WHY)
    out: Dict[int, List[Frame]] = {}
    for i in range(0, len(addresses), 200_000):
        chunk = addresses[i : i + 200_000]
        proc = subprocess.run([tool, "--inlining", "--functions=short", "--output-style=JSON", f"--obj={obj}"],
                              input="\n".join(hex(a) for a in chunk), capture_output=True, text=True, check=True)
        for line in proc.stdout.splitlines():
            rec = json.loads(line)
            frames = [Frame(s["FunctionName"], _norm(s["FileName"]), s["Line"]) for s in rec["Symbol"]]
            out[int(rec["Address"], 16)] = frames
    assert len(out) == len(set(addresses)), "llvm-symbolizer skipped addresses"
    return out


def _norm(path: str) -> str:
    return "" if path in ("", "??") else posixpath.normpath(path)


class Inlined(NamedTuple):
    """One DW_TAG_inlined_subroutine as llvm-dwarfdump prints it."""

    name: str
    ranges: Tuple[Tuple[int, int], ...]  # as listed
    call_file: Optional[str]
    call_line: Optional[int]


_DIE = re.compile(r"^0x[0-9a-f]+:\s+(DW_TAG_\w+|NULL)", re.M)
_LOW = re.compile(r"DW_AT_low_pc\s+\((0x[0-9a-f]+)\)")
_HIGH = re.compile(r"DW_AT_high_pc\s+\((0x[0-9a-f]+)\)")
_RANGE = re.compile(r"\[(0x[0-9a-f]+), (0x[0-9a-f]+)\)")
_CALL_FILE = re.compile(r'DW_AT_call_file\s+\("([^"]*)"\)')
_CALL_LINE = re.compile(r"DW_AT_call_line\s+\((\d+)\)")


class Dump(NamedTuple):
    """What llvm-dwarfdump says of a file's DWARF."""

    inlined: List[Inlined]
    comp_dirs: FrozenSet[str]  # every unit's DW_AT_comp_dir, as written


_COMP_DIR = re.compile(r'DW_AT_comp_dir\s+\("([^"]*)"\)')


_NAME = re.compile(r'DW_AT_name\s+\("([^"]*)"\)')
_REF = re.compile(r"DW_AT_(?:abstract_origin|specification)\s+\((0x[0-9a-f]+)")


def dwarfdump(path: str) -> Dump:
    """Every DW_TAG_inlined_subroutine of ``path``'s DWARF and the units' compilation directories.

    An inlined copy is named by the ``DW_AT_name`` its origin chain ends at,
    read from the dump itself (the name llvm-dwarfdump quotes beside a
    reference may be the linkage name).
    """
    tool = require_tool("llvm-dwarfdump", "llvm", WHY)
    proc = subprocess.run([tool, "--debug-info", path], capture_output=True, text=True, check=True)
    text = proc.stdout
    starts = [m for m in _DIE.finditer(text)]
    names: Dict[int, str] = {}
    refs: Dict[int, int] = {}
    copies = []
    for m, nxt in zip(starts, starts[1:] + [None]):
        block = text[m.end() : nxt.start() if nxt else len(text)]
        offset = int(m.group(0).split(":")[0], 16)
        name, ref = _NAME.search(block), _REF.search(block)
        if name:
            names[offset] = name.group(1)
        elif ref:
            refs[offset] = int(ref.group(1), 16)
        if m.group(1) == "DW_TAG_inlined_subroutine":
            copies.append((block, int(ref.group(1), 16) if ref else None))

    def resolve(off: Optional[int]) -> str:
        for _ in range(16):
            if off is None:
                return ""
            if off in names:
                return names[off]
            off = refs.get(off)
        return ""

    out = []
    for block, origin in copies:
        if "DW_AT_ranges" in block:
            ranges = tuple((int(a, 16), int(b, 16)) for a, b in _RANGE.findall(block.split("DW_AT_ranges", 1)[1]))
        else:
            low, high = _LOW.search(block), _HIGH.search(block)
            ranges = ((int(low.group(1), 16), int(high.group(1), 16)),) if low and high else ()
        cf, cl = _CALL_FILE.search(block), _CALL_LINE.search(block)
        out.append(Inlined(resolve(origin), ranges, _norm(cf.group(1)) if cf else None,
                           int(cl.group(1)) if cl else 0))
    return Dump(out, frozenset(_COMP_DIR.findall(text)))


class DecodedRow(NamedTuple):
    """One row of ``objdump --dwarf=decodedline``: binutils' own reading of the line table."""

    name: str  # the file table's name for the row's file (objdump prints the entry, not the whole path)
    line: int
    view: int  # binutils' view number: 0 where the address advances, +1 per row at the same address
    stmt: bool


_DECODED = re.compile(r"^(\S+)\s+(\d+)\s+(0x[0-9a-f]+)\s*(\d*)\s*(x?)\s*$")


def decoded_lines(path: str) -> Dict[int, List[DecodedRow]]:
    """Every row of ``path``'s line tables by address, as binutils' objdump decodes them (a third reader of
    the same DWARF, independent of pyelftools and of LLVM): the rows a site with no bytes of its own stands
    on, and their views, are held to it."""
    tool = require_tool("objdump", "binutils", WHY)
    proc = subprocess.run([tool, "--wide", "--dwarf=decodedline", path], capture_output=True, text=True, check=True)
    out: Dict[int, List[DecodedRow]] = {}
    for line in proc.stdout.splitlines():
        m = _DECODED.match(line)
        if m:
            out.setdefault(int(m.group(3), 16), []).append(
                DecodedRow(m.group(1), int(m.group(2)), int(m.group(4) or 0), m.group(5) == "x"))
    return out


def same_path(ours: Optional[str], theirs: Optional[str], comp_dirs: FrozenSet[str]) -> bool:
    """``theirs`` (an LLVM tool's) names ``ours``: equal, or with a relative compilation directory prepended
    once more (see the module docstring)."""
    if ours == theirs:
        return True
    if not ours or not theirs or ours.startswith("/"):
        return False
    return any(not d.startswith("/") and posixpath.normpath(posixpath.join(d, ours)) == theirs for d in comp_dirs)


def in_code(ranges: Iterable[Tuple[int, int]], code: Sequence[Tuple[int, int]]) -> Tuple[Tuple[int, int], ...]:
    """The ranges that lie in executable sections: what the linker kept."""
    return tuple(r for r in ranges if r[0] <= r[1] and any(a <= r[0] and r[1] <= b for a, b in code))


def multiset_difference(ours: Iterable, theirs: Iterable) -> Tuple[Counter, Counter]:
    """(only ours, only theirs), as multisets."""
    a, b = Counter(ours), Counter(theirs)
    return a - b, b - a


class Agreement(NamedTuple):
    """How kinstkit's answers for one image compare with the oracles'."""

    addresses: int  # instruction addresses checked against llvm-symbolizer
    sites: int  # --line sites checked against llvm-symbolizer
    lines: int  # distinct FILE:LINE queried that have code (lines over padding alone answer "no code")
    copies: int  # inlined copies checked against llvm-dwarfdump
    disagreements: List[str]  # one line each, the first few of every kind


def agreement(image: str, debug_file: Optional[str] = None) -> Agreement:
    """Every instruction of every function of ``image``, every site of every line with code and every
    inlined copy, against llvm-symbolizer and llvm-dwarfdump."""
    from generator.analysis.indexcache import open_index
    from generator.analysis.inlines import inline_copies
    from generator.analysis.lines import Verdicts, line_sites
    from generator.common.errors import UserError
    from generator.image.elf import KernelImage

    img = KernelImage.open(image)
    index, info = open_index(img)
    dump = dwarfdump(info.path)
    verdicts = Verdicts(img, "any")
    bad: List[str] = []

    def disagree(kind: str, text: str) -> None:
        if sum(1 for b in bad if b.startswith(kind)) < 5:
            bad.append(f"{kind}: {text}")
        else:
            bad.append(kind)

    addresses = []
    for f in img.functions():
        rep, _ = verdicts.report(f)
        addresses += [p.address for p in rep.probes]
    lines = sorted({(k >> 32, k & 0xFFFFFFFF) for k in index.line_keys})
    sites = []
    padding = 0  # lines whose rows cover only padding, or own no bytes where gdb breaks on none: "no code"
    for fid, line in lines:
        try:
            sites += line_sites(img, index, f"{index.files[fid]}:{line}", verdicts=verdicts)
        except UserError:
            rows = [r for r in index.rows_of_line(fid, line) if index.owns(r)]  # the line's own bytes
            if any(img.function_at(index.row_addr[r]) or index.sub_at(index.row_addr[r]) for r in rows):
                disagree("--line no code", f"{index.files[fid]}:{line} has code but no site")
            padding += 1
    frames = symbolize(image, sorted(set(addresses) | {s.address for s in sites}))

    def inlined_names(fr: List[Frame]) -> List[str]:
        return [x.function for x in fr[:-1]]

    for a in addresses:
        fr = frames[a]
        where = index.line_of(a)
        ours = (where[0], where[1]) if where and where[1] else ("", 0)
        theirs = (fr[0].file, fr[0].line) if fr[0].line else ("", 0)
        if ours[1] != theirs[1] or not same_path(ours[0], theirs[0], dump.comp_dirs):
            disagree("line", f"{a:#x}: ours {ours}, llvm-symbolizer {theirs}")
        chain = index.inline_chain(a)
        names = [index.names[index.inl_name[i]] for i in chain]
        if names != inlined_names(fr):
            disagree("inlined", f"{a:#x}: ours {names}, llvm-symbolizer {inlined_names(fr)}")
            continue
        for k, i in enumerate(chain):
            call = (index.file_name(index.inl_call_file[i]), index.inl_call_line[i])
            if call[1] != fr[k + 1].line or not same_path(call[0], fr[k + 1].file, dump.comp_dirs):
                disagree("call site", f"{a:#x}: ours {call}, llvm-symbolizer {fr[k + 1]}")
                break
    covered = set()
    decoded = decoded_lines(info.path)
    for s in sites:
        fr = frames[s.address]
        covered.add((s.file, s.line))
        rows = [r for r in decoded.get(s.address, []) if r.line == s.line and s.file.endswith("/" + r.name)]
        if not any(r.view == s.view for r in rows) or any(r.stmt for r in rows) != s.is_stmt:
            disagree("--line view", f"{s.file}:{s.line} site {s.address:#x} view {s.view} is_stmt {s.is_stmt}: "
                                    f"objdump's rows there {decoded.get(s.address)}")
        if not s.owns:  # the line has no bytes here: the last row at the address, another line's, owns them
            last = decoded[s.address][-1] if decoded.get(s.address) else None
            if last is None or (last.line == s.line and s.file.endswith("/" + last.name)):
                disagree("--line owns", f"{s.file}:{s.line} site {s.address:#x} owns the instruction: objdump's "
                                        f"last row there is {last}")
            continue
        if s.line != fr[0].line or not same_path(s.file, fr[0].file, dump.comp_dirs):
            disagree("--line", f"{s.file}:{s.line} site {s.address:#x}: llvm-symbolizer says {fr[0]}")
        if list(s.inlined) != inlined_names(fr):
            disagree("--line inlined", f"{s.file}:{s.line} site {s.address:#x}: ours {list(s.inlined)}, "
                                       f"llvm-symbolizer {inlined_names(fr)}")
    for a in addresses:  # every line an instruction is has a site
        where = index.line_of(a)
        if where and where[1] and (where[0], where[1]) not in covered:
            disagree("--line missing", f"{where[0]}:{where[1]} (at {a:#x}) has no site")

    code = sorted((s.addr, s.addr + s.size) for s in img.sections if s.executable)
    theirs = [(i.name, in_code(i.ranges, code), i.call_file, i.call_line) for i in dump.inlined]
    theirs = [t for t in theirs if t[1]]
    ours = []
    for name in sorted({t[0] for t in theirs}):
        for c in inline_copies(img, index, name):
            if c.caller is None:
                continue
            ours.append((name, c.ranges, c.call_file, c.call_line))
            entry = c.sites[0]
            if entry.address != c.ranges[0][0]:
                disagree("entry", f"{name} in {c.caller}: entry {entry.address:#x}, first range {c.ranges[0]}")
            for (low, high), ret in zip([r for r in c.ranges if r[0] < r[1]], c.sites[1:]):
                rep, probes = verdicts.report(img.function_at(low))
                last = max(a for a in probes if low <= a < high)
                if ret.address != last:
                    disagree("return", f"{name} in {c.caller}: return {ret.address:#x}, last instruction {last:#x}")
    only_ours, only_theirs = multiset_difference(
        [(n, r, cl) for n, r, _, cl in ours], [(n, r, cl) for n, r, _, cl in theirs])
    for t in list(only_ours)[:5]:
        disagree("copy", f"only kinstkit has {t}")
    for t in list(only_theirs)[:5]:
        disagree("copy", f"only llvm-dwarfdump has {t}")
    files_ours = sorted((n, r, f) for n, r, f, _ in ours)
    files_theirs = sorted((n, r, f) for n, r, f, _ in theirs)
    if len(files_ours) == len(files_theirs):
        for a, b in zip(files_ours, files_theirs):
            if a[:2] == b[:2] and not same_path(a[2], b[2], dump.comp_dirs):
                disagree("call file", f"{a[0]}: ours {a[2]}, llvm-dwarfdump {b[2]}")
    return Agreement(len(addresses), len(sites), len(lines) - padding, len(theirs), bad)
