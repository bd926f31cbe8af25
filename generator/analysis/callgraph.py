"""The direct calls an image shows, and what a set of entry points reaches through them.

Machine-independent: an instruction's direct target is what the ISA's
``classify`` (the decoder of record) reads from its bytes.  In an ET_REL
image a relocation in a function's code that names a symbol counts too: a
call the decoder cannot see whole (riscv's ``auipc``+``jalr`` pair) or an
address taken (a function that may be called through it: the safe side);
a symbol the image does not define lies outside it and is named, not
followed.  A branch out of its function (a tail call) counts as a call;
calls through a register or memory are not seen, nor are calls made only in
code that is not a sized function symbol.
"""

from __future__ import annotations

import weakref
from collections import deque
from typing import Callable, Dict, List, NamedTuple, Sequence, Tuple

from .code import function_code, reloc_target
from ..image.elf import Function, KernelImage


class Calls(NamedTuple):
    """What one function calls or branches into directly, in the order its code names them."""

    functions: Tuple[Function, ...]  # in the image
    # Symbols relocations in its code name and the image leaves to the loader (ET_REL): the functions it
    # calls outside the image ("sym" or "sym+0x4"), and data.
    outside: Tuple[str, ...]


def direct_calls(img: KernelImage, func: Function) -> Calls:
    """The direct calls and outward branches of ``func``."""
    isa = img.isa
    code = function_code(img, func)
    insns, _ = isa.decode(code, func.address, func.size)
    funcs: List[Function] = []
    outside: List[str] = []
    seen = {func.address}

    def found(callee: Function) -> None:
        if callee.address not in seen:
            seen.add(callee.address)
            funcs.append(callee)

    for off, length, mnem, ops in insns:
        addr = func.address + off
        target = isa.classify(code[off : off + length], addr, mnem, ops).target
        if target is not None and img.e_type == "ET_REL":
            target, symbol = reloc_target(img, addr, length, target)
            if symbol is not None and symbol not in outside:
                outside.append(symbol)
        if target is None or func.address <= target < func.address + func.size:
            continue
        callee = img.function_at(target)
        if callee is not None:
            found(callee)
    if img.e_type == "ET_REL":
        named = _functions_by_name(img)
        for r in img.relocs_in(func.address, func.size):
            if not r.symbol:
                continue
            if not r.resolved:
                if r.symbol not in outside:
                    outside.append(r.symbol)
                continue
            for callee in named.get(r.symbol, ()):
                if callee.address != func.address:
                    found(callee)
    return Calls(tuple(funcs), tuple(outside))


_BY_NAME: "weakref.WeakKeyDictionary[KernelImage, Dict[str, List[Function]]]" = weakref.WeakKeyDictionary()


def _functions_by_name(img: KernelImage) -> Dict[str, List[Function]]:
    got = _BY_NAME.get(img)
    if got is None:
        got = {}
        for f in img.functions():
            for name in (f.name, *f.aliases):
                got.setdefault(name, []).append(f)
        _BY_NAME[img] = got
    return got


def direct_callees(img: KernelImage, func: Function) -> Tuple[Function, ...]:
    """The functions of the image ``func`` calls or branches into directly."""
    return direct_calls(img, func).functions


def reach(img: KernelImage, roots: Sequence[Function],
          expand: Callable[[Function], bool]) -> Dict[Function, Tuple[str, ...]]:
    """Every function the ``roots`` reach by direct calls, each with the names of a shortest chain of calls
    from a root to it (the roots themselves included, chain of one).  A function for which ``expand`` is
    false is reached but not followed."""
    path: Dict[Function, Tuple[str, ...]] = {}
    todo = deque()
    for r in roots:
        if r not in path:
            path[r] = (r.name,)
            todo.append(r)
    while todo:
        f = todo.popleft()
        if not expand(f):
            continue
        for c in direct_callees(img, f):
            if c not in path:
                path[c] = path[f] + (c.name,)
                todo.append(c)
    return path
