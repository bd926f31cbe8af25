"""An image that is one .text of given bytes: functions laid out one after another, for mutated code.

It offers the slice of ``KernelImage`` the analysis uses on a linked image
(isa, e_type, path, functions, function_at, section_at, read, read_in), so
tests can run the host walk and the per-function report on bytes no
compiler made.
"""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import List, Sequence, Tuple

from generator.analysis.probes import MAX_INSN
from generator.image.elf import Function, KernelImage
from generator.isa.contract import Isa

BASE = 0xFFFFFFFF80200000


class TextImage:
    """One .text at ``base`` (``BASE`` unless told) holding ``code``."""

    e_type = "ET_EXEC"
    path = "mutated"

    def __init__(self, isa: Isa, code: bytes, funcs: Sequence[Function] = (), base: int = BASE):
        self.isa = isa
        self.code = code
        self.funcs = list(funcs)
        self.text = SimpleNamespace(name=".text", addr=base, size=len(code), nobits=False)

    def functions(self) -> List[Function]:
        return self.funcs

    def function_at(self, address: int):
        return next((f for f in self.funcs if f.address <= address < f.address + f.size), None)

    def section_at(self, address: int):
        t = self.text
        return t if t.addr <= address < t.addr + t.size else None

    def read(self, address: int, size: int) -> bytes:
        off = address - self.text.addr
        return self.code[off : off + size]

    def read_in(self, sec, address: int, size: int) -> bytes:
        return self.read(address, size)

    def relocs_in(self, address: int, size: int) -> list:
        return []

    def data_in_code(self) -> list:
        return []


def lay_out(isa: Isa, bodies: Sequence[bytes], prefix: str = "f") -> Tuple[TextImage, List[Function]]:
    """The bodies one after another in one .text (int3-padded at the end), as functions ``f0``, ``f1``..."""
    funcs, at = [], 0
    for i, b in enumerate(bodies):
        funcs.append(Function(name=f"{prefix}{i}", address=BASE + at, size=len(b), binding="global", file=None,
                              section=".text"))
        at += len(b)
    return TextImage(isa, b"".join(bodies) + b"\xcc" * MAX_INSN, funcs), funcs


def mutated_bodies(path: str, count: int, seed: int, max_size: int = 400) -> List[bytes]:
    """``count`` real function bodies of the library at ``path``, 1-4 bytes changed and, in a third of them,
    1-3 prefixes inserted (the kinds of bytes that change an x86 instruction's length or meaning)."""
    rng = random.Random(seed)
    lib = KernelImage.open(path)
    sources = [lib.read(f.address, f.size) for f in lib.functions() if 4 < f.size <= max_size]
    prefixes = (0x66, 0xF2, 0xF3, 0xF0, 0x2E, 0x3E, 0x26, 0x36, 0x64, 0x65, 0x40, 0x41, 0x48, 0x4F, 0x67, 0x0F)
    out = []
    for _ in range(count):
        code = bytearray(rng.choice(sources))
        for _ in range(rng.randint(1, 4)):
            code[rng.randrange(len(code))] = rng.randrange(256)
        if rng.random() < 0.3:
            at = rng.randrange(len(code))
            code[at:at] = bytes(rng.choice(prefixes) for _ in range(rng.randint(1, 3)))
        out.append(bytes(code))
    return out
