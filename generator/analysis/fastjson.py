"""Whole-image per-instruction JSON, at objdump's pace.

``probes --all --json`` prints every instruction of every function with its
verdict and kinst metadata -- millions of objects for a kernel.  The ISA's
host library (``isa/hostcore.py``) writes them: its walk makes a row per
instruction (the portable core's verdict, capstone's text) and formats each
as ``report.probe_dict`` lays a record out (the keys come from
``isa.contract.PROBE_JSON_HEAD``/``TAIL`` and the ISA's ``md_json``), a
chunk of functions per call, straight into a file.  A function it hands
back (capstone cannot decode it, a %gs region, a walk past the symbol,
text that is not ASCII), an ET_REL image (relocations name its targets),
an image with mapping symbols and an ISA without a host library are
written by Python from ``probes.analyse``: ``report.function_json``.
"""

from __future__ import annotations

import json
import os
from typing import Dict, Sequence, Tuple

from . import report
from .exclusions import excluded, for_image
from .probes import MAX_INSN, analyse, code_runs, function_code
from ..image.elf import Function, KernelImage
from ..isa import hostcore

_dumps = json.dumps
_quote = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]  # json.dumps of a str, in C


class ImageJson:
    """Formats the functions of one image; one per worker, the library's buffers and cache reused."""

    def __init__(self, img: KernelImage, rule: str):
        self.img = img
        self.isa = img.isa
        self.rule = rule
        lib = hostcore.for_isa(self.isa) if img.e_type != "ET_REL" and not self.isa.mapping_symbols else None
        self.native = lib.json_writer() if lib is not None else None
        self.prologue_json = _dumps(f"function refused: {self.isa.prologue_reasons[rule]}")

    def _python(self, func: Function) -> bytes:
        return report.function_json(analyse(self.img, func, self.rule, self.isa)).encode()

    def write(self, funcs: Sequence[Function], fd: int) -> None:
        """Every function's line, newline-terminated, to ``fd`` (-1: into the library's buffer, for ``lines``)."""
        if self.native is None:
            os.write(fd, b"".join(self._python(f) + b"\n" for f in funcs))
            return
        isa, rule, native = self.isa, self.rule, self.native
        chunk = native.chunk(1 << isa.accelerator.prologue_rules.index(rule), _verdict("", ""),
                             _verdict(isa.prologue_reasons[rule], ""), self.prologue_json)
        funcs = list(funcs)
        md_excluded = for_image(self.img)  # kinst_md_excluded() and the image's NMI closure
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
                    native.put(fd, self._python(funcs[k]) + b"\n")
                    k += 1
            native.flush(fd)
        except BaseException:
            native.discard()
            raise

    def lines(self, funcs: Sequence[Function]) -> bytes:
        """``write``'s lines as bytes, without the last newline."""
        if self.native is None:
            return b"\n".join(self._python(f) for f in funcs)
        return self.native.take(lambda: self.write(funcs, -1))[:-1]

    def _lone(self, chunk, func: Function) -> Tuple[int, int]:
        """A function in no run (it does not fit its section): its own bytes, as ``function_code`` reads them
        (and says what is wrong with it)."""
        code = function_code(self.img, func)
        return chunk.add_code(code), len(code)

    def function_bytes(self, func: Function) -> bytes:
        """The function's line as bytes."""
        return self.lines([func])

    def function(self, func: Function) -> str:
        """The function's line: its record and every instruction's."""
        return self.function_bytes(func).decode()


def _head(func: Function) -> str:
    """A function line's start, up to ``"eligible":``: the one spelling ``report.function_json`` and the
    library's lines share."""
    return f'{{"function":{_quote(func.qualified)},"address":{func.address},"size":{func.size},"eligible":'


def _verdict(reason: str, walk_error: str) -> str:
    """The line's verdict, up to the opening of its "probes" array."""
    return (f'{"false" if reason else "true"},"reason":{_quote(reason)},"walk_error":{_quote(walk_error)},'
            '"probes":[')

