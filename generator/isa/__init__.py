"""Stage 2: decode and classify, one package per ISA behind ``contract.Isa``.

Machine-independent code asks for an image's ISA (``KernelImage.isa``, which
comes from ``for_machine``) and never imports an ISA package itself.  Adding
an ISA means adding one package here that builds an ``Isa`` named ``ISA``,
and one line in ``MACHINES``.
"""

from __future__ import annotations

import importlib
from typing import Dict

from ..common.errors import UserError
from .contract import Isa

# ELF e_machine (pyelftools' name) -> the ISA package that reads it.
MACHINES: Dict[str, str] = {
    "EM_X86_64": "amd64",
    "EM_AARCH64": "arm64",
    "EM_RISCV": "riscv",
}
SUPPORTED = tuple(MACHINES.values())


def by_name(name: str) -> Isa:
    """The ISA called ``name`` (FreeBSD's MACHINE_CPUARCH: amd64, arm64, riscv)."""
    if name not in SUPPORTED:
        raise UserError(f"no decoder for architecture {name}; supported: {', '.join(SUPPORTED)}")
    return importlib.import_module(f"{__name__}.{name}").ISA


def host() -> Isa:
    """The ISA this machine runs (by ``platform.machine()``); UserError on one kinstkit has no decoder for."""
    import platform

    cpu = platform.machine()
    for name in SUPPORTED:
        isa = by_name(name)
        if isa.oracle.gnu_triple.split("-")[0] == cpu:
            return isa
    raise UserError(f"this machine is {cpu}; kinstkit has no decoder for it (supported: {', '.join(SUPPORTED)})")


def for_machine(e_machine: str) -> Isa:
    """The ISA of an ELF ``e_machine``; UserError when kinstkit has none for it."""
    if e_machine not in MACHINES:
        known = ", ".join(f"{m} ({name})" for m, name in sorted(MACHINES.items()))
        raise UserError(f"machine {e_machine}: kinstkit reads {known} images only")
    return by_name(MACHINES[e_machine])
