"""Compile and link one module off FreeBSD: clang and ld.lld doing what ``bsd.kmod.mk`` would.

There is no ``make`` with FreeBSD's ``share/mk`` on Linux, so the steps of a
kmod build are spelled out here, with the flags ``generator/kmod/kmodflags.py``
works out for the target's ``sys/`` tree:

* the object directory gets what kmod.mk generates there (include links,
  ``opt_*.h``, ``vnode_if*.h``);
* every C source in SRCS, found in the module directory or, as bmake finds
  it, in a ``.PATH`` directory (the module's ISA folder), is compiled with
  ``clang --target=...-freebsdX.Y`` and ``-MD``, so the manifest can list
  every header the compiler read;
* ``ld.lld -m <the ISA's emulation> -r`` (with the tree's link script where
  the ISA has one) makes the ``.ko`` (ET_REL, as amd64 modules are), or,
  where the ISA's modules are shared (``__KLD_SHARED``: arm64, riscv), a
  ``.kld`` that ``ld -Bshareable -znotext -znorelro`` turns into an ET_DYN
  ``.ko``;
* ``EXPORT_SYMS=NO`` (kmod.mk's default) makes every defined global local,
  as ``kmod_syms.awk | xargs objcopy`` does (in the ``.kld``, before a
  shared link), and debug info is stripped, as kmod.mk does without
  ``DEBUG_FLAGS``.  No CTF: ctfconvert and ctfmerge are
  FreeBSD tools.
"""

from __future__ import annotations

from pathlib import Path
from typing import List

from ...common.errors import UserError
from ...common.tools import Runner, checked, require_tool, tool_version
from ...providers.contract import Provider
from ..kmodflags import KmodProfile, generated_headers
from ..mk import ModuleMakefile
from ..objdir import Built, fresh, headers_read
from .contract import Backend, Job
from ...image import open_image


def cross_build(provider: Provider, srcdir: Path, objdir: Path, profile: KmodProfile, run: Runner) -> Built:
    """Compile and link one module with clang and ld.lld as kmod.mk would; returns the manifest's fields."""
    makefile = ModuleMakefile.read(srcdir / "Makefile")
    mvars = profile.makefile_vars(makefile)
    kmod = mvars["KMOD"] or provider.name
    srcs = mvars["SRCS"].split()
    search = [srcdir, *(srcdir / d for d in mvars[".PATH"].split())]
    fresh(objdir)
    clang = require_tool("clang")
    lld = require_tool("ld.lld")
    objcopy = require_tool("llvm-objcopy", "objcopy")
    commands = generated_headers(srcs, profile, objdir, run)
    cflags = profile.cflags(objdir, makefile)
    objs: List[str] = []
    for src in srcs:
        if src.endswith(".h"):
            continue
        if not src.endswith(".c"):
            raise UserError(f"{makefile.path}: SRCS lists {src}; the cross build compiles C sources only")
        path = next((d / src for d in search if (d / src).is_file()), None)
        if path is None:
            where = " or ".join(str(d) for d in search)
            raise UserError(f"{src}: listed in SRCS but not in {where}; run the generator first")
        obj = f"{Path(src).stem}.o"
        argv = [clang, f"--target={profile.triple}", *cflags, "-MD", f"-MF.depend.{obj}", f"-MT{obj}",
                "-c", str(path), "-o", obj]
        checked(run, argv, f"{provider.name}: compiling {src}", cwd=objdir)
        commands.append(argv)
        objs.append(obj)
    ko = f"{kmod}.ko"
    shared = profile.isa.kmod.shared
    relocatable = f"{kmod}.kld" if shared else ko
    link = [lld, "-m", profile.emulation, *profile.ldflags()]
    script = profile.ldscript()
    if script is not None:
        link += ["-T", str(script)]
    link += ["-r", "-o", relocatable, *objs]
    checked(run, link, f"{provider.name}: linking {relocatable}", cwd=objdir)
    commands.append(link)
    if mvars["EXPORT_SYMS"] != "YES":
        commands += _localize(objdir / relocatable, objcopy, mvars["EXPORT_SYMS"], run)
    if shared:
        dyn = [lld, "-m", profile.emulation, *profile.isa.kmod.ld_flags, "-Bshareable", "-znotext", "-znorelro",
               "-o", ko, relocatable]
        checked(run, dyn, f"{provider.name}: linking {ko}", cwd=objdir)
        commands.append(dyn)
    strip = [objcopy, "--strip-debug", ko]
    checked(run, strip, f"{provider.name}: stripping debug info", cwd=objdir)
    commands.append(strip)
    return Built(
        ko_built=objdir / ko,
        commands=commands,
        cflags=cflags,
        ldflags=link[1 : link.index("-r")],
        tools={t: tool_version(t) for t in (clang, lld, objcopy, "awk")},
        headers=headers_read(objdir, (objdir / f".depend.{obj}" for obj in objs)),
        profile=profile.facts,
        mode="cross (clang + ld.lld)",
        tree_files=[str(p) for p in profile.tree_files()],
    )


def _localize(ko: Path, objcopy: str, export: str, run: Runner) -> List[List[str]]:
    """EXPORT_SYMS=NO (kmod.mk's default): every defined global becomes local (sys/conf/kmod_syms.awk).

    Defined means neither SHN_UNDEF (0) nor SHN_COMMON (0xFFF2); global means
    STB_GLOBAL (1) or STB_WEAK (2).  Names in a non-NO ``EXPORT_SYMS`` list stay global.
    """

    keep = set(export.split()) if export not in ("", "NO") else set()
    names = sorted({s.name for s in open_image(str(ko)).symbols()
                    if s.shndx not in (0, 0xFFF2) and s.bind in (1, 2) and s.name and s.name not in keep})
    if not names:
        return []
    listing = ko.with_name("export_syms.localize")
    listing.write_text("".join(n + "\n" for n in names))
    argv = [objcopy, f"--localize-symbols={listing.name}", ko.name]
    checked(run, argv, f"localizing the symbols of {ko.name}", cwd=ko.parent)
    return [argv]


def _build(job: Job) -> Built:
    assert job.profile is not None  # needs_profile: kmod.build reads the tree first
    return cross_build(job.provider, job.srcdir, job.objdir, job.profile, job.run)


BACKEND = Backend(
    name="cross",
    summary="clang and ld.lld with kmod.mk's and the tree's kern.mk flags (the default off FreeBSD)",
    needs_profile=True,
    tools=("clang", "ld.lld", "llvm-objcopy"),
    default_here=lambda: True,
    unusable=lambda: "",
    build=_build,
)
