"""riscv: FreeBSD's ``sys/cddl/dev/kinst/riscv/kinst_isa.c``, ahead of time.

- ``decode``: the capstone walk over 2- and 4-byte instructions;
- kinst's instlen, emulation and fields per instruction, kinstkit's verdict
  and the prologue rule over the function's words: the portable core,
  ``sys/modules/kinst/riscv/kinst_core.c``, with the host step
  ``accel/kk_walk.c`` (built and driven by ``isa/hostcore.py``; ``walk``:
  its data);
- ``classify``: the functions refused by name, the LR/SC blocks and
  trap-CSR regions;
- ``probe_md``: the metadata record and the table kinds;
- ``table``: the compact table's per-instruction records;
- ``tables``: encodings as data;
- ``relocs``: RISC-V relocation types;
- ``oracle``: how objdump and QEMU see riscv code.
"""

from __future__ import annotations

from ..contract import Isa, Kmod, package_parts
from ..dbp import isa_parts
from . import classify as _classify
from . import decode as _decode
from . import probe_md as _md
from . import relocs as _relocs
from . import table as _table
from . import tables as _tables
from .walk import ACCELERATOR
from .oracle import QUIRKS
from .dwarfregs import DWARF_REGS

ISA = Isa(
    name="riscv",
    e_machine="EM_RISCV",
    # c.ebreak over every probed instruction, 4-byte ones included: one 16-bit store at a 2-byte-aligned
    # address is atomic where a 4-byte ebreak there would take two (docs/refusals.md 6.3)
    patchval=0x9002,
    patchval_size=2,
    tramp_size=8,  # the instruction (c.nop-padded to 4 bytes), then the trampoline's own ebreak
    flag_bits=(),
    reloc_type=_relocs.reloc_type,
    oracle=QUIRKS,
    kmod=Kmod(
        machine="riscv", machine_arch="riscv64", machine_cpuarch="riscv", clang_arch="riscv64",
        ld_emulation="elf64lriscv", shared=True,
        # FreeBSD's -march is rv64imafdch_zifencei, which clang < 19 rejects; the extensions it adds (h,
        # zifencei) change no instruction kinst's C is compiled to.
        cflags=("-march=rv64imafdc", "-mabi=lp64", "-mcmodel=medium", "-mno-relax"),
        gcc_spelling=(("-mcmodel=medium", "-mcmodel=medany"), ("-mno-omit-leaf-frame-pointer", "")),
        include_links=(("machine", "riscv"),), kinst_dirs=("riscv", "dbp"),
    ),
    **package_parts(_decode, _classify, _md, _table),
    # kinst's verdict and the prologue rule are the portable core's, run on the host (isa/hostcore.py).
    **isa_parts("riscv", _tables, _relocs, ACCELERATOR),
    dwarf_regs=DWARF_REGS,
)
