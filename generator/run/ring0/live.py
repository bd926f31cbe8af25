"""The running kernel's text as an ELF image: what the table of the ring-0 guest is made from.

A Linux kernel rewrites its own text while it boots: alternatives for the
CPU it finds, ftrace's nops over every ``call __fentry__``, retpolines and
return thunks, paravirt calls.  The vmlinux on disk is therefore not what
runs, and a table made from it would fail its digests almost everywhere.
So the guest boots once without probes, the module (with an empty table)
reads ``[_stext, _etext)`` back through ``/proc/kinst/text``, and this module
writes an ELF image from those bytes and the vmlinux's symbols and build-id:
``live_image()``.  Every stage downstream (plan, refusals, ``probes
--kernel``) then reads it like any other kernel.

What the kernel rewrites later, at run time (jump labels, static calls,
ftrace sites), is refused and masked by ``rules.py``; what it rewrote at
boot depends on the boot: the kernel, QEMU and its CPU model, the number of
CPUs and the command line, all of which key the cache
(``<cache>/ring0/live/``).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import List, Tuple

from ...common.ccache import content_key
from ...common.errors import UserError
from ...common.paths import CACHE
from ...image.elf import KernelImage

LIVE_DIR = CACHE / "ring0" / "live"

_STT_FUNC, _STT_FILE = 2, 4
_SHN_ABS = 0xFFF1
_SYM = struct.Struct("<IBBHQQ")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_PHDR = struct.Struct("<IIQQQQQQ")
_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_PT_LOAD, _PT_NOTE = 1, 4


def key(build_id: str, boot: Tuple[str, ...]) -> str:
    """The cache key of a capture: the kernel's build-id and everything about the boot that decides its text."""
    return f"{build_id}-{content_key(boot)}"


def path_for(capture_key: str) -> Path:
    return LIVE_DIR / f"live-{capture_key}.elf"


def _symbols(vmlinux: KernelImage, lo: int, hi: int) -> Tuple[bytes, bytes, int]:
    """(.symtab, .strtab, index of the first global) holding the vmlinux's file symbols and the functions
    inside [lo, hi), in their original order (each local after its STT_FILE), pointing at section 1."""
    strtab = bytearray(b"\0")
    names = {}
    local: List[bytes] = [bytes(_SYM.size)]
    glob: List[bytes] = []
    for s in vmlinux.symbols():
        kind = s.type
        if kind == _STT_FILE:
            shndx, value, size = _SHN_ABS, 0, 0
        elif kind == _STT_FUNC and s.size and lo <= s.value and s.value + s.size <= hi:
            shndx, value, size = 1, s.value, s.size
        else:
            continue
        if s.name not in names:
            names[s.name] = len(strtab)
            strtab += s.name.encode() + b"\0"
        entry = _SYM.pack(names[s.name], s.bind << 4 | kind, 0, shndx, value, size)
        (local if s.bind == 0 else glob).append(entry)
    return b"".join(local + glob), bytes(strtab), len(local)


def _note(build_id: str) -> bytes:
    desc = bytes.fromhex(build_id)
    return struct.pack("<III", 4, len(desc), 3) + b"GNU\0" + desc + bytes(-len(desc) % 4)


def write_live_image(vmlinux: KernelImage, text: bytes, dest: Path) -> Path:
    """An ET_EXEC image: ``text`` at _stext as ``.text``, the vmlinux's build-id note and function symbols."""
    syms = {s.name: s.value for s in vmlinux.symbols() if s.name in ("_stext", "_etext")}
    lo, hi = syms.get("_stext"), syms.get("_etext")
    if lo is None or hi is None:
        raise UserError(f"{vmlinux.path}: no _stext/_etext symbols: not a Linux vmlinux with symbols")
    if len(text) != hi - lo:
        raise UserError(f"the captured kernel text is {len(text)} bytes, [_stext, _etext) of {vmlinux.path} is "
                        f"{hi - lo}: the capture was cut short or is of another kernel")
    if not vmlinux.build_id:
        raise UserError(f"{vmlinux.path}: no build-id")
    symtab, strtab, first_global = _symbols(vmlinux, lo, hi)
    note = _note(vmlinux.build_id)
    shstr = b"\0.text\0.note.gnu.build-id\0.symtab\0.strtab\0.shstrtab\0"
    name = {n: shstr.index(n.encode() + b"\0") for n in (".text", ".note.gnu.build-id", ".symtab", ".strtab",
                                                           ".shstrtab")}
    # Layout: header, two program headers, .text at a page boundary, then the rest.
    text_off = 0x1000
    note_off = text_off + len(text)
    note_off += -note_off % 4
    symtab_off = note_off + len(note)
    symtab_off += -symtab_off % 8
    strtab_off = symtab_off + len(symtab)
    shstr_off = strtab_off + len(strtab)
    shdr_off = shstr_off + len(shstr)
    shdr_off += -shdr_off % 8
    note_addr = hi + (-hi % 4)  # an address of its own, after the text
    phdrs = (_PHDR.pack(_PT_LOAD, 5, text_off, lo, lo, len(text), len(text), 0x1000)
             + _PHDR.pack(_PT_NOTE, 4, note_off, note_addr, note_addr, len(note), len(note), 4))
    shdrs = b"".join((
        bytes(_SHDR.size),
        _SHDR.pack(name[".text"], 1, 6, lo, text_off, len(text), 0, 0, 4096, 0),  # PROGBITS, ALLOC|EXECINSTR
        _SHDR.pack(name[".note.gnu.build-id"], 7, 2, note_addr, note_off, len(note), 0, 0, 4, 0),  # NOTE, ALLOC
        _SHDR.pack(name[".symtab"], 2, 0, 0, symtab_off, len(symtab), 4, first_global, 8, _SYM.size),
        _SHDR.pack(name[".strtab"], 3, 0, 0, strtab_off, len(strtab), 0, 0, 1, 0),
        _SHDR.pack(name[".shstrtab"], 3, 0, 0, shstr_off, len(shstr), 0, 0, 1, 0),
    ))
    ident = b"\x7fELF\x02\x01\x01" + bytes(9)
    ehdr = _EHDR.pack(ident, 2, 62, 1, lo, 64, shdr_off, 0, 64, _PHDR.size, 2, _SHDR.size, 6, 5)
    out = bytearray(shdr_off + len(shdrs))
    out[0 : len(ehdr)] = ehdr
    out[64 : 64 + len(phdrs)] = phdrs
    out[text_off : text_off + len(text)] = text
    out[note_off : note_off + len(note)] = note
    out[symtab_off : symtab_off + len(symtab)] = symtab
    out[strtab_off : strtab_off + len(strtab)] = strtab
    out[shstr_off : shstr_off + len(shstr)] = shstr
    out[shdr_off:] = shdrs
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}")
    tmp.write_bytes(bytes(out))
    os.replace(tmp, dest)
    return dest
