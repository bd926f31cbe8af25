"""FreeBSD's malloc(9) type and SYSINIT layouts on amd64, as data.

Malloc-type discovery (``generator/mallocs.py``) reads C structures out of a
kernel image without FreeBSD's headers, so the byte offsets it needs live
here, one row per layout, with the release range each one belongs to.  The
sources are FreeBSD's ``sys/sys/malloc.h``, ``sys/sys/kernel.h`` and
``sys/kern/init_main.c`` / ``kern_linker.c`` of the releases named; offsets are
those of the LP64 (amd64) ABI.

Grammar of the tables:

* ``MALLOC_TYPE_LAYOUTS``: one ``struct malloc_type`` shape each.  The word at
  ``ident_offset`` is what ``malloc_init()`` checks before it links a type in:
  ``ks_magic`` (a constant, ``M_MAGIC``) up to FreeBSD 12, ``ks_version``
  (``M_VERSION``, a YYYYMMDDNN date that changes with the structure) from 13
  on.  M_VERSION is never hard-coded: the kernel's own types say which value
  it expects.
* ``SYSINIT_LAYOUTS``: one ``struct sysinit`` shape each, and how the kernel
  orders entries of equal (subsystem, order) -- the exchange sort of the array
  era is not stable, the STAILQ merge sort of 14.0 and later is.
* ``RELEASES``: the ``osreldate`` ranges kinstkit knows, with the layouts a
  kernel of that range may have.  Where a range holds more than one (13-CURRENT
  before the November 2020 malloc_type change; 14-CURRENT before the 2023
  sysinit change) discovery probes the candidates in order and keeps the one
  the image's own data fits.
* ``LAYOUT_ERAS``: what a pair of layouts says about the release when the image
  has no ``osreldate`` symbol.

# NOTE: the 14.0 sysinit change (an STAILQ link after ``order``) is dated by
# its reviews (D41075, D41748), not by an ``osreldate`` bump, hence the two
# candidates for 14.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

# ks_magic of every malloc type up to FreeBSD 12 ("time when first defined").
M_MAGIC = 877983977

# A plausible M_VERSION: a YYYYMMDDNN date in this century.
M_VERSION_RANGE = (2000010100, 2099123199)

# DTrace's limit on a probe's function name, NUL included (sys/dtrace.h).
DTRACE_FUNCNAMELEN = 192

# The characters the kernel's isspace() accepts; dtmalloc turns each into '_'.
ISSPACE = b" \t\n\v\f\r"

# sysinit subsystem and order of MALLOC_DEFINE's SYSINIT (sys/sys/kernel.h).
SI_SUB_KMEM = 0x1800000
SI_ORDER_THIRD = 2
# Largest enum value either field may hold (SI_SUB_LAST / SI_ORDER_ANY).
SI_MAX = 0xFFFFFFF

# Functions a sysinit can name that matter here.
MALLOC_INIT = "malloc_init"
TSLOG_SHIM = "sysinit_tslog_shim"  # options TSLOG wraps every SYSINIT in it

# Symbols that say which kernel this is (sys/conf/newvers.sh's vers.c).
OSRELDATE_SYMBOL = "osreldate"
VERSION_SYMBOL = "version"

POINTER_SIZE = 8


@dataclass(frozen=True)
class MallocTypeLayout:
    """One ``struct malloc_type`` shape."""

    name: str  # the identity field's name, which also names the layout
    size: int  # sizeof(struct malloc_type): the STT_OBJECT size of a MALLOC_DEFINE
    next_offset: int  # ks_next
    ident_offset: int  # ks_magic or ks_version
    shortdesc_offset: int  # ks_shortdesc
    fixed_ident: Optional[int]  # the constant ks_magic, or None: M_VERSION is read from the kernel
    mtip: str  # C expression for the struct malloc_type_internal * of `mtp`


@dataclass(frozen=True)
class SysinitLayout:
    """One ``struct sysinit`` shape and the sort the kernel applies to it."""

    name: str
    size: int  # sizeof(struct sysinit)
    subsystem_offset: int  # enum sysinit_sub_id, 4 bytes
    order_offset: int  # enum sysinit_elem_order, 4 bytes
    link_offset: Optional[int]  # STAILQ_ENTRY next (NULL in the image), None before 14.0
    func_offset: int
    udata_offset: int
    stable_sort: bool  # equal (subsystem, order) keep linker-set order


@dataclass(frozen=True)
class TslogLayout:
    """``struct sysinit_tslog``: what ``udata`` points at under ``options TSLOG``."""

    func_offset: int
    data_offset: int
    name_offset: int


@dataclass(frozen=True)
class Release:
    """A FreeBSD major version kinstkit has layouts for."""

    major: int
    first: int  # first osreldate of the range
    last: int  # last osreldate of the range
    malloc_types: Tuple[str, ...]  # MALLOC_TYPE_LAYOUTS keys, probed in order
    sysinits: Tuple[str, ...]  # SYSINIT_LAYOUTS keys, probed in order
    generate: bool  # whether `generate --provider dtmalloc` supports it
    note: str


MALLOC_TYPE_LAYOUTS: Dict[str, MallocTypeLayout] = {
    # FreeBSD <= 12: { ks_next; u_long ks_magic; ks_shortdesc; void *ks_handle; }
    "ks_magic": MallocTypeLayout("ks_magic", 32, 0, 8, 16, M_MAGIC, "mtp->ks_handle"),
    # FreeBSD >= 13: { ks_next; u_long ks_version; ks_shortdesc;
    #   struct malloc_type_internal ks_mti (mti_probes[2], mti_zone, mti_stats, mti_spare[8]); }
    "ks_version": MallocTypeLayout("ks_version", 112, 0, 8, 16, None, "&mtp->ks_mti"),
}

SYSINIT_LAYOUTS: Dict[str, SysinitLayout] = {
    # Before 14.0: { subsystem; order; func; udata; } in an array sorted by an
    # exchange sort (mi_startup, linker_file_sysinit).
    "array": SysinitLayout("array", 24, 0, 4, None, 8, 16, stable_sort=False),
    # 14.0 and later: { subsystem; order; STAILQ_ENTRY next; func; udata; }
    # merge-sorted (STAILQ_MERGESORT, stable).
    "stailq": SysinitLayout("stailq", 32, 0, 4, 8, 16, 24, stable_sort=True),
}

TSLOG = TslogLayout(func_offset=0, data_offset=8, name_offset=16)

RELEASES: Tuple[Release, ...] = (
    Release(12, 1200000, 1299999, ("ks_magic",), ("array",), False,
            "ks_magic/ks_handle layout; end of life"),
    Release(13, 1300000, 1399999, ("ks_version", "ks_magic"), ("array",), True,
            "ks_version with the internal struct embedded as ks_mti (13-CURRENT before Nov 2020: ks_magic)"),
    Release(14, 1400000, 1499999, ("ks_version",), ("stailq", "array"), True,
            "struct sysinit gained its STAILQ link during 14-CURRENT (2023)"),
    Release(15, 1500000, 1599999, ("ks_version",), ("stailq",), True,
            "same layouts as 14"),
)

# (malloc_type layout, sysinit layout) -> what they say about the release
# when the image has no osreldate.
LAYOUT_ERAS: Dict[Tuple[str, str], Tuple[str, int]] = {
    ("ks_magic", "array"): ("FreeBSD 12 or older", 12),
    ("ks_version", "array"): ("FreeBSD 13 (or 14-CURRENT before 2023)", 13),
    ("ks_version", "stailq"): ("FreeBSD 14.0 or newer", 14),
}


def release_for(osreldate: int) -> Optional[Release]:
    """The table row whose range holds ``osreldate``, or None."""
    for rel in RELEASES:
        if rel.first <= osreldate <= rel.last:
            return rel
    return None


def supported_range() -> str:
    """Human-readable span of the table, for error messages."""
    return f"FreeBSD {RELEASES[0].major} to {RELEASES[-1].major}"


def plausible_version(value: int) -> bool:
    """Whether ``value`` looks like an M_VERSION (a YYYYMMDDNN date)."""
    return M_VERSION_RANGE[0] <= value <= M_VERSION_RANGE[1]
