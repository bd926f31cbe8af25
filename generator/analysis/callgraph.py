"""The direct calls an image shows, and what a set of entry points reaches through them.

Machine-independent: an instruction's direct target is what the ISA's
``classify`` (the decoder of record) reads from its bytes; in an ET_REL image
a target that only a relocation names lies outside the image and is not
followed.  A branch out of its function (a tail call) counts as a call;
calls through a register or memory are not seen, nor are calls made only in
code that is not a sized function symbol.
"""

from __future__ import annotations

from collections import deque
from typing import Callable, Dict, List, Sequence, Tuple

from generator.analysis.code import function_code, reloc_target
from generator.image.elf import Function, KernelImage


def direct_callees(img: KernelImage, func: Function) -> List[Function]:
    """The functions ``func`` calls or branches into directly, in the order its code names them."""
    isa = img.isa
    code = function_code(img, func)
    insns, _ = isa.decode(code, func.address, func.size)
    out: List[Function] = []
    seen = {func.address}
    for off, length, mnem, ops in insns:
        addr = func.address + off
        target = isa.classify(code[off : off + length], addr, mnem, ops).target
        if target is not None and img.e_type == "ET_REL":
            target, _ = reloc_target(img, addr, length, target)
        if target is None or func.address <= target < func.address + func.size:
            continue
        callee = img.function_at(target)
        if callee is not None and callee.address not in seen:
            seen.add(callee.address)
            out.append(callee)
    return out


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
