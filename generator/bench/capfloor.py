"""capstone's own decode rate on an image's functions: the floor under any capstone-text output.

``python -m generator.bench.capfloor IMAGE`` decodes every function's bytes
with capstone's C ``cs_disasm`` (one call per function, no detail, no text
kept; a function stops at the first bytes capstone cannot decode) and prints
the instruction count.  The full per-instruction JSON prints
capstone's text for every instruction, so it can never run faster than this;
``invoke bench`` times it beside objdump on the same image.
"""

from __future__ import annotations

import ctypes
import sys

from ..analysis.probes import function_code
from ..image import open_image


def count(path: str) -> int:
    import capstone
    from capstone import _cs

    img = open_image(path)
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    md.syntax = capstone.CS_OPT_SYNTAX_ATT
    insn = ctypes.POINTER(capstone._cs_insn)()
    n = 0
    for f in img.functions():
        code = function_code(img, f)[: f.size]
        got = _cs.cs_disasm(md.csh, code, len(code), f.address, 0, ctypes.byref(insn))
        if got:
            _cs.cs_free(insn, got)
        n += got
    return n


if __name__ == "__main__":
    print(count(sys.argv[1]))
