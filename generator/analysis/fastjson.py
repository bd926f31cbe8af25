"""Whole-image per-instruction JSON, at objdump's pace.

``probes --all --json`` prints every instruction of every function with its
verdict and kinst metadata -- millions of objects for a kernel.  Built the
obvious way (a ``Probe`` per instruction, a dict, ``json.dumps``) that costs
about ten microseconds an instruction.  This writer gives the same bytes as
``report.function_json(analyse(...))`` (the tests hold the two equal on real
images) from the same capstone walk, but classifies each distinct
instruction encoding once: a verdict depends on the bytes alone, except a
direct branch's target and operand text, which depend on the address and
are done per instruction.  Everything else is pasted from JSON fragments
made the first time the bytes were seen.
"""

from __future__ import annotations

import importlib
import json
import os
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from .exclusions import excluded, for_image
from .probes import MAX_INSN, code_runs, function_code, function_reason, refused_regions, reloc_target
from .records import KIND_SKIP, STATUS_OK, STATUS_SKIP
from ..image.elf import Function, KernelImage

_dumps = json.dumps
_quote = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]  # json.dumps of a str, in C


def _q(text: str) -> str:
    """``json.dumps(text)``, quickly for the plain ASCII text capstone prints."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'
    return _dumps(text)


class _Seen(NamedTuple):
    """What one instruction encoding always gets."""

    status: str
    reason: str
    kind: str
    md: str  # the metadata fields as JSON, without braces
    text: str  # "bytes":..,"mnemonic":..,"operands":.., or "" when the operands depend on the address
    delta: Optional[int]  # a direct branch's target minus its address


class ImageJson:
    """Formats the functions of one image; one per worker, its cache reused across functions.

    Where the ISA's accelerator has a native writer (amd64's ``kk_json.c``:
    capstone and the same rules, in C), a function goes to it first; it hands back any
    function it is not sure of, and the tests hold its bytes equal to these.
    """

    def __init__(self, img: KernelImage, rule: str):
        self.img = img
        self.isa = img.isa
        self.rule = rule
        self.seen: Dict[bytes, _Seen] = {}
        self.native = _native_writer(img)
        self.prologue_json = _dumps(f"function refused: {self.isa.prologue_reasons[rule]}")

    def _native(self, func: Function, code: bytes) -> Optional[bytes]:
        reason = excluded(func.name, self.isa.name, for_image(self.img))
        got = self.native.probes(code, func.size, func.address, _dumps(f"function refused: {reason}") if reason else None,
                                 self.rule == "first", self.prologue_json)
        if got is None:
            return None
        probes, eligible = got
        if not reason and not eligible:
            reason = self.isa.prologue_reasons[self.rule]
        return b"".join(((_head(func) + _verdict(reason, "")).encode(), probes, b"]}"))

    def write(self, funcs: Sequence[Function], fd: int) -> None:
        """Every function's line, newline-terminated, to ``fd``: through the native writer's own buffer where
        there is one (a kernel's records never become Python objects), else as ``function_bytes``."""
        if self.native is None:
            os.write(fd, b"".join(self.function_bytes(f) + b"\n" for f in funcs))  # one chunk: small enough
            return
        isa, rule, native = self.isa, self.rule, self.native
        md_excluded = for_image(self.img)
        chunk = native.chunk(rule == "first", _verdict("", ""), _verdict(isa.prologue_reasons[rule], ""),
                             self.prologue_json)
        funcs = list(funcs)
        # Each run of functions in one section is one slice of the file in the chunk's buffer.
        where: Dict[int, Tuple[int, int]] = {}
        for run, code, first in code_runs(self.img, funcs):
            base = chunk.add_code(code)
            for k in run:
                off = funcs[k].address - first
                where[k] = (base + off, len(code) - off)
        try:
            for k, f in enumerate(funcs):
                start, avail = where.get(k) or self._lone(chunk, f)
                reason = excluded(f.name, isa.name, md_excluded)
                chunk.add(start, min(avail, f.size + MAX_INSN), f.size, f.address, _head(f),
                          _verdict(reason, "") if reason else None,
                          _quote(f"function refused: {reason}") if reason else None)
            chunk.seal()
            k = 0
            while k < len(funcs):
                k = native.emit_many(fd, chunk, k)
                if k < len(funcs):
                    native.put(fd, self._python(funcs[k]).encode() + b"\n")
                    k += 1
            native.flush(fd)
        except BaseException:
            native.discard()
            raise

    def _lone(self, chunk, func: Function) -> Tuple[int, int]:
        """A function in no run (it does not fit its section): its own bytes, as ``function_code`` reads them
        (and says what is wrong with it)."""
        code = function_code(self.img, func)
        return chunk.add_code(code), len(code)

    def function_bytes(self, func: Function) -> bytes:
        """``function``'s line as bytes: the native writer's are written out without a round trip through str."""
        if self.native is not None:
            text = self._native(func, function_code(self.img, func))
            if text is not None:
                return text
        return self._python(func).encode()

    def function(self, func: Function) -> str:
        """The function's line: its record and every instruction's."""
        return self.function_bytes(func).decode()

    def _classify(self, b: bytes, address: int, mnem: str, ops: str) -> _Seen:
        v = self.isa.classify(b, address, mnem, ops)
        md = _dumps(v.md.to_json(), separators=(",", ":"))[1:-1]
        delta = None if v.target is None else (v.target - address) & 0xFFFFFFFFFFFFFFFF
        text = "" if delta is not None else (
            f'"bytes":"{b.hex()}","mnemonic":{_q(mnem)},"operands":{_q(ops)}')
        seen = _Seen(v.status, v.reason, v.kind, md, text, delta)
        self.seen[b] = seen
        return seen

    def _python(self, func: Function) -> str:
        img, isa = self.img, self.isa
        code = function_code(img, func)
        insns, walk_error = isa.decode(code, func.address, func.size)
        reason = function_reason(img, func, isa, insns, code, self.rule)
        regions = refused_regions(img, isa, func, insns, code) if not reason else {}
        refused = _dumps(f"function refused: {reason}") if reason else ""
        rel = img.e_type == "ET_REL"
        seen_get = self.seen.get
        out: List[str] = []
        append = out.append
        base = func.address
        size = func.size
        for off, ln, mnem, ops in insns:
            b = code[off : off + ln]
            addr = base + off
            s = seen_get(b)
            if s is None:
                s = self._classify(b, addr, mnem, ops)
            status, kind, why = s.status, s.kind, s.reason
            if reason:
                status, kind, why_json = STATUS_SKIP, KIND_SKIP, refused
            elif off + ln > size:
                status, kind, why_json = STATUS_SKIP, KIND_SKIP, '"extends past the symbol\'s end"'
            elif off in regions and status == STATUS_OK:
                status, kind, why_json = STATUS_SKIP, KIND_SKIP, _q(regions[off])
            else:
                why_json = _q(why) if why else '""'
            if s.delta is None:
                text, target, symbol = s.text, "null", "null"
            else:
                text = f'"bytes":"{b.hex()}","mnemonic":{_q(mnem)},"operands":{_q(ops)}'
                t: Optional[int] = (addr + s.delta) & 0xFFFFFFFFFFFFFFFF
                sym: Optional[str] = None
                if rel:
                    t, sym = reloc_target(img, addr, ln, t)
                target = "null" if t is None else str(t)
                symbol = "null" if sym is None else _q(sym)
            append(f'{{"offset":{off},"address":{addr},"length":{ln},{text},"status":"{status}",'
                   f'"reason":{why_json},"kind":"{kind}",{s.md},"target":{target},"target_symbol":{symbol}}}')
        return f'{_head(func)}{_verdict(reason, walk_error)}{",".join(out)}]}}'


def _head(func: Function) -> str:
    """A function line's start, up to ``"eligible":``: the one spelling the Python and native writers share."""
    return f'{{"function":{_quote(func.qualified)},"address":{func.address},"size":{func.size},"eligible":'


def _verdict(reason: str, walk_error: str) -> str:
    """The line's verdict, up to the opening of its "probes" array."""
    return (f'{"false" if reason else "true"},"reason":{_quote(reason)},"walk_error":{_quote(walk_error)},'
            '"probes":[')


def _native_writer(img: KernelImage):
    """The ISA accelerator's ``json_writer()``, for images whose records need nothing but the bytes (not ET_REL,
    where relocations name targets; no mapping symbols), or None."""
    if not img.isa.accelerator or img.e_type == "ET_REL" or img.isa.mapping_symbols:
        return None
    make = getattr(importlib.import_module(img.isa.accelerator), "json_writer", None)
    return make() if make is not None else None
