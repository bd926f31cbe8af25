"""amd64: FreeBSD's ``sys/cddl/dev/kinst/amd64/kinst_isa.c``, ahead of time.

- ``decode``: the capstone instruction walk;
- kinst's verdict and ``struct kinst_probe_md`` per instruction, and the
  prologue rule: the portable core, ``sys/modules/kinst/amd64/kinst_core.c``,
  with the host step ``accel/kk_walk.c`` (built and driven by
  ``isa/hostcore.py``; ``walk``: its data);
- ``classify``: the functions refused by name, the region refusals;
- ``probe_md``: the metadata record, its flag bits and the table kinds;
- ``table``: the compact table's per-instruction records;
- ``tables``: opcode facts and refusals as data;
- ``relocs``: x86-64 relocation types;
- ``oracle``: how objdump and valgrind see amd64 code;
- ``opmap``: the host walk's opcode table, derived from capstone;
- ``jump``: the trap-free jump probe's facts (docs/jump-probes.md).
"""

from __future__ import annotations

import functools

from .. import hostcore
from . import classify as _classify
from . import decode as _decode
from . import probe_md as _md
from . import table as _table
from . import tables as _tables
from .oracle import QUIRKS
from .relocs import branch_field, reloc_type
from .walk import ACCELERATOR
from .jump import FACTS as JUMP_FACTS
from ..contract import Isa, Kmod, package_parts
from .dwarfregs import DWARF_REGS

ISA = Isa(
    name="amd64",
    e_machine="EM_X86_64",
    patchval=0xCC,  # int3
    patchval_size=1,
    tramp_size=32,  # template (<= 16) + jmp *0(%rip) (6) + address (8)
    nmi_entries=_classify.NMI_ENTRIES,
    nmi_reason=_classify.NMI_REASON,
    flag_bits=_md.FLAG_BITS,
    reloc_type=reloc_type,
    oracle=QUIRKS,
    kmod=Kmod(
        machine="amd64", machine_arch="amd64", machine_cpuarch="amd64", clang_arch="x86_64",
        ld_emulation="elf_x86_64_fbsd",
        cflags=("-mcmodel=kernel", "-mno-red-zone", "-mno-mmx", "-mno-sse", "-msoft-float",
                "-fno-asynchronous-unwind-tables"),
        clang_cflags=("-mno-aes", "-mno-avx"),
        include_links=(("machine", "amd64"), ("x86", "x86"), ("i386", "i386")),
        ldscript="ldscript.kmod.amd64", kinst_dirs=("amd64",),
    ),
    # kinst's verdict and the prologue rule are the portable core's, run on the host (isa/hostcore.py).
    **package_parts(_decode, _classify, _md, _table),
    classify=functools.partial(hostcore.classify, "amd64"),
    frame_verdict=functools.partial(hostcore.frame_verdict, "amd64"),
    stream_records=_table.records,
    accelerator=ACCELERATOR,
    byte_sets=_tables.CORE_BYTE_SETS,
    word_sets=(_table.DISP_TAIL,),
    refusals=_tables.CORE_REFUSALS,
    branch_reloc=branch_field,
    dwarf_regs=DWARF_REGS,
    jump=JUMP_FACTS,
)
