"""Stage 5: the generated provider sources, compiled and linked into ``.ko`` files.

``invoke build`` generates each module's sources (``sys/modules/<m>/``), then
compiles and links them the way FreeBSD's ``bsd.kmod.mk`` does, against the
``sys/`` tree the target kernel was built from:

* **On FreeBSD** it runs ``make`` with ``bsd.kmod.mk`` in the module's
  directory, with ``SYSDIR`` and an object directory outside the source tree
  (``MAKEOBJDIR``); ``make -V`` supplies the flags for the manifest.
* **Elsewhere** it cross-builds with ``clang --target=<arch>-unknown-freebsdX.Y``
  and ``ld.lld -m <emulation>`` (``-r``; then ``-Bshareable`` where the ISA's
  modules are ET_DYN), everything ISA-specific read from the target ISA's
  ``Isa.kmod`` record.  The flags are ``sys/conf/kmod.mk``'s
  (written out, with the parts that differ between releases probed in the
  tree's ``kmod.mk``) followed by what the tree's own ``sys/conf/kern.mk``
  evaluates to for the ISA and clang, then the module Makefile's additions.
  The object directory gets what ``kmod.mk`` would generate there: the
  ISA's include links (``machine``, ...), an empty ``opt_global.h`` (and
  any ``opt_*.h`` in SRCS) and ``vnode_if*.h`` from ``tools/vnode_if.awk``.
  Symbols are localised as ``EXPORT_SYMS=NO`` does and debug info is
  stripped, as ``kmod.mk`` does without ``DEBUG_FLAGS``; no CTF (ctfconvert
  is a FreeBSD tool).

Every ``.ko`` lands in ``build/<kernel-build-id>/<module>.ko`` next to
``<module>.json``: the inputs with their sha256 (generated sources, Makefile,
every header the compiler read, the kernel, the dependency modules check-ko
used), the command lines, the flags, the tool versions and the table's
build-id.  The manifest is also the stamp: when the recomputed key and every
recorded input hash match, nothing runs.

Without a ``sys/`` tree the build still generates, compiles the portable
cores with gcc and clang, links them and checks their undefined symbols
against the kernel, checks that the tables name the kernel's build-id -- and
then stops with one line saying that linking a ``.ko`` needs ``--sysdir`` or
``invoke fetch-release``.  No ``.ko`` is written and none is claimed.

This module is the order of those steps; each step is a module of its own:

* ``sources``     -- the modules: generated sources beside the hand-written C and Makefile, the table's build-id check
* ``portable``    -- the portable cores with gcc and clang, linked and resolved (no tree needed)
* ``kmodflags``   -- kmod.mk's and kern.mk's flags for a tree, and the headers kmod.mk generates
* ``mk``          -- the bmake reader that evaluates the tree's kern.mk and the module Makefile
* ``backends``    -- the registry of ways to compile and link a module: ``cross`` (clang and ld.lld, off
  FreeBSD), ``native`` (make and bsd.kmod.mk, on FreeBSD); ``--backend`` picks one
* ``objdir``      -- the object directory, and the ``Built`` record both leave
* ``manifest``    -- inputs, stamp keys and the manifest files
* ``checkko``     -- the offline checks of the finished ``.ko``
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Set, Tuple

from .. import __version__
from .. import isa as isa_registry
from ..common.errors import UserError
from ..common.files import install, sha256_file, write_json
from ..common.paths import BUILD, MODULES_OUT
from ..common.tools import Runner, run_tool, tool_version
from ..image.elf import KernelImage
from ..isa.contract import Isa
from .kmodflags import FETCH_HINT, KmodProfile
from .manifest import RECIPE, input_record, module_up_to_date, read_manifest, stamp_key
from .backends import Backend, Job, choose
from .objdir import Built
from .portable import portable_checks
from .sources import generate_module, stage_sources, table_names_kernel
from ..providers import PROVIDERS
from ..providers.contract import Provider, Selection
from ..image import open_image

if TYPE_CHECKING:
    from .checkko import KernelFacts, KoReport

DEFAULT_OUT = BUILD
DEFAULT_SRC = MODULES_OUT


@dataclass(frozen=True)
class BuildRequest:
    """Everything one ``invoke build`` is asked to do."""

    kernel: str
    sysdir: Optional[str]
    modules: Tuple[str, ...]
    target: Optional[str] = None  # the ISA to build for (None: the kernel's); any other is refused
    out_root: Path = DEFAULT_OUT
    src_root: Path = DEFAULT_SRC
    selection: Selection = Selection()  # what each provider is asked for (functions, malloc modules, ...)
    dep_modules: Tuple[str, ...] = ()  # check-ko: dependency .ko files
    module_path: Tuple[str, ...] = ()  # check-ko: directories with dependency .ko files
    backend: str = ""  # kmod.backends' name (cross, native); "": this host's default
    make: str = "make"  # the make program of a backend that runs the tree's make


@dataclass
class ModuleResult:
    """What happened to one module."""

    name: str
    ko: Optional[Path] = None
    manifest: Optional[Path] = None
    up_to_date: bool = False
    check_ok: Optional[bool] = None
    lines: List[str] = field(default_factory=list)
    failures: List[str] = field(default_factory=list)


def build_dir_for(img: KernelImage) -> Tuple[str, str, Optional[str]]:
    """(directory name, sha256, build-id) of the kernel: build/<build-id>/, or nobuildid-<sha256 prefix>."""
    if img.e_type != "ET_EXEC":
        raise UserError(f"{img.path}: an {img.e_type} file; --kernel must be the kernel image (ET_EXEC)")
    sha = img.sha256()
    bid = img.build_id
    return (bid or f"nobuildid-{sha[:16]}"), sha, bid


# -- the whole build ------------------------------------------------------------------


def build(req: BuildRequest, out=sys.stdout, run: Runner = run_tool) -> int:
    """Generate, check and (with a tree) compile and link every requested module.

    Returns the exit status: 0 when every module was built (or was up to
    date) and passed check-ko, 1 when a check failed.  A missing tree, a
    failing tool or bad input raises UserError after the offline work.
    """
    from .checkko import kernel_facts

    img = open_image(req.kernel)
    isa = target_isa(img, req.target)
    backend = choose(req.backend)
    dirname, kernel_sha, build_id = build_dir_for(img)
    bdir = req.out_root / dirname
    bdir.mkdir(parents=True, exist_ok=True)
    facts = kernel_facts(img)
    profile = _tree_profile(req, isa, backend, facts, out)
    results: List[ModuleResult] = []
    for name in req.modules:
        provider = PROVIDERS[name]
        srcdir = req.src_root / name
        srcdir.mkdir(parents=True, exist_ok=True)
        res = ModuleResult(name)
        results.append(res)
        _sources_and_offline_checks(req, img, provider, srcdir, bdir, build_id, facts.exports, res, run)
        _emit(res, out)
        if req.sysdir:
            _build_module(req, isa, backend, provider, srcdir, bdir, profile, facts, kernel_sha, build_id, res, run)
            _emit(res, out)
    if not req.sysdir:
        raise UserError(
            "linking .ko files needs the target's FreeBSD sys/ tree: pass --sysdir DIR, or run "
            f"`{FETCH_HINT}` and then `invoke build --release 14.3-RELEASE`; no .ko was made"
        )
    failed = [f for r in results for f in r.failures]
    for f in failed:
        sys.stderr.write(f"check-ko: {f}\n")
    return 1 if failed else 0


def target_isa(img: KernelImage, target: Optional[str]) -> Isa:
    """The ISA the modules are built for: the kernel's; ``--target`` may only name it again."""
    if target is not None and isa_registry.by_name(target) is not img.isa:
        raise UserError(f"--target {target}: the kernel {img.path} is {img.isa.name}; modules are built for the "
                        f"kernel's architecture (leave --target out, or name an {target} kernel)")
    return img.isa


def _tree_profile(req: BuildRequest, isa: Isa, backend: Backend, facts: KernelFacts, out) -> Optional[KmodProfile]:
    """Check the sys/ tree before any module is built: the flag profile for it where the backend needs one
    (warning when it is not the kernel's release), or None for a backend that runs the tree's make, or no tree."""
    if req.sysdir and backend.needs_profile:
        profile = KmodProfile.for_tree(Path(req.sysdir), isa)
        osreldate = facts.osreldate
        if osreldate is not None and osreldate != profile.osreldate:
            out.write(f"warning: the sys/ tree is __FreeBSD_version {profile.osreldate} but the kernel's osreldate "
                      f"is {osreldate}: build against the kernel's own sources (fetch-release of its release)\n")
        return profile
    if req.sysdir:
        sysdir = Path(req.sysdir).resolve()
        if not (sysdir / "kern").is_dir():
            raise UserError(f"{sysdir}: not a FreeBSD sys/ tree (no kern/)")
    return None


def _sources_and_offline_checks(req: BuildRequest, img: KernelImage, provider: Provider, srcdir: Path,
                                bdir: Path, build_id: Optional[str], exports: Set[str], res: ModuleResult,
                                run: Runner) -> None:
    """Steps 1 and 2, which need no tree: generate, then check the table and the portable cores."""
    _, wrote = generate_module(provider, img, req.selection, srcdir, bdir / ".stamps")
    stage_sources(provider, srcdir)
    res.lines.append(f"{provider.name}: sources {'generated' if wrote else 'unchanged'} in {srcdir}")
    bad = table_names_kernel(srcdir, provider, build_id)
    if bad:
        raise UserError(bad)
    res.lines.append(f"{provider.name}: {provider.table} names kernel build-id {build_id or '(none)'}")
    res.lines += portable_checks(provider, img.isa, srcdir, bdir / "portable" / provider.name, exports, run)


def _emit(res: ModuleResult, out) -> None:
    """Print the lines a module has collected so far (as they happen, so a later failure keeps them)."""
    for line in res.lines:
        out.write(line + "\n")
    res.lines.clear()
    out.flush()


# -- one module: compile, link, check, record -------------------------------------------


def _build_module(req: BuildRequest, isa: Isa, backend: Backend, provider: Provider, srcdir: Path, bdir: Path,
                  profile: Optional[KmodProfile], facts: KernelFacts, kernel_sha: str, build_id: Optional[str],
                  res: ModuleResult,
                  run: Runner) -> None:
    """Compile, link and check one module, unless its manifest says the same inputs built it."""
    from .checkko import check_ko

    manifest_path = bdir / f"{provider.name}.json"
    final = bdir / f"{provider.name}.ko"
    sources = module_sources(srcdir)
    sysdir = str(profile.sysdir) if profile else str(Path(req.sysdir).resolve())
    key = stamp_key(_material(req, isa, backend, provider, kernel_sha, sysdir, srcdir, sources))
    if module_up_to_date(read_manifest(manifest_path), key, final):
        res.up_to_date, res.ko, res.manifest, res.check_ok = True, final, manifest_path, True
        res.lines.append(f"{provider.name}: up to date: {final} (same inputs; nothing rebuilt)")
        return
    objdir = bdir / "obj" / provider.name
    built = backend.build(Job(provider, srcdir, objdir, Path(sysdir), profile, req.make, run))
    install(built.ko_built, final)
    search = list(req.module_path) or [os.path.dirname(os.path.abspath(req.kernel))]
    report = check_ko(str(final), facts, req.dep_modules, search, isa.name)
    inputs = _inputs(req, sources, built, _dependency_files(req, report, search))
    write_json(manifest_path, _manifest(req, isa, provider, final, sysdir, kernel_sha, build_id, built, report, inputs,
                                        key if report.ok else None))
    res.ko, res.manifest, res.check_ok = final, manifest_path, report.ok
    res.lines.append(f"{provider.name}: built {final} ({built.mode}); manifest {manifest_path}")
    res.lines += ["  " + ln.strip() for ln in report.lines()[1:]]
    res.failures += report.failures


def module_sources(srcdir: Path) -> List[Path]:
    """Every file of a module directory, the ISA folders' included (hidden files aside): the build's sources."""
    return sorted(p for p in srcdir.rglob("*")
                  if p.is_file() and not any(part.startswith(".") for part in p.relative_to(srcdir).parts))


def _material(req: BuildRequest, isa: Isa, backend: Backend, provider: Provider, kernel_sha: str, sysdir: str,
              srcdir: Path,
              sources: Sequence[Path]) -> Dict[str, object]:
    """What decides the module build's result: its stamp key is a hash of this."""
    return {
        "recipe": RECIPE,
        "module": provider.name,
        "target": isa.name,
        "mode": backend.name,
        "kernel": kernel_sha,
        "sysdir": sysdir,
        "sources": {str(p.relative_to(srcdir)): sha256_file(p) for p in sources},
        "tools": [tool_version(t) for t in backend.tools],
        "dep_modules": list(req.dep_modules),
        "module_path": list(req.module_path),
    }


def _dependency_files(req: BuildRequest, report: KoReport, search: Sequence[str]) -> List[str]:
    """The dependency ``.ko`` files check-ko could use: found in ``search`` or given with --dep-module."""
    return sorted({os.path.join(d, f"{r.name}.ko") for r in report.dependencies() for d in search
                   if os.path.isfile(os.path.join(d, f"{r.name}.ko"))} | set(req.dep_modules))


def _inputs(req: BuildRequest, sources: Sequence[Path], built: Built, dep_files: Sequence[str]) -> List[Dict[str, str]]:
    """Every file the result depends on, hashed: a change to any of them rebuilds."""
    inputs = [input_record(p, "source") for p in sources]
    inputs += [input_record(Path(h), "header") for h in built.headers]
    inputs += [input_record(Path(t), "sys/ build file") for t in built.tree_files]
    inputs += [input_record(Path(req.kernel), "kernel")]
    inputs += [input_record(Path(d), "dependency module") for d in dep_files]
    return inputs


def _manifest(req: BuildRequest, isa: Isa, provider: Provider, final: Path, sysdir: str, kernel_sha: str,
              build_id: Optional[str], built: Built, report: KoReport, inputs: List[Dict[str, str]],
              key: Optional[str]) -> Dict[str, object]:
    """The ``<m>.json`` beside ``<m>.ko``; ``key`` is None when the check failed, so it is never a stamp."""
    return {
        "kinstkit": __version__,
        "module": provider.name,
        "ko": {"path": str(final), "sha256": sha256_file(final), "build_id": report.build_id},
        "kernel": {"path": req.kernel, "sha256": kernel_sha, "build_id": build_id},
        "table_build_id": build_id,
        "target": isa.name,
        "mode": built.mode,
        "sysdir": sysdir,
        "flags": {"cflags": built.cflags, "ldflags": built.ldflags},
        "commands": built.commands,
        "tools": built.tools,
        "profile": built.profile,
        "inputs": inputs,
        "check_ko": report.to_json(),
        "key": key,
    }
