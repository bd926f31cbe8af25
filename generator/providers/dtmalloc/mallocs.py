"""Malloc-type discovery: the ``dtmalloc::<type>:`` probes a kernel and its modules will have.

dtrace_dtmalloc(4) names its probes after each malloc(9) type's short
description, and a type exists once ``malloc_init()`` has linked it in.  Every
``MALLOC_DEFINE`` -- global or ``static`` -- registers its type through a
SYSINIT whose function is ``malloc_init`` and whose argument is the type, so
walking ``set_sysinit_set`` finds all of them, static ones included, which a
symbol-table scan alone would have to guess at.  The walk:

1. reads the pointers of ``set_sysinit_set`` (in a ``.ko`` they exist only as
   relocations, which ``KernelImage.read`` applies and ``relocs_in`` names);
2. reads each ``struct sysinit`` in the layout of the target release
   (``generator/malloc_layouts.py``), following the TSLOG shim when present;
3. keeps the entries whose function is ``malloc_init`` and reads the
   ``struct malloc_type`` they point at: ``ks_version`` (``ks_magic`` up to 12)
   and ``ks_shortdesc``;
4. names each type by the STT_OBJECT symbol of ``sizeof(struct malloc_type)``
   at its address, and reports objects of that size that look like types but
   that no SYSINIT registers;
5. orders the types as the kernel registers them (kernel first, then modules
   in load order) to say which of several types with one probe name stock
   dtmalloc gives the probes to.

The FreeBSD release comes from the ``osreldate`` and ``version`` symbols where
the image has them, and from which layouts fit its data otherwise.
"""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

from . import layouts as L
from ...common.errors import UserError
from ...image.elf import KernelImage
from ...image import open_image

_STT_OBJECT = 1
_STT_FUNC = 2
_SHN_SPECIAL = (0, 0xFFF1, 0xFFF2)  # UNDEF, ABS, COMMON: no section to read
_BINDINGS = {0: "local", 1: "global", 2: "weak"}
_SET = "sysinit_set"
_SET_SECTION = "set_" + _SET


# -- records ------------------------------------------------------------


@dataclass(frozen=True)
class Pointer:
    """A pointer-sized field: its value, and the symbol a relocation names (ET_REL)."""

    value: Optional[int]  # the address it holds; None when it points outside the file
    symbol: Optional[str]  # the relocation's symbol, None in a linked image


@dataclass(frozen=True)
class Sysinit:
    """One ``struct sysinit`` of ``set_sysinit_set``, shim already followed."""

    position: int  # index in the linker set
    address: int  # where the struct is
    subsystem: int
    order: int
    func: Pointer  # the function malloc_init-style code runs
    udata: Pointer  # its argument: the struct malloc_type * for malloc_init
    tslog: bool  # reached through sysinit_tslog_shim


@dataclass(frozen=True)
class TypeRef:
    """Which type a duplicate defers to: enough to find it in the listing."""

    symbol: Optional[str]
    file: str
    address: int


@dataclass(frozen=True)
class MallocType:
    """One registered malloc type and the probe name stock dtmalloc gives it."""

    name: str  # ks_shortdesc, decoded for display
    raw: bytes  # ks_shortdesc as the kernel holds it
    probe: str  # the probe's function part: whitespace to '_', truncated
    symbol: Optional[str]  # the STT_OBJECT at its address, None when the image has none
    binding: Optional[str]  # "local", "global" or "weak"
    source: Optional[str]  # STT_FILE of a local symbol
    file: str  # the ELF file it lives in (kernel or .ko), as given
    address: int  # its address in kinstkit's view of that file (ET_REL: synthetic layout)
    ident: int  # the ks_version (ks_magic) it carries
    expected_ident: int  # what the kernel's malloc_init accepts
    tslog: bool  # registered through the TSLOG shim
    duplicate_of: Optional[TypeRef] = None  # the type that gets this probe name's probes

    @property
    def version_mismatch(self) -> bool:
        """True when malloc_init would panic on this type instead of registering it."""
        return self.ident != self.expected_ident

    @property
    def qualified(self) -> str:
        """``symbol@source`` for a local symbol, else the symbol (or the address)."""
        if self.symbol is None:
            return f"{self.address:#x}"
        if self.binding == "local" and self.source:
            return f"{self.symbol}@{self.source}"
        return self.symbol

    def ref(self) -> TypeRef:
        return TypeRef(self.symbol, self.file, self.address)


@dataclass(frozen=True)
class KernelVersion:
    """What the kernel image says about its release, and how we know."""

    release: str  # "14.0-RELEASE", or a range from the layouts
    major: Optional[int]
    osreldate: Optional[int]
    version: Optional[str]  # first line of the `version` string
    source: str  # "osreldate" or "layouts"


@dataclass(frozen=True)
class Layout:
    """The layouts the target kernel uses and the identity word its malloc_init wants."""

    malloc_type: L.MallocTypeLayout
    sysinit: L.SysinitLayout
    ident: int  # M_VERSION (or M_MAGIC)
    release: Optional[L.Release]  # the table row, when osreldate named one


@dataclass(frozen=True)
class Discovery:
    """Every malloc type of a kernel and its modules, in registration order."""

    kernel: str
    modules: Tuple[str, ...]
    version: KernelVersion
    layout: Layout
    types: Tuple[MallocType, ...]
    warnings: Tuple[str, ...]
    # The kernel and then each module as opened, handed on so that the
    # generated headers' provenance reads them without opening them again.
    images: Tuple[KernelImage, ...] = field(default=(), compare=False, repr=False)

    @property
    def probed(self) -> Tuple[MallocType, ...]:
        """The types that get probes: one per probe name, as stock dtmalloc picks."""
        return tuple(t for t in self.types if t.duplicate_of is None and not t.version_mismatch)


# -- reading on top of KernelImage ---------------------------------------


def probe_bytes(shortdesc: bytes) -> bytes:
    """dtmalloc's probe function name: strlcpy into DTRACE_FUNCNAMELEN, isspace() to '_'."""
    cut = shortdesc[: L.DTRACE_FUNCNAMELEN - 1]
    return bytes(0x5F if c in L.ISSPACE else c for c in cut)


def probe_name(shortdesc: bytes) -> str:
    """``probe_bytes`` decoded for display (non-UTF-8 bytes as backslash escapes)."""
    return _text(probe_bytes(shortdesc))


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "backslashreplace")


def read_u32(img: KernelImage, address: int) -> int:
    return struct.unpack("<I", img.read(address, 4))[0]


def read_pointer(img: KernelImage, address: int) -> Pointer:
    """The pointer at ``address``; in a module, also the symbol its relocation names.

    A module's pointers to kernel functions (``malloc_init``) stay unresolved in
    the file: the relocation's symbol is then the only thing that says where
    they point.
    """
    raw = struct.unpack("<Q", img.read(address, L.POINTER_SIZE))[0]
    if img.e_type != "ET_REL":
        return Pointer(raw, None)
    for r in img.relocs_in(address, L.POINTER_SIZE):
        if r.address == address and r.width == L.POINTER_SIZE:  # the ISA's 64-bit absolute pointer relocation
            return Pointer(raw if r.resolved else None, r.symbol or None)
    return Pointer(raw, None)


@dataclass(frozen=True)
class _Object:
    name: str
    size: int
    binding: str
    source: Optional[str]


class SymbolIndex:
    """Functions and data objects of one image, by address.

    Built from ``KernelImage.symbols()``; an ET_REL symbol's value is relative
    to its section, so it is placed where ``KernelImage`` laid that section out.
    """

    def __init__(self, img: KernelImage):
        self.functions: Dict[int, Set[str]] = {}
        self.objects: Dict[int, List[_Object]] = {}
        self.by_name: Dict[str, List[Tuple[int, int]]] = {}
        for s in img.symbols():
            if s.type not in (_STT_OBJECT, _STT_FUNC) or s.shndx in _SHN_SPECIAL:
                continue
            addr = _symbol_address(img, s.value, s.shndx)
            if addr is None:
                continue
            if s.type == _STT_FUNC:
                self.functions.setdefault(addr, set()).add(s.name)
            else:
                obj = _Object(s.name, s.size, _BINDINGS.get(s.bind, "other"), s.file)
                self.objects.setdefault(addr, []).append(obj)
            self.by_name.setdefault(s.name, []).append((addr, s.size))

    def names(self, ptr: Pointer) -> Set[str]:
        """Every function name a pointer may designate."""
        out = {ptr.symbol} if ptr.symbol else set()
        if ptr.value is not None:
            out |= self.functions.get(ptr.value, set())
        return out

    def object_at(self, address: int, size: int) -> Optional[_Object]:
        """The data symbol at ``address``, preferring one of ``size`` bytes and a global name."""
        cands = self.objects.get(address, [])
        if not cands:
            return None
        return sorted(cands, key=lambda o: (o.size != size, o.binding != "global", o.name))[0]


def _symbol_address(img: KernelImage, value: int, shndx: int) -> Optional[int]:
    if img.e_type != "ET_REL":
        return value
    sec = img.section_by_index(shndx)
    return None if sec is None else sec.addr + value


# -- step 1: the linker set ---------------------------------------------


def sysinit_pointers(img: KernelImage, syms: SymbolIndex) -> List[int]:
    """Addresses of the entries of ``set_sysinit_set``, in linker-set order."""
    start, end = _set_bounds(img, syms)
    out = []
    for pos in range(start, end, L.POINTER_SIZE):
        ptr = read_pointer(img, pos)
        if ptr.value is None:
            raise UserError(f"{img.path}: {_SET_SECTION} entry at {pos:#x} points outside the file")
        out.append(ptr.value)
    return out


def _set_bounds(img: KernelImage, syms: SymbolIndex) -> Tuple[int, int]:
    for sec in img.sections:
        if sec.name == _SET_SECTION:
            return sec.addr, sec.addr + sec.size
    start = syms.by_name.get(f"__start_{_SET_SECTION}")
    stop = syms.by_name.get(f"__stop_{_SET_SECTION}")
    if start and stop:
        return start[0][0], stop[0][0]
    raise UserError(
        f"{img.path}: no {_SET_SECTION} section: not a FreeBSD kernel or module "
        "(or one stripped of its linker sets); pass /boot/kernel/kernel or a .ko"
    )


# -- step 2: struct sysinit ---------------------------------------------


def _fits(img: KernelImage, syms: SymbolIndex, address: int, lay: L.SysinitLayout) -> bool:
    """Whether the struct at ``address`` reads sensibly in layout ``lay``."""
    sec = img.section_at(address)
    if sec is None or address + lay.size > sec.addr + sec.size:
        return False
    if read_u32(img, address + lay.subsystem_offset) > L.SI_MAX:
        return False
    if read_u32(img, address + lay.order_offset) > L.SI_MAX:
        return False
    if lay.link_offset is not None and read_pointer(img, address + lay.link_offset) != Pointer(0, None):
        return False
    return bool(syms.names(read_pointer(img, address + lay.func_offset)))


def choose_sysinit_layout(
    img: KernelImage, syms: SymbolIndex, entries: Sequence[int], candidates: Sequence[str]
) -> L.SysinitLayout:
    """The first candidate layout every entry of the set fits; UserError if none does."""
    for name in candidates:
        lay = L.SYSINIT_LAYOUTS[name]
        if all(_fits(img, syms, a, lay) for a in entries):
            return lay
    tried = ", ".join(f"{n} ({L.SYSINIT_LAYOUTS[n].size} bytes)" for n in candidates)
    raise UserError(
        f"{img.path}: unsupported struct sysinit layout: the {_SET_SECTION} entries fit none of {tried}; "
        f"kinstkit knows {L.supported_range()}"
    )


def read_sysinits(
    img: KernelImage, syms: SymbolIndex, entries: Sequence[int], lay: L.SysinitLayout
) -> List[Sysinit]:
    """Every entry, with ``options TSLOG``'s shim replaced by the function it wraps."""
    out = []
    for pos, addr in enumerate(entries):
        func = read_pointer(img, addr + lay.func_offset)
        udata = read_pointer(img, addr + lay.udata_offset)
        tslog = L.TSLOG_SHIM in syms.names(func) and udata.value is not None
        if tslog:
            func = read_pointer(img, udata.value + L.TSLOG.func_offset)
            udata = read_pointer(img, udata.value + L.TSLOG.data_offset)
        out.append(
            Sysinit(
                position=pos,
                address=addr,
                subsystem=read_u32(img, addr + lay.subsystem_offset),
                order=read_u32(img, addr + lay.order_offset),
                func=func,
                udata=udata,
                tslog=tslog,
            )
        )
    return out


def registration_order(entries: Sequence[Sysinit], lay: L.SysinitLayout) -> List[Sysinit]:
    """The order the kernel runs the entries in: sorted by (subsystem, order).

    14.0 and later merge-sort a list (stable); earlier kernels run an exchange
    sort over the array, which can reorder equal keys, so it is replayed as is.
    """
    key = lambda s: (s.subsystem, s.order)  # noqa: E731
    if lay.stable_sort:
        return sorted(entries, key=key)
    items = list(entries)
    for i in range(len(items)):
        for j in range(i + 1, len(items)):
            if key(items[i]) > key(items[j]):
                items[i], items[j] = items[j], items[i]
    return items


# -- step 3: struct malloc_type -----------------------------------------


def malloc_inits(syms: SymbolIndex, ordered: Sequence[Sysinit]) -> List[Sysinit]:
    """The entries whose function is malloc_init: one per MALLOC_DEFINE."""
    return [s for s in ordered if L.MALLOC_INIT in syms.names(s.func)]


def identity_words(img: KernelImage, inits: Sequence[Sysinit]) -> List[int]:
    """The word at ks_version/ks_magic (offset 8 in every layout) of each type."""
    off = L.MALLOC_TYPE_LAYOUTS["ks_version"].ident_offset
    return [struct.unpack("<Q", img.read(s.udata.value + off, 8))[0] for s in inits if s.udata.value is not None]


def choose_malloc_layout(path: str, words: Sequence[int], candidates: Sequence[str]) -> Tuple[L.MallocTypeLayout, int]:
    """The struct malloc_type layout and the identity word the kernel's malloc_init expects.

    The kernel's own types were compiled with its M_VERSION, so the value most
    of them carry is the one its malloc_init accepts (M_VERSION is never
    hard-coded: it changes with the structure).
    """
    counts = Counter(words)
    top = max(counts.values())
    expected = next(w for w in words if counts[w] == top)
    if expected == L.M_MAGIC:
        want = "ks_magic"
    elif L.plausible_version(expected):
        want = "ks_version"
    else:
        raise UserError(
            f"{path}: unsupported struct malloc_type layout: its types carry {expected:#x} at offset 8, "
            f"neither ks_magic {L.M_MAGIC} nor a YYYYMMDDNN ks_version; kinstkit knows {L.supported_range()}"
        )
    if want not in candidates:
        raise UserError(
            f"{path}: its malloc types use the {want} layout, which its osreldate's release does not have "
            f"({', '.join(candidates)}); the image's osreldate and its data disagree"
        )
    return L.MALLOC_TYPE_LAYOUTS[want], expected


def read_types(
    img: KernelImage,
    syms: SymbolIndex,
    inits: Sequence[Sysinit],
    lay: L.MallocTypeLayout,
    expected: int,
    warnings: List[str],
) -> List[MallocType]:
    """One MallocType per malloc_init entry, in registration order."""
    out = []
    for s in inits:
        t = _read_type(img, syms, s, lay, expected, warnings)
        if t is not None:
            out.append(t)
    return out


def _read_type(
    img: KernelImage, syms: SymbolIndex, s: Sysinit, lay: L.MallocTypeLayout, expected: int, warnings: List[str]
) -> Optional[MallocType]:
    addr = s.udata.value
    if addr is None or img.section_at(addr) is None:
        warnings.append(f"{img.path}: SYSINIT at {s.address:#x} calls malloc_init on a type outside the file; skipped")
        return None
    ident = struct.unpack("<Q", img.read(addr + lay.ident_offset, 8))[0]
    desc_ptr = read_pointer(img, addr + lay.shortdesc_offset)
    desc = img.read_cstring(desc_ptr.value) if desc_ptr.value else None
    if desc is None:
        warnings.append(f"{img.path}: malloc type at {addr:#x} has no readable ks_shortdesc; skipped")
        return None
    obj = syms.object_at(addr, lay.size)
    if obj is not None and obj.size != lay.size:
        warnings.append(
            f"{img.path}: {obj.name} at {addr:#x} is {obj.size} bytes, not sizeof(struct malloc_type) = {lay.size}"
        )
    return MallocType(
        name=_text(desc),
        raw=desc,
        probe=probe_name(desc),
        symbol=obj.name if obj else None,
        binding=obj.binding if obj else None,
        source=obj.source if obj else None,
        file=img.path,
        address=addr,
        ident=ident,
        expected_ident=expected,
        tslog=s.tslog,
    )


def unregistered_lookalikes(
    img: KernelImage, syms: SymbolIndex, found: Iterable[int], lay: L.MallocTypeLayout, expected: int
) -> List[str]:
    """Objects shaped like a malloc type (size and identity word) that no SYSINIT registers."""
    seen = set(found)
    out = []
    for addr in sorted(syms.objects):
        if addr in seen:
            continue
        for obj in syms.objects[addr]:
            if obj.size != lay.size or img.section_at(addr) is None:
                continue
            if struct.unpack("<Q", img.read(addr + lay.ident_offset, 8))[0] == expected:
                out.append(
                    f"{img.path}: {obj.name} at {addr:#x} looks like a malloc type, but no SYSINIT registers it; "
                    "it gets probes only if code calls malloc_init() on it"
                )
    return out


# -- release ------------------------------------------------------------


def read_release_symbols(img: KernelImage, syms: SymbolIndex) -> Tuple[Optional[int], Optional[str]]:
    """``osreldate`` and the first line of ``version``, where the image has them."""
    osreldate = version = None
    for addr, size in syms.by_name.get(L.OSRELDATE_SYMBOL, []):
        if size == 4 and img.section_at(addr) is not None:
            osreldate = read_u32(img, addr)
    for addr, size in syms.by_name.get(L.VERSION_SYMBOL, []):
        if size and img.section_at(addr) is not None:
            raw = img.read_cstring(addr, size)
            version = _text(raw).splitlines()[0].strip() if raw else None
    return osreldate, version


def _release_name(version: Optional[str], osreldate: int) -> str:
    words = version.split() if version else []
    if len(words) >= 2 and words[0] == "FreeBSD":
        return words[1]
    return f"FreeBSD {osreldate // 100000} (osreldate {osreldate})"


# -- putting it together ------------------------------------------------


@dataclass(frozen=True)
class _Image:
    """One opened file and its sysinit entries in registration order."""

    img: KernelImage
    syms: SymbolIndex
    inits: Tuple[Sysinit, ...]
    sysinit: L.SysinitLayout


def _walk(img: KernelImage, candidates: Sequence[str], syms: Optional[SymbolIndex] = None) -> _Image:
    syms = syms or SymbolIndex(img)
    entries = sysinit_pointers(img, syms)
    if not entries:
        raise UserError(f"{img.path}: no malloc types: its {_SET_SECTION} is empty")
    lay = choose_sysinit_layout(img, syms, entries, candidates)
    ordered = registration_order(read_sysinits(img, syms, entries, lay), lay)
    inits = malloc_inits(syms, ordered)
    if not inits:
        raise UserError(
            f"{img.path}: no malloc types: none of its {len(entries)} SYSINITs calls {L.MALLOC_INIT} "
            "(no MALLOC_DEFINE in this file)"
        )
    return _Image(img, syms, tuple(inits), lay)


def _kernel(path: str) -> Tuple[_Image, KernelVersion, Layout]:
    img = open_image(path)
    syms = SymbolIndex(img)
    osreldate, version = read_release_symbols(img, syms)
    release = None
    if osreldate is not None:
        release = L.release_for(osreldate)
        if release is None:
            raise UserError(
                f"{path}: unsupported layout version: osreldate {osreldate} (FreeBSD {osreldate // 100000}) is "
                f"outside kinstkit's layout table ({L.supported_range()}), so its struct malloc_type and "
                "struct sysinit layouts are unverified"
            )
    sys_cands = release.sysinits if release else tuple(L.SYSINIT_LAYOUTS)
    mt_cands = release.malloc_types if release else tuple(L.MALLOC_TYPE_LAYOUTS)
    walked = _walk(img, sys_cands, syms)
    mt, ident = choose_malloc_layout(path, identity_words(img, walked.inits), mt_cands)
    if release is not None:
        kv = KernelVersion(_release_name(version, osreldate), release.major, osreldate, version, "osreldate")
    else:
        label, major = L.LAYOUT_ERAS[(mt.name, walked.sysinit.name)]
        kv = KernelVersion(label, major, None, version, "layouts")
    return walked, kv, Layout(mt, walked.sysinit, ident, release)


def _module(path: str, layout: Layout) -> _Image:
    img = open_image(path)
    if img.e_type != "ET_REL":
        raise UserError(f"{path}: is {img.e_type}, not a .ko module (ET_REL); pass it as --kernel instead")
    try:
        return _walk(img, (layout.sysinit.name,))
    except UserError as e:
        others = tuple(n for n in L.SYSINIT_LAYOUTS if n != layout.sysinit.name)
        try:
            _walk(img, others)
        except UserError:
            raise e
        raise UserError(
            f"{path}: its struct sysinit layout differs from the kernel's ({layout.sysinit.name}, "
            f"{layout.sysinit.size} bytes): built for another FreeBSD release"
        )


def mark_duplicates(types: Sequence[MallocType]) -> List[MallocType]:
    """Point every type but one of each probe name at the one stock dtmalloc probes.

    malloc_init() links each new type at the head of the list, and dtmalloc's
    provide callback walks the list from the head, skipping names that already
    have probes: the most recently registered type of a name wins (when all are
    loaded before dtrace first asks for probes).  Types malloc_init would
    refuse (a ks_version mismatch) never reach the list and win nothing.
    """
    winners: Dict[str, MallocType] = {}
    for t in types:
        if not t.version_mismatch:
            winners[t.probe] = t
    out = []
    for t in types:
        w = winners.get(t.probe)
        out.append(t if w is None or w is t else replace(t, duplicate_of=w.ref()))
    return out


def discover(kernel: str, modules: Sequence[str] = ()) -> Discovery:
    """Every malloc type of ``kernel`` and then of each module, in registration order."""
    walked, version, layout = _kernel(kernel)
    images = [walked] + [_module(m, layout) for m in modules]
    warnings: List[str] = []
    if version.osreldate is not None and version.version and not version.version.startswith("FreeBSD "):
        warnings.append(f"{kernel}: version string {version.version!r} does not name a FreeBSD release")
    types: List[MallocType] = []
    for im in images:
        found = read_types(im.img, im.syms, im.inits, layout.malloc_type, layout.ident, warnings)
        warnings += unregistered_lookalikes(
            im.img, im.syms, (t.address for t in found), layout.malloc_type, layout.ident
        )
        types += found
    for t in types:
        if t.version_mismatch:
            warnings.append(
                f"{t.file}: {t.qualified} ({t.name!r}) has {layout.malloc_type.name} {t.ident}, the kernel expects "
                f"{layout.ident}: malloc_init() panics on it; rebuild it against the kernel's sys/ tree"
            )
    return Discovery(kernel, tuple(modules), version, layout, tuple(mark_duplicates(types)), tuple(warnings),
                     tuple(im.img for im in images))
