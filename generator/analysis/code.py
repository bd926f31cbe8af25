"""A function's bytes as the analysis reads them, and the targets only relocations name.

The lowest layer of stage 3: the probe analysis (``probes``) and the call
graph (``callgraph``) both read code this way.
"""

from __future__ import annotations

from typing import Optional, Tuple

from ..image.elf import Function, KernelImage, Section, corrupt_function

# Bytes read past a symbol's end so an instruction straddling it decodes whole.
MAX_INSN = 15


def function_code(img: KernelImage, func: Function, sec: Optional[Section] = None) -> bytes:
    """The function's bytes and up to ``MAX_INSN`` more from its section (relocated for ET_REL).

    ``sec`` is the section holding the function, when the caller has looked it up already."""
    sec = sec or img.section_at(func.address)
    avail = func.size
    if sec is not None:
        avail = min(func.size + MAX_INSN, sec.addr + sec.size - func.address)
    if sec is None or avail < func.size:
        raise corrupt_function(img.path, func)
    return img.read(func.address, avail)


def reloc_target(img: KernelImage, addr: int, length: int, target: int) -> Tuple[Optional[int], Optional[str]]:
    """For ET_REL, name a branch target that only a relocation knows (where the ISA's ``branch_reloc`` says)."""
    where = img.isa.branch_reloc(length) if img.isa.branch_reloc is not None else None
    if where is None:
        return target, None
    field, bias = where
    for r in img.relocs_in(addr + field, 1):
        if r.resolved:
            return target, None
        off = r.addend + bias
        return None, r.symbol + (f"{off:+#x}" if off else "")
    return target, None
