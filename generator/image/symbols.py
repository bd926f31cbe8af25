"""Symbol tables: their entries unpacked, and the ``Function`` record of a function symbol.

Read as array columns (``_symbol_columns``): pyelftools' ``iter_symbols()`` runs at ~45 k
symbols/s and a kernel has hundreds of thousands.  Every entry is kept
(STT_FILE too), because relocations index the raw table.  A function is an
STT_FUNC symbol with a size; ``KernelImage.functions()`` folds the aliases
at one address and size into one ``Function`` (it needs the image's
section layout for that).
"""

import functools
import gc
import itertools
import sys
from array import array
from collections.abc import Callable, Sequence
from typing import NamedTuple, Optional, TypeVar

from ..common.errors import UserError
from .headers import _Malformed, _Shdr

_T = TypeVar("_T")


_STT_FUNC = 2
_STT_SECTION = 3
_STT_FILE = 4
_STB_NAMES = {0: "local", 1: "global", 2: "weak"}
_SHN_UNDEF = 0
_SHN_ABS = 0xFFF1
_SHN_COMMON = 0xFFF2
_NOT_HERE = (_SHN_UNDEF, _SHN_ABS, _SHN_COMMON)  # a symbol with this st_shndx is no function of the image


def corrupt_function(path: str, f: "Function") -> UserError:
    """The one line for a function symbol that does not lie inside its section (``open`` and ``probes``)."""
    name = f.qualified or f"at {f.address:#x} (no name)"
    return UserError(f"{path}: corrupt symbol table: function {name} lies outside its section; "
                     "re-copy the file or rebuild it")


class Function(NamedTuple):
    """A function symbol: STT_FUNC with a nonzero size.

    Aliases (several names at one address and size) are folded into one
    Function; ``name`` is the first global name, ``aliases`` the others.
    A NamedTuple: a kernel has 50,000, made before any work can start.
    """

    name: str
    address: int
    size: int
    binding: str  # "global", "local" or "weak"
    file: Optional[str]  # STT_FILE that precedes a local symbol
    section: str
    aliases: tuple[str, ...] = ()

    @property
    def qualified(self) -> str:
        """``name@file`` for a local symbol, the plain name otherwise."""
        if self.binding == "local" and self.file:
            return f"{self.name}@{self.file}"
        return self.name


class _Sym(NamedTuple):
    """One symbol table entry (a NamedTuple: kernels have hundreds of thousands)."""

    name: str
    value: int
    size: int
    type: int
    bind: int
    shndx: int
    file: Optional[str]


def _without_gc(fn: Callable[..., _T]) -> Callable[..., _T]:
    """Run ``fn`` with the cycle collector paused.

    Unpacking a kernel's symbols makes a few hundred thousand tuples, none in
    a cycle; each collection the allocations trigger would walk all the
    tuples made so far, a seventh of the work.
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        was = gc.isenabled()
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            if was:
                gc.enable()

    return wrapper


def _symbol_table_bytes(raw: Sequence[int], shdrs: list[_Shdr], sec: _Shdr) -> tuple[bytes, bytes]:
    """(string table, entries) of the symbol table ``sec``."""
    if not 0 <= sec.sh_link < len(shdrs):
        raise _Malformed(f"symbol table {sec.name or '(unnamed)'} names string table section {sec.sh_link}, "
                         f"but there are {len(shdrs)} sections")
    st = shdrs[sec.sh_link]
    data = bytes(raw[sec.sh_offset : sec.sh_offset + sec.sh_size])
    return bytes(raw[st.sh_offset : st.sh_offset + st.sh_size]), data[: len(data) // 24 * 24]


def _symbol_columns(data: bytes) -> tuple[Sequence[int], bytes, Sequence[int], Sequence[int], Sequence[int]]:
    """The entries of an ELF64 little-endian symbol table, column by column, one item per entry: st_name,
    st_info, st_shndx, st_value, st_size.

    The table read as arrays of each width and sliced: a column costs a C
    loop, not a tuple per entry, and a reader that wants some entries of many
    (the functions of a shared library, a third of whose symbols are
    imports) touches only those.  (A plain tuple: a NamedTuple class costs
    every process 0.2 ms to make.)
    """
    words, halves, quads = array("I"), array("H"), array("Q")
    for column in (words, halves, quads):
        column.frombytes(data)
        if sys.byteorder == "big":
            column.byteswap()
    return words[0::6], data[4::24], halves[3::12], quads[1::3], quads[2::3]


def _symbol_name(strtab: bytes, offset: int) -> str:
    """The string at ``offset`` of a string table ("" past its end)."""
    end = strtab.find(b"\0", offset)
    return strtab[offset:end].decode("utf-8", "replace") if end >= 0 else ""


@_without_gc
def _unpack_symbols(raw: Sequence[int], shdrs: list[_Shdr], sec: _Shdr) -> list[_Sym]:
    """Every entry of the symbol table ``sec``."""
    strtab, data = _symbol_table_bytes(raw, shdrs, sec)
    names = _string_starts(strtab)
    out: list[_Sym] = []
    file: Optional[str] = None
    for st_name, st_info, st_shndx, st_value, st_size in zip(*_symbol_columns(data)):
        name = names.get(st_name)
        if name is None:  # a shared tail ("init" inside "do_init"), or past the table
            name = _symbol_name(strtab, st_name)
        stype, bind = st_info & 0xF, st_info >> 4
        if stype == _STT_FILE:
            file = name
        # Every entry is kept, STT_FILE too: relocations index this list.
        out.append(_Sym(name, st_value, st_size, stype, bind, st_shndx, file if bind == 0 else None))
    return out


def _string_starts(strtab: bytes) -> dict[int, str]:
    """Every string of a string table by its offset, decoded in one pass.

    A kernel has over 100,000 symbols; one split beats a find, a slice and a
    decode per symbol.  Byte offsets equal character offsets only for ASCII,
    so a table with other bytes decodes its strings one by one.
    """
    if strtab.isascii():
        parts = strtab.decode("ascii").split("\0")
        lengths = map(len, parts)
    else:
        pieces = strtab.split(b"\0")
        parts = [p.decode("utf-8", "replace") for p in pieces]
        lengths = map(len, pieces)
    offsets = itertools.accumulate((n + 1 for n in lengths), initial=0)
    return dict(zip(offsets, parts))
