"""Stage 2: decode and classify, one module per ISA.

Each module (``amd64.py``; later ``aarch64.py``, ``riscv.py``) exposes the
same interface -- ``ARCH``, ``PATCHVAL``, ``TRAMP_SIZE``, ``MD_EXCLUDED``,
``decode()``, ``classify()``, ``frame_verdict()``, and optionally
``context_refusals()`` for hazards that span instructions -- the way kinst keeps one
``kinst_isa.c`` per architecture behind ``kinst.h``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ..errors import UserError

SUPPORTED = ("amd64",)


def isa_for(arch: str) -> ModuleType:
    """The ISA module for ``arch`` (an ``image.ARCHITECTURES`` value)."""
    if arch not in SUPPORTED:
        raise UserError(f"no decoder for architecture {arch}; supported: {', '.join(SUPPORTED)}")
    return importlib.import_module(f"{__name__}.{arch}")
