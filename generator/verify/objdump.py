"""Decoder proof: compare our instruction walk with GNU objdump's.

capstone is our decoder of record, corrected in a few places (the ISA's
``decode``).  A bug in that walk would put probes in the middle of
instructions, so we check it against a decoder written by other people:
binutils' ``objdump`` for the image's ISA (``OracleQuirks.objdump``).
``verify_decoder()`` walks every function of an image with
``generator.analysis.probes.analyse`` and compares, function by function,

(a) the set of instruction start addresses inside ``[address, address+size)``;
(b) the target of every direct jmp/jcc/call/loop/jrcxz/xbegin.

objdump runs once per image (``-d -w -z --no-show-raw-insn``; ``-z`` so that
runs of zero bytes are decoded instead of elided as ``...``) and its output is
streamed one section at a time, so memory stays proportional to the largest
code section.  ``probes.analyse`` gives no ``target`` for loop/jrcxz/xbegin
(they are refused), so ours is read from capstone's operand for those.

ET_REL files: objdump prints each section from address 0, while the image reader
lays SHF_ALLOC sections out at synthetic addresses; objdump's addresses are
mapped by adding the section's synthetic address (sections matched by name and
order of appearance).  objdump does not apply relocations, so for a branch
whose displacement field carries one (``-r`` prints e.g.
``R_X86_64_PLT32 __fentry__-0x4``) the expected target is computed from the
relocation: ``S + A + 4`` for a rel32 field that ends the instruction (the
ISA's ``reloc_target_bias``: arm64's and riscv's branch fields give ``S + A``).  When
``S`` is undefined in the file we expect our ``target_symbol`` to read
``S+off`` with ``off = A + 4`` (so ``__fentry__-0x4`` is our ``__fentry__``);
when ``S`` is defined (objdump's own symbol table, ``-t``) we expect our
resolved ``target`` address.

Known differences, each handled narrowly and counted, never silently (the
ISA-specific ones are the ISA's ``OracleQuirks``; amd64's are described here):

- ``0f b9`` (ud1) and ``0f ff`` (ud0): objdump decodes them with a ModR/M
  byte, as the SDM says; capstone 5 does not, and amd64's decode corrects the
  length to agree.  No exception is made here: the oracle is what proves
  that correction.
- Undecodable bytes (data or padding inside a function): where the walks
  diverge, the divergent stretch up to the next common boundary is tolerated
  only if objdump calls some of it ``(bad)`` (objdump cannot decode it either),
  or if all of our instructions in it are ``(bad)`` (we refuse every one of
  them, so no probe can land there).  Each tolerated stretch is counted; the
  second kind is also noted with its bytes, since it is a capstone gap.
- Redundant REX prefixes (``4f 47 41 4d 53``): the CPU ignores a REX that
  another REX follows, and capstone decodes one instruction; objdump prints
  each ignored REX as a pseudo-instruction ``rex.WRXB``.  Tolerated only when
  our walk has exactly one instruction in the stretch and every objdump start
  in it but the last is such a lone REX.  The Intel SDM (vol. 2A, 2.2.1)
  settles who is right: one REX per instruction, immediately before the
  opcode, other placements ignored, and in 64-bit mode 40H-4FH "are not
  treated as individual instructions".  So a direct branch behind such REX
  bytes (``48 41 e8 rel32``, a 7-byte call) is compared with the branch
  objdump decoded after its lone REX lines.
- A prefixed ``(bad)`` (``repz (bad)``): objdump prints the prefixes it took
  before the opcode it could not decode; that is still its ``(bad)``, and
  the stretch is tolerated as above.  When our instruction there is refused
  too, the note says whose length we used (e.g. iced-x86's), not that
  capstone decoded it.
- Symbols inside a function: objdump restarts decoding at every symbol, so an
  inner label placed in the middle of an instruction (deliberately
  overlapping code: Linux's ``retbleed_untrain_ret`` runs ``test $0xcc,%bl``
  over the ``ret; int3`` of ``retbleed_return_thunk`` one byte in, and
  ``srso_untrain_ret`` a ``movabs`` whose immediate is ``srso_safe_ret``'s
  ``lea 8(%rsp),%rsp; ret``) cuts that instruction into pieces (``.byte
  0xf6``; ``rex.W``, ``.byte 0xb8``).  Tolerated when the symbol lies inside
  one of our instructions, objdump agreed with our starts before it, and its
  extra starts before the symbol are pieces of that instruction.
- Instructions objdump prints as one that the CPU runs as two
  (``OracleQuirks.fused``: amd64's ``fwait`` before an x87 instruction,
  ``9b db e3`` = fwait + fninit, printed ``finit``): tolerated when objdump
  has the first start alone and we have both.
- Functions whose bytes objdump does not disassemble (STT_FUNC in a section
  without SHF_EXECINSTR, which ``objdump -d`` skips) are skipped and counted.

Nothing else is excused: mnemonics are not compared (only boundaries and
targets matter for probe placement), but any other difference is a mismatch.
"""

from __future__ import annotations

import bisect
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from array import array
from dataclasses import dataclass, field
from typing import Dict, Iterable, Iterator, List, NamedTuple, Optional, Set, Tuple, Union

from ..common.errors import ClassifierError, UserError
from ..image.elf import Function, KernelImage, Section
from ..analysis.probes import analyse
from ..analysis.records import Probe
from ..isa.contract import BAD, OracleQuirks
from ..image import open_image

_STT_SECTION, _STT_FILE = 3, 4  # symbols that name no code address
_INSN = re.compile(r"^ *([0-9a-f]+):\t([^\t]*)(?:\t(.*))?$")
_RELOC_CONT = re.compile(r"^\t([0-9a-f]+): (R_\w+)\t(.*)$")
_RELOC_INLINE = re.compile(r"([0-9a-f]+): (R_\w+)\t([^\t]*)")
_SECTION = re.compile(r"^Disassembly of section (.*):$")
_SYMLINE = re.compile(r"^([0-9a-f]{16}) (.{7}) (\S+)\t([0-9a-f]+) (.*)$")
_HEX_TARGET = re.compile(r"^(?:0x)?([0-9a-f]+)$")
_SYM_ADDEND = re.compile(r"^(.*?)([+-]0x[0-9a-f]+)?$")


class Mismatch(NamedTuple):
    """One disagreement: where, what kind, both sides, and the bytes there."""

    function: str  # qualified name
    address: int
    offset: int  # from the function's start
    kind: str  # "boundary", "branch" or "classifier-error"
    ours: str
    objdump: str
    bytes: str  # hex, at most 16 bytes from ``address``

    def line(self) -> str:
        return (
            f"{self.function}+{self.offset:#x} ({self.address:#x}) {self.kind}: "
            f"ours {self.ours}; objdump {self.objdump}; bytes {self.bytes}"
        )


@dataclass(frozen=True)
class VerifyResult:
    """The outcome of one ``verify_decoder`` run; ``ok`` means no mismatch."""

    path: str
    functions: int  # functions compared
    instructions: int  # instruction starts compared (ours)
    branches: int  # direct branch targets compared
    mismatch_count: int
    mismatches: Tuple[Mismatch, ...]  # the first ``max_report``
    skipped_functions: int  # functions objdump did not disassemble
    tolerated_regions: int  # divergent stretches explained by a known difference
    tolerated: Tuple[Tuple[str, int], ...]  # (known difference, stretches)
    notes: Tuple[str, ...]
    seconds: float

    @property
    def ok(self) -> bool:
        return self.mismatch_count == 0

    def to_dict(self) -> dict:
        return {
            "path": self.path,
            "ok": self.ok,
            "functions": self.functions,
            "instructions": self.instructions,
            "branches": self.branches,
            "mismatch_count": self.mismatch_count,
            "mismatches": [m._asdict() for m in self.mismatches],
            "skipped_functions": self.skipped_functions,
            "tolerated_regions": self.tolerated_regions,
            "tolerated": dict(self.tolerated),
            "notes": list(self.notes),
            "seconds": round(self.seconds, 3),
        }

    def summary(self) -> str:
        verdict = "OK" if self.ok else f"FAILED: {self.mismatch_count} mismatches"
        return (
            f"{self.path}: {verdict}; {self.functions} functions, {self.instructions} instructions, "
            f"{self.branches} branch targets compared; {self.skipped_functions} functions skipped, "
            f"{self.tolerated_regions} stretches tolerated{_kinds(self.tolerated)}; {self.seconds:.1f}s"
        )


def _kinds(tolerated: Tuple[Tuple[str, int], ...]) -> str:
    return " (" + ", ".join(f"{k}: {n}" for k, n in tolerated) + ")" if tolerated else ""


# -- objdump's side ------------------------------------------------------------


@dataclass
class _ObjSection:
    """objdump's view of one code section, in objdump's own addresses."""

    name: str
    starts: array = field(default_factory=lambda: array("Q"))
    bad: Set[int] = field(default_factory=set)
    lone_prefix: Set[int] = field(default_factory=set)  # a prefix the CPU ignores, printed alone ("rex.WRXB")
    # address of a direct branch -> its raw target
    branches: Dict[int, int] = field(default_factory=dict)
    # address of the instruction -> [(field address, type, "sym+addend")]
    relocs: Dict[int, List[Tuple[int, str, str]]] = field(default_factory=dict)


class _MappedSection(NamedTuple):
    """An objdump section in our addresses (ET_REL: shifted by ``base``)."""

    raw: _ObjSection
    base: int
    starts: List[int]  # sorted, unique
    bad: Set[int]
    lone_prefix: Set[int]

    @classmethod
    def of(cls, sec: _ObjSection, base: int) -> "_MappedSection":
        starts = sorted({a + base for a in sec.starts})
        return cls(sec, base, starts, {a + base for a in sec.bad}, {a + base for a in sec.lone_prefix})


@dataclass
class _ObjSymbols:
    """objdump -t: name -> [(section name, value)]; section "*UND*" etc. kept."""

    by_name: Dict[str, List[Tuple[str, int]]] = field(default_factory=dict)


def _objdump_command(objdump: str, path: str, relocatable: bool) -> List[str]:
    exe = shutil.which(objdump)
    if exe is None:
        raise UserError(f"{objdump} not found; install binutils to verify the decoder")
    cmd = [exe, "-d", "-w", "-z", "--no-show-raw-insn"]
    if relocatable:
        # --special-syms: riscv's relocations name local labels (.L6) that -t alone leaves out.
        cmd += ["-r", "-t", "--special-syms"]
    return cmd + ["--", path]


def _objdump_lines(cmd: List[str]) -> Iterator[str]:
    """Stream objdump's stdout line by line; a failure is a UserError.

    stderr goes to a temporary file, not a pipe, so that a chatty objdump can
    never block on a full stderr pipe while we read stdout.
    """
    env = dict(os.environ, LC_ALL="C")
    with tempfile.TemporaryFile(mode="w+", errors="replace") as errfile:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=errfile, text=True, errors="replace", bufsize=1 << 20, env=env
        )
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                yield line.rstrip("\n")
        finally:
            proc.stdout.close()
            rc = proc.wait()
        errfile.seek(0)
        err = errfile.read()
    if rc != 0:
        first = (err.strip().splitlines() or [f"exit status {rc}"])[0]
        raise UserError(f"objdump failed on {cmd[-1]}: {first}")


def _objdump_stream(lines: Iterable[str], quirks: OracleQuirks) -> Iterator[Union[_ObjSymbols, _ObjSection]]:
    """Parse objdump's output: the symbol table (if any), then each section."""
    syms: Optional[_ObjSymbols] = None
    sec: Optional[_ObjSection] = None
    last: Optional[int] = None
    for line in lines:
        if sec is not None:
            m = _INSN.match(line)
            if m:
                last = _add_insn(sec, m, quirks)
                continue
            m = _RELOC_CONT.match(line)
            if m and last is not None:
                sec.relocs.setdefault(last, []).append((int(m.group(1), 16), m.group(2), m.group(3)))
                continue
        m = _SECTION.match(line)
        if m:
            if syms is not None:
                yield syms
                syms = None
            if sec is not None:
                yield sec
            sec, last = _ObjSection(m.group(1)), None
            continue
        if sec is None:
            if line == "SYMBOL TABLE:":
                syms = _ObjSymbols()
            elif syms is not None:
                _add_symbol(syms, line)
    if syms is not None:
        yield syms
    if sec is not None:
        yield sec


def _is_bad(text: str, quirks: OracleQuirks) -> bool:
    """objdump's ``(bad)``, also behind the prefixes it took first (``repz (bad)``)."""
    words = text.split()
    while words and words[0] in quirks.prefix_words:
        words = words[1:]
    return bool(words) and words[0].startswith(BAD)


def _add_insn(sec: _ObjSection, m: "re.Match[str]", quirks: OracleQuirks) -> int:
    addr = int(m.group(1), 16)
    text, relocs = m.group(2), m.group(3)
    if quirks.insn_text is not None:  # tabs between mnemonic, operands, comments and relocations
        text, relocs = quirks.insn_text(m.group(2) + ("\t" + m.group(3) if m.group(3) else ""))
    sec.starts.append(addr)
    if _is_bad(text, quirks):
        sec.bad.add(addr)
    elif quirks.lone_prefix is not None and quirks.lone_prefix(text):
        sec.lone_prefix.add(addr)
    else:
        target = _branch_operand(text, quirks)
        if target is not None:
            sec.branches[addr] = target
    if relocs:
        for rm in _RELOC_INLINE.finditer(relocs):
            sec.relocs.setdefault(addr, []).append((int(rm.group(1), 16), rm.group(2), rm.group(3)))
    return addr


def _branch_operand(text: str, quirks: OracleQuirks) -> Optional[int]:
    """objdump's direct branch target; None for any other instruction,
    indirect branches included."""
    if quirks.branch_target is not None:
        return quirks.branch_target(text)
    words = text.split()
    while words and words[0] in quirks.prefix_words:
        words = words[1:]
    if len(words) < 2:
        return None
    mnem = words[0].split(",")[0]  # je,pt
    if not quirks.branch_mnemonic(mnem):
        return None
    m = _HEX_TARGET.match(words[1])
    return int(m.group(1), 16) if m else None


def _add_symbol(syms: _ObjSymbols, line: str) -> None:
    m = _SYMLINE.match(line)
    if not m:
        return
    name = m.group(5)
    for vis in (".hidden ", ".protected ", ".internal "):
        if name.startswith(vis):
            name = name[len(vis) :]
    syms.by_name.setdefault(name, []).append((m.group(3), int(m.group(1), 16)))


# -- our side -----------------------------------------------------------------


def _our_branch(p: Probe, quirks: OracleQuirks) -> Optional[Tuple[str, Union[int, str]]]:
    """("addr", target) or ("sym", "S+off") for a direct branch, else None."""
    if p.target is not None:
        return ("addr", p.target)
    if p.target_symbol is not None:
        return ("sym", p.target_symbol)
    base = p.mnemonic.rsplit(" ", 1)[-1]
    if base in quirks.no_target_branches:
        try:
            return ("addr", int(p.operands, 16))
        except ValueError:
            return ("addr?", p.operands)
    return None


def _fmt_branch(b) -> str:
    if b is None:
        return "no direct branch"
    kind, value = b
    if kind == "addr":
        return f"target {value:#x}"
    if kind == "addrs":
        return "target " + " or ".join(f"{v:#x}" for v in sorted(value))
    return f"target {value}"


# -- comparison ---------------------------------------------------------------


class _Checker:
    """Accumulates counts and mismatches over the sections of one image."""

    def __init__(self, img: KernelImage, max_report: int, progress: bool):
        self.img = img
        self.quirks = img.isa.oracle
        self.rel = img.e_type == "ET_REL"
        self.max_report = max_report
        self.progress = progress
        self.functions = 0
        self.instructions = 0
        self.branches = 0
        self.mismatch_count = 0
        self.mismatches: List[Mismatch] = []
        self.tolerated: Dict[str, int] = {}
        self.notes: List[str] = []
        self.symbols = _ObjSymbols()
        self.skipped = 0
        self.done = 0
        self.total = len(img.functions())
        self._sec_addrs = self._section_addresses()
        self._labels = self._symbol_addresses_in_code()

    def _symbol_addresses_in_code(self) -> Set[int]:
        """Every address a symbol names in an executable section: where objdump restarts decoding."""
        out: Set[int] = set()
        for sym in self.img.symbols():
            if sym.type in (_STT_SECTION, _STT_FILE):
                continue
            sec = self.img.section_by_index(sym.shndx)
            if sec is not None and sec.executable:
                out.add(sym.value + (sec.addr if self.rel else 0))
        return out

    def _section_addresses(self) -> Dict[str, List[int]]:
        """Section name -> synthetic addresses (a name may repeat in ET_REL)."""
        out: Dict[str, List[int]] = {}
        for s in sorted(self.img.sections, key=lambda s: s.index):
            out.setdefault(s.name, []).append(s.addr)
        return out

    def mismatch(self, func: Function, addr: int, kind: str, ours: str, theirs: str, length: int = 16) -> None:
        self.mismatch_count += 1
        if len(self.mismatches) < self.max_report:
            self.mismatches.append(
                Mismatch(func.qualified, addr, addr - func.address, kind, ours, theirs, self._hex(addr, length))
            )

    def _hex(self, addr: int, length: int) -> str:
        s = self.img.section_at(addr)
        if s is None:
            return ""
        n = max(1, min(length, 16, s.addr + s.size - addr))
        try:
            return self.img.read(addr, n).hex(" ")
        except UserError:
            return ""

    def note(self, text: str) -> None:
        if len(self.notes) < 50:
            self.notes.append(text)

    def skip(self, text: str, count: int = 1) -> None:
        """Functions left uncompared: counted and named, never silent."""
        self.skipped += count
        self.note(text)

    def tick(self, n: int) -> None:
        self.done += n
        if self.progress:
            sys.stderr.write(f"\r{self.done}/{self.total} functions")
            sys.stderr.flush()

    # -- one section --

    def section(self, ours: Section, theirs: _ObjSection, funcs: List[Function]) -> None:
        view = _MappedSection.of(theirs, ours.addr if self.rel else 0)
        for f in funcs:
            self.function(f, view)
        self.tick(len(funcs))

    def function(self, f: Function, view: "_MappedSection") -> None:
        try:
            rep = analyse(self.img, f)
        except ClassifierError as e:
            self.mismatch(f, f.address, "classifier-error", str(e), "-")
            return
        except UserError as e:
            self.skip(f"{f.qualified}: skipped: {e}")
            return
        lo = bisect.bisect_left(view.starts, f.address)
        hi = bisect.bisect_left(view.starts, f.address + f.size)
        objs = view.starts[lo:hi]
        if not objs:
            self.skip(f"{f.qualified}: objdump printed no instruction in it; skipped")
            return
        self.functions += 1
        probes = {p.address: p for p in rep.probes}
        self.instructions += len(probes)
        self._boundaries(f, probes, objs, view)
        for addr in probes.keys() & set(objs):
            self._branch(f, probes[addr], addr - view.base, view.raw, view.base)

    def _boundaries(self, f: Function, probes: Dict[int, Probe], objs: List[int], view: "_MappedSection") -> None:
        """Compare starts; judge each stretch between common starts where they differ."""
        ours = sorted(probes)
        common = sorted(set(ours) & set(objs))
        if len(common) == len(ours) == len(objs):
            return
        for lo, hi in _divergent_stretches(ours, objs, common, f.address, f.address + f.size):
            o = [a for a in ours if lo <= a < hi]
            t = [a for a in objs if lo <= a < hi]
            why = self._tolerated(f, lo, hi, o, t, probes, view)
            if why:
                self.tolerated[why] = self.tolerated.get(why, 0) + 1
            else:
                self.mismatch(f, lo, "boundary", _offsets(o, f.address), _offsets(t, f.address), hi - lo)

    def _tolerated(
        self, f: Function, lo: int, hi: int, o: List[int], t: List[int], probes: Dict[int, Probe], view: "_MappedSection"
    ) -> str:
        """The known difference that explains a divergent stretch, or ""."""
        where = f"{f.qualified}+{lo - f.address:#x}"
        if any(a in view.bad for a in t):
            first = probes.get(t[0] if t[0] in probes else lo)
            if first is not None and first.mnemonic == BAD:
                how = f" ({first.operands})" if first.operands else ""
                self.note(f"{where}: objdump cannot decode {self._hex(lo, hi - lo)}; capstone cannot either, "
                          f"so it is refused{how}")
            elif any(probes[a].mnemonic != BAD for a in o):
                self.note(f"{where}: objdump cannot decode {self._hex(lo, hi - lo)}; capstone can")
            return "objdump (bad)"
        if o and all(probes[a].mnemonic == BAD for a in o):
            self.note(f"{where}: capstone cannot decode {self._hex(lo, hi - lo)}; objdump can")
            return "capstone (bad)"
        if o == [lo] and len(t) > 1 and all(a in view.lone_prefix for a in t[:-1]):
            return self.quirks.lone_prefix_note
        if self._restarted_at_inner_symbol(f, o, t, probes):
            return "objdump restarts at a symbol inside an instruction"
        n = self.quirks.fused(self._bytes(lo, hi - lo))
        if n and t == [lo] and o == [lo, lo + n]:
            return self.quirks.fused_note
        return ""

    def _restarted_at_inner_symbol(self, f: Function, o: List[int], t: List[int], probes: Dict[int, Probe]) -> bool:
        """objdump restarted at a symbol that lies inside one of our instructions: it agreed with our
        starts before that instruction, printed the instruction's bytes before the symbol as pieces
        (``rex.W``, ``.byte 0xb8``) and decoded on from the symbol."""
        inner = [a for a in t if a in self._labels and a not in probes and a > f.address]
        if not inner:
            return False
        label = inner[0]
        ours = [a for a in o if a < label]
        theirs = [a for a in t if a < label]
        if not ours or not set(ours) <= set(theirs):
            return False
        cut = ours[-1]
        return cut + probes[cut].length > label and all(a > cut for a in set(theirs) - set(ours))

    def _bytes(self, addr: int, length: int) -> bytes:
        try:
            return self.img.read(addr, length)
        except UserError:
            return b""

    def _branch(self, f: Function, p: Probe, raw_addr: int, theirs: _ObjSection, base: int) -> None:
        ours = _our_branch(p, self.quirks)
        # Our instruction's start is objdump's lone REX: the instruction is the one it decoded after them.
        end = raw_addr + p.length
        while raw_addr in theirs.lone_prefix and raw_addr + 1 < end:
            raw_addr += 1
        if raw_addr in theirs.branches:
            expected = self._expected(raw_addr, theirs.branches[raw_addr], theirs.relocs.get(raw_addr, ()), base)
        else:
            expected = None
        if ours is None and expected is None:
            return
        self.branches += 1
        if not _branch_equal(ours, expected):
            self.mismatch(f, p.address, "branch", _fmt_branch(ours), _fmt_branch(expected), p.length)

    def _expected(self, raw_addr: int, raw_target: int, relocs, base: int):
        """objdump's target, mapped to our addresses, or from the relocation."""
        for fld, rtype, text in relocs:
            if fld < raw_addr:
                continue
            m = _SYM_ADDEND.match(text)
            sym, addend = m.group(1), int(m.group(2) or "0", 16)
            if rtype not in self.quirks.pcrel32_relocs:
                return ("reloc", f"{rtype} {text}")
            off = addend + self.quirks.reloc_target_bias
            addrs = self._symbol_addresses(sym)
            if addrs:
                return ("addrs", {a + off for a in addrs})
            return ("sym", sym + (f"{off:+#x}" if off else ""))
        return ("addr", raw_target + base)

    def _symbol_addresses(self, sym: str) -> Set[int]:
        """Where a defined symbol lands in our layout (all candidates)."""
        out: Set[int] = set()
        for secname, value in self.symbols.by_name.get(sym, ()):
            if secname == "*ABS*":
                out.add(value)
            elif not secname.startswith("*"):
                out.update(a + value for a in self._sec_addrs.get(secname, ()))
        if not out and sym in self._sec_addrs:  # a section symbol objdump did not list
            out.update(self._sec_addrs[sym])
        return out

    def result(self, path: str, seconds: float) -> VerifyResult:
        return VerifyResult(
            path=path,
            functions=self.functions,
            instructions=self.instructions,
            branches=self.branches,
            mismatch_count=self.mismatch_count,
            mismatches=tuple(self.mismatches),
            skipped_functions=self.skipped,
            tolerated_regions=sum(self.tolerated.values()),
            tolerated=tuple(sorted(self.tolerated.items())),
            notes=tuple(self.notes),
            seconds=seconds,
        )


def _branch_equal(ours, expected) -> bool:
    if ours is None or expected is None:
        return False
    kind, value = expected
    if kind == "addrs":
        return ours[0] == "addr" and ours[1] in value
    return ours == expected


def _offsets(addrs: List[int], base: int) -> str:
    if not addrs:
        return "no instruction start"
    shown = ", ".join(f"+{a - base:#x}" for a in addrs[:8])
    return "starts " + shown + (" ..." if len(addrs) > 8 else "")


def _divergent_stretches(ours: List[int], objs: List[int], common: List[int], start: int, end: int) -> Iterator[Tuple[int, int]]:
    """[lo, hi) stretches between consecutive common starts where the walks differ."""
    only = sorted(set(ours).symmetric_difference(objs))
    i = 0
    while i < len(only):
        a = only[i]
        k = bisect.bisect_right(common, a)
        lo = common[k - 1] if k > 0 else start
        hi = common[k] if k < len(common) else end
        yield lo, hi
        while i < len(only) and only[i] < hi:
            i += 1


# -- the entry points ---------------------------------------------------------


def verify_decoder(image_path: str, *, max_report: int = 20, progress: bool = False) -> VerifyResult:
    """Compare our decoder with objdump on every function of ``image_path``."""
    t0 = time.monotonic()
    img = open_image(image_path)
    if not img.symbols():
        raise UserError(f"{image_path}: no symbol table (stripped image?); nothing to verify")
    checker = _Checker(img, max_report, progress)
    if not img.functions():
        checker.note("no function symbols (a data-only image); nothing to compare")
    by_section = _functions_by_section(img)
    ours_by_name = _sections_by_name(img)
    seen: Dict[str, int] = {}
    command = _objdump_command(checker.quirks.objdump, image_path, checker.rel)
    for item in _objdump_stream(_objdump_lines(command), checker.quirks):
        if isinstance(item, _ObjSymbols):
            checker.symbols = item
            continue
        n = seen.get(item.name, 0)
        seen[item.name] = n + 1
        cands = ours_by_name.get(item.name, [])
        if n >= len(cands):
            checker.note(f"objdump section {item.name} #{n + 1} has no allocated section of ours")
            continue
        sec = cands[n]
        checker.section(sec, item, by_section.pop(sec.index, []))
    _note_skipped(checker, by_section, img)
    if progress:
        sys.stderr.write("\n")
    return checker.result(image_path, time.monotonic() - t0)


def _functions_by_section(img: KernelImage) -> Dict[int, List[Function]]:
    out: Dict[int, List[Function]] = {}
    for f in img.functions():
        s = img.section_at(f.address)
        out.setdefault(s.index if s else -1, []).append(f)
    return out


def _sections_by_name(img: KernelImage) -> Dict[str, List[Section]]:
    out: Dict[str, List[Section]] = {}
    for s in sorted(img.sections, key=lambda s: s.index):
        out.setdefault(s.name, []).append(s)
    return out


def _note_skipped(checker: _Checker, left: Dict[int, List[Function]], img: KernelImage) -> None:
    """Functions in sections objdump never printed: count and name them."""
    for index, funcs in sorted(left.items()):
        sec = img.section_by_index(index)
        name = sec.name if sec else "(no section)"
        why = "not executable" if sec is not None and not sec.executable else "not disassembled by objdump"
        checker.skip(f"{len(funcs)} functions in {name} skipped: {why} (e.g. {funcs[0].qualified})", len(funcs))
        checker.tick(len(funcs))
