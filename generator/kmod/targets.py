"""The architectures kinstkit builds and checks ``.ko`` files for: one table, keyed by ``--target``.

``invoke build`` needs clang's and ld.lld's names for a target and
``check-ko`` its ELF machine; keeping them in one record means a target is
added in one place, and ``build`` and ``check-ko`` can never disagree on
which targets exist.  Only amd64: kinst is amd64-only, and other
architectures link ET_DYN modules differently.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict


@dataclass(frozen=True)
class KmodTarget:
    """What one ``--target`` name means to each tool."""

    arch: str  # FreeBSD's name for it (MACHINE_ARCH), as check-ko's messages say it
    e_machine: int  # ELF e_machine of the kernel and of a .ko built for it
    clang_arch: str  # clang --target=<clang_arch>-unknown-freebsdX.Y
    ld_emulation: str  # ld.lld -m (sys/conf/kern.mk LD_EMULATION_<arch>)


TARGETS: Dict[str, KmodTarget] = {
    "amd64": KmodTarget(arch="amd64", e_machine=62, clang_arch="x86_64", ld_emulation="elf_x86_64_fbsd"),
}
