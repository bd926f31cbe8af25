"""The portable core of an ISA, built for this host: the one implementation of kinst's per-instruction rule.

``sys/modules/kinst/<arch>/kinst_core.c`` decides, from an instruction's
bytes, kinst's probe metadata and whether the instruction can be probed at
all (``kinst_core_dissect()``).  The kernel module runs it when a probe is
made; the analysis runs the same file, compiled here into a shared library
with the ISA's host walk.
"""

from __future__ import annotations

from pathlib import Path

from generator.isa import encoding
from generator.isa.contract import Isa

ENCODING_TEMPLATE = "kinst_encoding.h.j2"


def render_encoding(isa: Isa, out_dir: Path) -> Path:
    """``kinst_encoding.h`` for ``isa`` in ``out_dir``, as ``generate`` renders it for a table."""
    from generator.render import render_tree

    (path,) = render_tree("kinst", out_dir, encoding.context(isa), [], f"kinstkit's host build of the {isa.name} core",
                          only=(ENCODING_TEMPLATE,))
    return path
