"""arm64: FreeBSD's ``sys/cddl/dev/kinst/aarch64/kinst_isa.c``, ahead of time.

- ``decode``: the capstone walk, one 4-byte word at a time;
- kinst's class and fields per word, kinstkit's verdict and the prologue
  rule: the portable core, ``sys/modules/kinst/arm64/kinst_core.c``, with
  the host step ``accel/kk_walk.c`` (built and driven by
  ``isa/hostcore.py``; ``walk``: its data);
- ``classify``: the functions refused by name, the LDX/STX blocks and
  exception-register regions;
- ``probe_md``: the metadata record and the table kinds;
- ``table``: the compact table's per-word records;
- ``tables``: encodings as data;
- ``relocs``: AArch64 relocation types;
- ``oracle``: how objdump and QEMU see arm64 code.
"""

from __future__ import annotations

from . import classify as _classify
from . import decode as _decode
from . import probe_md as _md
from . import relocs as _relocs
from . import table as _table
from . import tables as _tables
from .oracle import QUIRKS
from .walk import ACCELERATOR
from ..contract import Isa, Kmod, package_parts
from ..dbp import isa_parts
from .dwarfregs import DWARF_REGS

ISA = Isa(
    name="arm64",
    e_machine="EM_AARCH64",
    patchval=0xD42081A0,  # brk #0x40d: DTRACE_PATCHVAL, the immediate do_el1h_sync() hands to DTrace
    patchval_size=4,
    tramp_size=8,  # the word, then the trampoline's own brk
    flag_bits=_md.FLAG_BITS,
    reloc_type=_relocs.reloc_type,
    oracle=QUIRKS,
    kmod=Kmod(
        machine="arm64", machine_arch="aarch64", machine_cpuarch="aarch64", clang_arch="aarch64",
        ld_emulation="aarch64elf", shared=True, ld_flags=("--no-relax",),
        cflags=("-mgeneral-regs-only", "-ffixed-x18", "-mbranch-protection=standard", "-mno-outline-atomics"),
        include_links=(("machine", "arm64"),), kinst_dirs=("arm64", "dbp"),
    ),
    **package_parts(_decode, _classify, _md, _table),
    # kinst's verdict and the prologue rule are the portable core's, run on the host (isa/hostcore.py).
    **isa_parts("arm64", _tables, _relocs, ACCELERATOR),
    dwarf_regs=DWARF_REGS,
)
