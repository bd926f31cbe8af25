"""Offline checks of a built ``.ko`` against the kernel it is meant for.

A module that was linked for the wrong machine, that lacks its module
metadata, or that references a symbol the target kernel does not export is
only refused by ``kldload`` on the target machine.  These checks find the same
problems from the files alone, the way FreeBSD's kernel linker
(``sys/kern/link_elf_obj.c``, ``kern_linker.c``) will look at them:

* the ELF header: ELF64, little-endian, ``ET_REL`` (amd64 modules are
  ``ld -r`` output) and the kernel's machine;
* ``set_modmetadata_set``: the ``struct mod_metadata`` records that
  ``DECLARE_MODULE``, ``MODULE_DEPEND`` and ``MODULE_VERSION`` emit, read
  through the file's relocations, because in an unlinked object every pointer
  field is zero and a RELA entry says where it points;
* ``set_sysinit_set``: it must exist and hold the ``module_register_init``
  entry of each module the file declares -- without it the kernel never calls
  the module's event handler;
* every undefined symbol: the kernel linker resolves it in the kernel and in
  the files the module depends on (``MODULE_DEPEND``), global or weak
  definitions only.  ``__start_``/``__stop_`` of a linker set the module has
  are filled in by the loader; an undefined weak symbol may stay 0.  A
  dependency whose ``.ko`` is not at hand is reported as *not checked*, with
  the symbols that were assumed to come from it -- never as a pass.

Each failure is one line that names the section, symbol or record.  A file
that cannot be read at all is a ``UserError``.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

from ..common.errors import UserError
from .. import isa as isa_registry
from ..image.elf import EM_NAMES, ET_NAMES, KernelImage, read_ident
from ..image import open_image

# ELF symbol bindings and the undefined section index.
_STB_LOCAL, _STB_GLOBAL, _STB_WEAK = 0, 1, 2
_SHN_UNDEF = 0

# sys/sys/module.h
MDT_DEPEND, MDT_MODULE, MDT_VERSION, MDT_PNP_INFO = 1, 2, 3, 4
MDT_STRUCT_VERSION = 1
METADATA_SET = "set_modmetadata_set"
SYSINIT_SET = "set_sysinit_set"
MODULE_REGISTER_INIT = "module_register_init"
_PTR = 8
_MOD_METADATA = struct.Struct("<iiQQ")  # md_version, md_type, md_data, md_cval
_MOD_DEPEND = struct.Struct("<iii")  # md_ver_minimum, md_ver_preferred, md_ver_maximum


@dataclass(frozen=True)
class Record:
    """One ``struct mod_metadata`` entry, with what its ``md_data`` points to."""

    kind: str  # "module", "depend", "version", "pnp" or "type N"
    name: str  # md_cval: the module, the dependency or the versioned module
    data: int = 0  # address md_data points to
    version: Optional[int] = None  # MDT_VERSION
    minimum: Optional[int] = None  # MDT_DEPEND
    preferred: Optional[int] = None
    maximum: Optional[int] = None

    def line(self) -> str:
        if self.kind == "depend":
            rng = f"{self.minimum}" if self.minimum == self.maximum else f"{self.minimum}..{self.maximum}"
            return f"depends on {self.name} {rng} (preferred {self.preferred})"
        if self.kind == "version":
            return f"version {self.name} {self.version}"
        if self.kind == "module":
            return f"module {self.name}"
        return f"{self.kind} {self.name}"


@dataclass
class Dependency:
    """A declared dependency and how it was (or was not) checked."""

    name: str
    where: str  # "kernel", a .ko path, or "" when no file was found
    exports: Set[str] = field(default_factory=set)


@dataclass
class KoReport:
    """The result of checking one file: every failure, and what was found on the way."""

    path: str
    kernel: str
    machine: str = ""
    build_id: Optional[str] = None
    records: List[Record] = field(default_factory=list)
    failures: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    resolved: Dict[str, str] = field(default_factory=dict)  # symbol -> "kernel" or dependency file
    assumed: Dict[str, List[str]] = field(default_factory=dict)  # unchecked dependency -> symbols
    weak_unresolved: List[str] = field(default_factory=list)
    kernel_table: str = ""

    @property
    def ok(self) -> bool:
        return not self.failures

    def fail(self, text: str) -> None:
        self.failures.append(f"{self.path}: {text}")

    def dependencies(self) -> List[Record]:
        return [r for r in self.records if r.kind == "depend"]

    def versions(self) -> List[Record]:
        return [r for r in self.records if r.kind == "version"]

    def lines(self) -> List[str]:
        """The report a person reads: identity, metadata, symbol resolution, verdict."""
        out = [f"{self.path}: {self.machine or '?'} module, build-id {self.build_id or '(none)'}"]
        out += [f"  {r.line()}" for r in self.records]
        by_where: Dict[str, int] = {}
        for where in self.resolved.values():
            by_where[where] = by_where.get(where, 0) + 1
        if by_where:
            parts = ", ".join(f"{n} in {w}" for w, n in sorted(by_where.items()))
            out.append(f"  undefined symbols resolved: {parts} (kernel symbols from its {self.kernel_table})")
        for deps, syms in sorted(self.assumed.items()):
            files = ", ".join(f"{d}.ko" for d in deps.split(", "))
            out.append(
                f"  NOT CHECKED: {len(syms)} undefined symbol{'s' if len(syms) != 1 else ''} that the kernel does "
                f"not export, assumed to come from the declared dependencies {deps} (no {files} found; pass "
                f"--dep-module or --module-path): {', '.join(sorted(syms))}"
            )
        if self.weak_unresolved:
            out.append(f"  weak, left 0 by the loader: {', '.join(sorted(self.weak_unresolved))}")
        out += [f"  note: {n}" for n in self.notes]
        verdict = "ok" if self.ok else f"FAILED ({len(self.failures)} problem{'s' if len(self.failures) != 1 else ''})"
        if self.ok and self.assumed:
            verdict = "ok, with unchecked dependencies"
        out.append(f"  check-ko: {verdict}")
        return out

    def to_json(self) -> Dict[str, object]:
        return {
            "path": self.path,
            "kernel": self.kernel,
            "machine": self.machine,
            "build_id": self.build_id,
            "ok": self.ok,
            "failures": list(self.failures),
            "notes": list(self.notes),
            "modules": [r.name for r in self.records if r.kind == "module"],
            "depends": [
                {"name": r.name, "minimum": r.minimum, "preferred": r.preferred, "maximum": r.maximum}
                for r in self.dependencies()
            ],
            "versions": [{"name": r.name, "version": r.version} for r in self.versions()],
            "resolved": dict(sorted(self.resolved.items())),
            "assumed": {k: sorted(v) for k, v in sorted(self.assumed.items())},
            "weak_unresolved": sorted(self.weak_unresolved),
        }


# -- reading metadata through relocations ---------------------------------------


def _pointer(img: KernelImage, address: int) -> Tuple[int, Optional[str]]:
    """The pointer stored at ``address`` and, in an ET_REL or ET_DYN module, the symbol its relocation names.

    ``KernelImage.read`` returns the bytes with the relocations it could
    resolve applied, so a pointer to data of the same file reads as that
    data's (synthetic) address; a pointer to an undefined symbol reads as 0
    and only the relocation says what it designates.
    """
    value = struct.unpack("<Q", img.read(address, _PTR))[0]
    if img.e_type == "ET_DYN":  # a -Bshareable module (arm64, riscv): the loader's relocation decides
        dyn = img.dynamic_relocations().get(address)
        if dyn is None:
            return value, None
        if not dyn.symbol:
            return dyn.addend, None  # *_RELATIVE: the addend is the address
        return (value if dyn.resolved else 0), dyn.symbol
    if img.e_type != "ET_REL":
        return value, None
    for r in img.relocs_in(address, _PTR):
        if r.address == address:
            return (value if r.resolved else 0), (r.symbol or None)
    return value, None


def _cstring(img: KernelImage, address: int, limit: int = 1024) -> Optional[str]:
    raw = img.read_cstring(address, limit)
    return None if raw is None else raw.decode("utf-8", "backslashreplace")


def _section(img: KernelImage, name: str):
    return next((s for s in img.sections if s.name == name), None)


def _set_entries(img: KernelImage, name: str) -> List[Tuple[int, Optional[str]]]:
    """The pointers of linker set ``name`` (section ``set_<name>``) as (address, symbol)."""
    sec = _section(img, name)
    if sec is None:
        return []
    return [_pointer(img, sec.addr + off) for off in range(0, sec.size - sec.size % _PTR, _PTR)]


def read_metadata(img: KernelImage, report: Optional[KoReport] = None) -> List[Record]:
    """Every ``struct mod_metadata`` of ``set_modmetadata_set``, in set order.

    An entry whose pointers cannot be followed is reported (when ``report``
    is given) and skipped.
    """
    out: List[Record] = []
    for i, (addr, _sym) in enumerate(_set_entries(img, METADATA_SET)):
        where = f"{METADATA_SET} entry {i}"
        if addr == 0 or img.section_at(addr) is None:
            if report:
                report.fail(f"{where}: the pointer does not lead to data in the file")
            continue
        try:
            version, mtype, _, _ = _MOD_METADATA.unpack(img.read(addr, _MOD_METADATA.size))
        except UserError:
            if report:
                report.fail(f"{where}: struct mod_metadata runs past the end of its section")
            continue
        data, _ = _pointer(img, addr + 8)
        cval, _ = _pointer(img, addr + 16)
        name = _cstring(img, cval) if cval else None
        if version != MDT_STRUCT_VERSION:
            if report:
                report.fail(f"{where}: md_version {version}, the kernel reads version {MDT_STRUCT_VERSION}")
            continue
        if name is None:
            if report:
                report.fail(f"{where}: md_cval does not point to a string in the file")
            continue
        out.append(_record(img, mtype, name, data, where, report))
    return out


def _record(img: KernelImage, mtype: int, name: str, data: int, where: str, report: Optional[KoReport]) -> Record:
    if mtype == MDT_DEPEND:
        try:
            lo, pref, hi = _MOD_DEPEND.unpack(img.read(data, _MOD_DEPEND.size))
        except UserError:
            if report:
                report.fail(f"{where}: MODULE_DEPEND record for {name} has no struct mod_depend")
            return Record("depend", name, data)
        return Record("depend", name, data, minimum=lo, preferred=pref, maximum=hi)
    if mtype == MDT_VERSION:
        try:
            (ver,) = struct.unpack("<i", img.read(data, 4))
        except UserError:
            if report:
                report.fail(f"{where}: MODULE_VERSION record for {name} has no struct mod_version")
            return Record("version", name, data)
        return Record("version", name, data, version=ver)
    if mtype == MDT_MODULE:
        return Record("module", name, data)
    if mtype == MDT_PNP_INFO:
        return Record("pnp", name, data)
    return Record(f"type {mtype}", name, data)


def _registered_modules(img: KernelImage) -> Set[int]:
    """``moduledata`` addresses that a ``module_register_init`` SYSINIT passes as its argument.

    ``struct sysinit`` grew a list link in FreeBSD 14 (func at offset 16,
    before: 8), so the function pointer is found by its relocation, and the
    argument is the field after it.
    """
    out: Set[int] = set()
    for addr, _ in _set_entries(img, SYSINIT_SET):
        if not addr:
            continue
        for field in range(addr, addr + 32, _PTR):
            if _pointer(img, field)[1] == MODULE_REGISTER_INIT:
                out.add(_pointer(img, field + _PTR)[0])
    return out


# -- symbol tables ----------------------------------------------------------------


def exported_symbols(img: KernelImage) -> Tuple[Set[str], str]:
    """The names a module can link against in the kernel ``img``: its defined global or weak symbols,
    from the table the kernel linker searches (``KernelImage.dynamic_symbols``); and that table's name."""
    syms, table = img.dynamic_symbols()
    if not table:
        raise UserError(f"{img.path}: no symbol table (.dynsym or .symtab); it cannot be checked against")
    names = {s.name for s in syms if s.shndx != _SHN_UNDEF and s.bind in (_STB_GLOBAL, _STB_WEAK) and s.name}
    return names, table


def undefined_symbols(img: KernelImage) -> List[Tuple[str, bool]]:
    """(name, is weak) of every undefined global or weak symbol of a module."""
    out = {}
    for s in img.symbols():
        if s.shndx == _SHN_UNDEF and s.name and s.bind in (_STB_GLOBAL, _STB_WEAK):
            out[s.name] = s.bind == _STB_WEAK
    return sorted(out.items())


def _linker_set_symbol(name: str, sections: Set[str]) -> bool:
    """``__start_X``/``__stop_X`` that the loader fills in because the module has section X."""
    for prefix in ("__start_", "__stop_"):
        if name.startswith(prefix) and name[len(prefix):] in sections:
            return True
    return False


# -- the check --------------------------------------------------------------------


@dataclass(frozen=True)
class KernelFacts:
    """What a module is checked against: the kernel's exports, modules and version."""

    path: str
    machine: int
    exports: Set[str]
    table: str
    modules: Set[str]  # modules compiled into the kernel (its MDT_MODULE records)
    versions: Dict[str, int]  # MDT_VERSION records, "kernel" among them on a real kernel
    osreldate: Optional[int]


def kernel_facts(img: KernelImage) -> KernelFacts:
    """Read the target kernel, opened once by the caller (exports, built-in modules and their versions,
    osreldate)."""
    path = img.path
    hdr = read_ident(path)
    exports, table = exported_symbols(img)
    records = read_metadata(img)
    versions = {r.name: r.version for r in records if r.kind == "version" and r.version is not None}
    osreldate = None
    for s in img.symbols():
        if s.name == "osreldate" and s.shndx != _SHN_UNDEF and s.size == 4:
            try:
                osreldate = struct.unpack("<i", img.read(s.value, 4))[0]
            except UserError:
                osreldate = None
            break
    return KernelFacts(
        path=path,
        machine=hdr.e_machine,
        exports=exports,
        table=table,
        modules={r.name for r in records if r.kind == "module"},
        versions=versions,
        osreldate=osreldate,
    )


def find_dependency(name: str, dep_modules: Sequence[str], search_path: Sequence[str]) -> Optional[str]:
    """The file providing module ``name``: a ``--dep-module`` named ``name.ko`` or
    declaring that module, else ``name.ko`` in a search directory."""
    for p in dep_modules:
        if os.path.basename(p) == f"{name}.ko":
            return p
    for p in dep_modules:
        try:
            if read_ident(p).e_type == 1 and name in {
                r.name for r in read_metadata(open_image(p)) if r.kind == "module"
            }:
                return p
        except UserError:
            continue
    for d in search_path:
        cand = os.path.join(d, f"{name}.ko")
        if os.path.isfile(cand):
            return cand
    return None


def check_ko(
    path: str,
    kernel: KernelFacts,
    dep_modules: Sequence[str] = (),
    search_path: Optional[Sequence[str]] = None,
    target: Optional[str] = None,
) -> KoReport:
    """Run every check on ``path``; the report holds one line per failure.

    ``search_path`` defaults to the kernel's directory, where FreeBSD keeps
    ``dtrace.ko`` and ``opensolaris.ko`` (``/boot/kernel``, or the unpacked
    ``kernel.txz`` of ``fetch-release``).
    """
    report = KoReport(path=path, kernel=kernel.path, kernel_table=kernel.table)
    hdr = read_ident(path)
    report.machine = EM_NAMES.get(hdr.e_machine, f"machine {hdr.e_machine}")
    kernel_isa = EM_NAMES.get(kernel.machine, "")
    if target is not None and isa_registry.by_name(target).e_machine != kernel_isa:
        raise UserError(f"{kernel.path}: the kernel is {EM_NAMES.get(kernel.machine, kernel.machine)}, "
                        f"not a --target {target} kernel")
    isa = isa_registry.for_machine(kernel_isa or f"machine {kernel.machine}")
    arch, e_type = isa.name, isa.kmod.e_type
    if (hdr.elf_class, hdr.data) == (2, 1) or hdr.elf_class not in (1, 2) or hdr.data not in (1, 2):
        # The same validation as every other command: a corrupt file is bad input (one line, exit 2),
        # never a verdict.  Any architecture: a module built for another is a check that fails, below.
        open_image(path, any_machine=True)
    if hdr.elf_class != 2:
        report.fail(f"ELF32 file; a FreeBSD {arch} module is ELF64: build it for {arch}")
    if hdr.data != 1:
        report.fail(f"big-endian ELF; an {arch} module is little-endian: build it for {arch}")
    if ET_NAMES.get(hdr.e_type) != e_type:
        how = "ld -r, then ld -Bshareable" if isa.kmod.shared else "ld -r"
        report.fail(f"ELF type {hdr.type_name}; an {arch} .ko is {e_type} (kmod.mk links it with {how}): "
                    "link it as kmod.mk does")
    if hdr.e_machine != kernel.machine:
        report.fail(
            f"machine {hdr.machine_name}, but the target kernel is {kernel_isa} ({arch}): "
            f"built for the wrong architecture; build it for {arch}"
        )
    if report.failures:
        return report  # the rest would be read with the wrong layout
    img = open_image(path)
    report.build_id = img.build_id
    _check_sets(img, report)
    report.records = read_metadata(img, report)
    _check_registration(img, report)
    deps = _dependencies(report, kernel, dep_modules, search_path)
    _check_symbols(img, report, kernel, deps)
    return report


def _check_sets(img: KernelImage, report: KoReport) -> None:
    names = {s.name for s in img.sections}
    if METADATA_SET not in names:
        report.fail(
            f"no section {METADATA_SET}: no DECLARE_MODULE/MODULE_VERSION records, kldload finds no module in it"
        )
    if SYSINIT_SET not in names:
        report.fail(f"no section {SYSINIT_SET}: nothing would call the module's event handler at load")


def _check_registration(img: KernelImage, report: KoReport) -> None:
    modules = [r for r in report.records if r.kind == "module"]
    if not modules and _section(img, METADATA_SET) is not None:
        report.fail(f"{METADATA_SET} declares no module (no MDT_MODULE record)")
    registered = _registered_modules(img)
    for r in modules:
        if r.data not in registered:
            report.fail(
                f"module {r.name}: no {MODULE_REGISTER_INIT} entry for it in {SYSINIT_SET}; "
                "the kernel would never register it"
            )
    names = {r.name for r in modules}
    for r in report.versions():
        if r.name not in names:
            report.notes.append(f"version record for {r.name}, which this file does not declare as a module")


def _dependencies(
    report: KoReport, kernel: KernelFacts, dep_modules: Sequence[str], search_path: Optional[Sequence[str]]
) -> List[Dependency]:
    """Resolve each MODULE_DEPEND to the kernel or a file, checking version ranges where known."""
    own = {r.name for r in report.records if r.kind == "module"}
    if search_path is None:
        search_path = [os.path.dirname(os.path.abspath(kernel.path))]
    out: List[Dependency] = []
    for dep in report.dependencies():
        if dep.name in own:
            continue
        if dep.name == "kernel" or dep.name in kernel.modules:
            have = kernel.versions.get(dep.name)
            if have is None and dep.name == "kernel":
                have = kernel.osreldate
            if have is None:
                report.notes.append(f"dependency {dep.name}: the kernel image records no version; range not checked")
            else:
                _check_range(report, dep, have, "the target kernel")
            out.append(Dependency(dep.name, "kernel"))
            continue
        where = find_dependency(dep.name, dep_modules, search_path)
        if where is None:
            out.append(Dependency(dep.name, ""))
            continue
        dimg = open_image(where)
        versions = {r.name: r.version for r in read_metadata(dimg) if r.kind == "version"}
        if versions.get(dep.name) is None:
            report.notes.append(f"dependency {dep.name}: {where} records no version for it; range not checked")
        else:
            _check_range(report, dep, versions[dep.name], where)
        exports = {
            s.name
            for s in dimg.symbols()
            if s.shndx != _SHN_UNDEF and s.bind in (_STB_GLOBAL, _STB_WEAK) and s.name
        }
        out.append(Dependency(dep.name, where, exports))
    return out


def _check_range(report: KoReport, dep: Record, have: int, where: str) -> None:
    lo, hi = dep.minimum, dep.maximum
    if lo is None or hi is None:
        return
    if not lo <= have <= hi:
        report.fail(
            f"depends on {dep.name} {lo}..{hi}, but {where} has version {have}: "
            f"kldload would say 'depends on {dep.name} - not available or version mismatch'"
        )


def _check_symbols(img: KernelImage, report: KoReport, kernel: KernelFacts, deps: Sequence[Dependency]) -> None:
    sections = {s.name for s in img.sections}
    unchecked = [d.name for d in deps if not d.where]
    checked = [d for d in deps if d.where and d.where != "kernel"]
    for name, weak in undefined_symbols(img):
        if _linker_set_symbol(name, sections):
            continue
        if name in kernel.exports:
            report.resolved[name] = "kernel"
            continue
        dep = next((d for d in checked if name in d.exports), None)
        if dep is not None:
            report.resolved[name] = os.path.basename(dep.where)
            continue
        if weak:
            report.weak_unresolved.append(name)
            continue
        if unchecked:
            report.assumed.setdefault(", ".join(unchecked), []).append(name)
            continue
        searched = ", ".join(["the kernel"] + [os.path.basename(d.where) for d in checked])
        report.fail(f"undefined symbol {name} is not a global of {searched}; kldload would fail to link it")


# -- command line -------------------------------------------------------------------


def run_check(
    files: Iterable[str],
    kernel: str,
    dep_modules: Sequence[str] = (),
    module_path: Optional[Sequence[str]] = None,
    target: Optional[str] = None,
) -> List[KoReport]:
    facts = kernel_facts(open_image(kernel))
    return [check_ko(f, facts, dep_modules, module_path, target) for f in files]


def print_reports(reports: Sequence[KoReport], as_json: bool, out, err) -> int:
    """Reports to ``out``, one line per failure to ``err``; exit status 1 when any failed."""
    if as_json:
        out.write(json.dumps([r.to_json() for r in reports], indent=2) + "\n")
    else:
        for r in reports:
            out.write("\n".join(r.lines()) + "\n")
    for r in reports:
        for f in r.failures:
            err.write(f"check-ko: {f}\n")
    return 0 if all(r.ok for r in reports) else 1
