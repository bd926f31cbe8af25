"""FreeBSD's kmod flag profile for one ``sys/`` tree, and the headers kmod.mk generates.

What ``bsd.kmod.mk`` would put on a module's compile and link lines, spelled
out for the cross build (clang and ld.lld off FreeBSD): ``sys.mk``'s
``-O2 -pipe``, the module Makefile's CFLAGS, ``sys/conf/kmod.mk``'s own flags
(written out here, with the parts that differ between releases probed in the
tree's copy), what the tree's ``sys/conf/kern.mk`` evaluates to for the ISA and
clang (read with ``generator/mk.py``, falling back to FreeBSD 14's flags when
it cannot be read -- and saying so in ``facts``), and the Makefile's CFLAGS
from after the include.  ``generated_headers`` fills the object directory
the way kmod.mk does before it compiles.

``portable_cflags`` is the same profile without a tree: what the portable
cores are compiled with when no ``sys/`` tree is at hand.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from ..common.defaults import EXAMPLE_RELEASE
from ..common.errors import UserError
from .mk import MkReader, MkUnsupported, ModuleMakefile, mk_block
from ..isa.contract import Isa
from ..common.tools import Runner, checked, llvm_version, require_tool

FETCH_HINT = f"invoke fetch-release --release {EXAMPLE_RELEASE}"


def read_osreldate(sysdir: Path) -> int:
    """``__FreeBSD_version`` of a tree (sys/sys/param.h)."""
    param = sysdir / "sys" / "param.h"
    try:
        text = param.read_text(errors="replace")
    except OSError:
        raise UserError(f"{sysdir}: no sys/param.h; --sysdir must be a FreeBSD sys/ tree") from None
    m = re.search(r"^#define\s+__FreeBSD_version\s+(\d+)", text, re.M)
    if not m:
        raise UserError(f"{param}: no __FreeBSD_version; --sysdir must be a FreeBSD sys/ tree")
    return int(m.group(1))


# kern.mk as FreeBSD 14 evaluates it with clang, between an ISA's machine flags
# (``Isa.kmod.cflags``) and its CFLAGS.clang (``Isa.kmod.clang_cflags``): the
# fallback when a tree's kern.mk cannot be read (recorded in the manifest when
# used).  14.x's CWARNFLAGS no longer has -Wredundant-decls and
# -Wnested-externs, and its CSTD is gnu99.
KERN_COMMON_FLAGS: Tuple[str, ...] = (
    "-ffreestanding", "-fwrapv", "-fstack-protector",
    "-Wall", "-Wstrict-prototypes", "-Wmissing-prototypes", "-Wpointer-arith", "-Wcast-qual", "-Wundef",
    "-Wno-pointer-sign", "-D__printf__=__freebsd_kprintf__", "-Wmissing-include-dirs", "-fdiagnostics-show-option",
    "-Wno-unknown-pragmas", "-Wno-error=tautological-compare", "-Wno-error=empty-body",
    "-Wno-error=parentheses-equality", "-Wno-error=unused-function", "-Wno-error=pointer-sign",
    "-Wno-error=shift-negative-value", "-Wno-address-of-packed-member", "-Wno-format-zero-length",
)
KERN_CSTD = "-std=gnu99"


def builtin_kern_flags(isa: Isa) -> Tuple[str, ...]:
    """kern.mk's flags for ``isa`` and clang, in kern.mk's order, as FreeBSD 14 evaluates them."""
    return (*isa.kmod.cflags, *KERN_COMMON_FLAGS, *isa.kmod.clang_cflags, KERN_CSTD)


@dataclass(frozen=True)
class KmodProfile:
    """How bsd.kmod.mk would compile and link a module against one sys/ tree, for one ISA.

    ``facts`` records what was read from the tree and what was assumed, for
    the manifest: nobody should have to guess where a flag came from.  The
    record is frozen; ``facts`` fills in as the flags are worked out.
    """

    sysdir: Path
    isa: Isa  # the target's ISA: its machine names, flags and link steps
    osreldate: int
    triple: str
    emulation: str
    kmod_text: str
    kern_text: Optional[str]
    facts: Dict[str, object] = field(default_factory=dict)

    @classmethod
    def for_tree(cls, sysdir: Path, isa: Isa) -> "KmodProfile":
        sysdir = sysdir.resolve()
        if not (sysdir / "kern").is_dir() or not (sysdir / "conf" / "kmod.mk").is_file():
            raise UserError(
                f"{sysdir}: not a FreeBSD sys/ tree (bsd.sysdir.mk wants kern/ and conf/kmod.mk); "
                f"pass the sys/ directory of the target's sources or run `{FETCH_HINT}`"
            )
        osreldate = read_osreldate(sysdir)
        triple = f"{isa.kmod.clang_arch}-unknown-freebsd{osreldate // 100000}.{osreldate // 1000 % 100}"
        kern = sysdir / "conf" / "kern.mk"
        return cls(
            sysdir=sysdir,
            isa=isa,
            osreldate=osreldate,
            triple=triple,
            emulation=isa.kmod.ld_emulation,
            kmod_text=(sysdir / "conf" / "kmod.mk").read_text(errors="replace"),
            kern_text=kern.read_text(errors="replace") if kern.is_file() else None,
            facts={"sysdir": str(sysdir), "osreldate": osreldate, "clang_target": triple},
        )

    # kmod.mk, with its release-dependent parts probed in the tree's copy
    def ilinks(self) -> List[Tuple[str, Path]]:
        """kmod.mk's _ILINKS: (link name in the object directory, the tree's include directory it points to).

        ``machine`` always; the others of the ISA's list where the tree's
        kmod.mk adds them (``i386`` came to amd64's list in a later release).
        """
        return [(name, self.sysdir / folder / "include") for name, folder in self.isa.kmod.include_links
                if name == "machine" or re.search(rf"_ILINKS\+=\s*{re.escape(name)}\b", self.kmod_text)]

    def kmod_cflags(self, objdir: Path) -> List[str]:
        """kmod.mk's own CFLAGS, those a release may lack included only when the tree's kmod.mk has them."""
        s = str(self.sysdir)
        out = ["-fno-strict-aliasing", "-Werror", "-D_KERNEL", "-DKLD_MODULE", "-nostdinc"]
        if self.isa.kmod.shared:
            out.append("-fPIC")  # __KLD_SHARED: the module is linked -Bshareable
        if re.search(r"-include \$\{\.OBJDIR\}/opt_global\.h", self.kmod_text):
            out += ["-include", str(objdir / "opt_global.h")]
        out += ["-I.", f"-I{s}"]
        if "contrib/ck/include" in self.kmod_text:
            out.append(f"-I{s}/contrib/ck/include")
        out += ["-fno-common", "-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer"]
        if "fdebug-prefix-map" in self.kmod_text:
            for name, target in self.ilinks():
                out.append(f"-fdebug-prefix-map=./{name}={target}")
        self.facts["kmod.mk"] = {
            "opt_global.h": "-include" in out,
            "ck_include": "contrib/ck/include" in self.kmod_text,
            "ilinks": [n for n, _ in self.ilinks()],
        }
        return out

    def openzfs(self) -> Dict[str, str]:
        """ZINCDIR and OPENZFS_CFLAGS as the tree's kmod.mk defines them (absent before OpenZFS)."""
        out = {}
        for name in ("ZINCDIR", "OPENZFS_CFLAGS", "OPENZFS_CWARNFLAGS"):
            value = mk_block(self.kmod_text, name)
            if value is None and self.kern_text:
                value = mk_block(self.kern_text, name)
            if value is not None:
                out[name] = value
        self.facts["openzfs"] = sorted(out)
        return out

    def ldflags(self) -> List[str]:
        """kmod.mk's LDFLAGS for ``ld -r`` (``-d`` only where kmod.mk still asks for it: lld < 14)."""
        out = list(self.isa.kmod.ld_flags)
        lld_new = llvm_version("ld.lld") >= 140000
        if not ("LINKER_VERSION} < 140000" in self.kmod_text and lld_new):
            out.append("-d")
        out.append("-warn-common")
        if "--build-id=sha1" in self.kmod_text:
            out.append("--build-id=sha1")
        return out

    def tree_files(self) -> List[Path]:
        """The tree's build machinery files the flags and generated headers come from (manifest inputs)."""
        names = ("conf/kmod.mk", "conf/kern.mk", *((f"conf/{self.isa.kmod.ldscript}",) if self.isa.kmod.ldscript else ()),
                 "sys/param.h", "tools/vnode_if.awk", "kern/vnode_if.src")
        return [self.sysdir / n for n in names if (self.sysdir / n).is_file()]

    def ldscript(self) -> Optional[Path]:
        """The tree's ``conf/<the ISA's ldscript>``, when the ISA has one and kmod.mk links with it."""
        if not self.isa.kmod.ldscript:
            return None
        script = self.sysdir / "conf" / self.isa.kmod.ldscript
        return script if script.is_file() and "ldscript.kmod" in self.kmod_text else None

    # kern.mk, evaluated
    def _mk_variables(self) -> Dict[str, str]:
        """What bsd.compiler.mk, bsd.linker.mk and src.opts.mk would have set before kern.mk is read."""
        cc_version = llvm_version("clang")
        ld_version = llvm_version("ld.lld")
        return {
            "SYSDIR": str(self.sysdir),
            **self._machine_vars(),
            "COMPILER_TYPE": "clang", "COMPILER_VERSION": str(cc_version),
            "COMPILER_FEATURES": "c++11 c++14 c++17 retpoline init-all",
            "LINKER_TYPE": "lld", "LINKER_VERSION": str(ld_version),
            "LINKER_FEATURES": "build-id filter ifunc ifunc-noplt retpoline",
            "CC": f"clang --target={self.triple}", "LD": "ld.lld",
            # src.opts.mk defaults for a module build outside buildkernel
            "MK_SSP": "yes", "MK_FORMAT_EXTENSIONS": "yes", "MK_KERNEL_RETPOLINE": "no",
            "MK_INIT_ALL_ZERO": "no", "MK_INIT_ALL_PATTERN": "no", "MK_CTF": "no",
            "MK_SPLIT_KERNEL_DEBUG": "no", "MK_KERNEL_SYMBOLS": "no",
        }

    def _machine_vars(self) -> Dict[str, str]:
        k = self.isa.kmod
        return {"MACHINE": k.machine, "MACHINE_ARCH": k.machine_arch, "MACHINE_CPUARCH": k.machine_cpuarch}

    def cflags(self, objdir: Path, makefile: ModuleMakefile) -> List[str]:
        """The compile line's flags, in bsd.kmod.mk's order (sources and -MD aside).

        sys.mk's ``-O2 -pipe``, the module Makefile's CFLAGS from before
        ``.include <bsd.kmod.mk>``, kmod.mk's, kern.mk's (CWARNFLAGS, the
        arch flags, CSTD), then the Makefile's CFLAGS from after the include.
        """
        mk = MkReader({**self._mk_variables(), ".CURDIR": str(makefile.path.parent)})
        mk.vars.update(self.openzfs())
        mk.vars["CFLAGS"] = "-O2 -pipe"
        try:
            mk.read(makefile.before)
        except MkUnsupported as e:
            raise UserError(f"{makefile.path}: cannot evaluate before bsd.kmod.mk: {e}") from None
        mk.vars["CFLAGS"] += " " + " ".join(shlex.quote(w) for w in self.kmod_cflags(objdir))
        mk = self._after_kern_mk(mk)
        try:
            mk.read(makefile.after)
            return shlex.split(mk.expand("${CFLAGS}"))
        except MkUnsupported as e:
            raise UserError(f"{makefile.path}: cannot evaluate after bsd.kmod.mk: {e}") from None

    def _after_kern_mk(self, mk: MkReader) -> MkReader:
        """``mk`` with the tree's kern.mk read into a copy; when kern.mk is missing or cannot be
        evaluated, ``mk`` itself with FreeBSD 14's clang flags for the ISA appended.  ``facts`` says which."""
        fallback = f"FreeBSD 14 {self.isa.name}/clang flags used"
        if self.kern_text is None:
            self.facts["kern.mk"] = f"missing; {fallback}"
        else:
            trial = MkReader(dict(mk.vars))
            try:
                trial.read(self.kern_text)
            except MkUnsupported as e:
                self.facts["kern.mk"] = f"not evaluated ({e}); {fallback}"
            else:
                self.facts["kern.mk"] = "evaluated from the tree"
                if trial.skipped_includes:
                    self.facts["kern.mk includes skipped"] = trial.skipped_includes
                if trial.defaulted:
                    self.facts["kern.mk options read as no"] = sorted(trial.defaulted)
                return trial
        mk.vars["CFLAGS"] += " " + " ".join(builtin_kern_flags(self.isa))
        return mk

    def makefile_vars(self, makefile: ModuleMakefile) -> Dict[str, str]:
        """KMOD, SRCS and EXPORT_SYMS of the module Makefile, and ``.PATH``: the directories
        bmake searches for a C source that is not in the module directory (its ISA folder)."""
        mk = MkReader({"SYSDIR": str(self.sysdir), **self._machine_vars(), ".CURDIR": str(makefile.path.parent)})
        mk.read(makefile.before)
        mk.read(makefile.after)
        out = {k: mk.expand(mk.vars.get(k, "")) for k in ("KMOD", "SRCS", "EXPORT_SYMS")}
        out[".PATH"] = " ".join(mk.search_path(".c"))
        return out


def portable_cflags(compiler: str, isa: Isa) -> List[str]:
    """Kernel flags for the portable cores, with no sys/ tree: kmod.mk and kern.mk minus their include paths.

    ``compiler`` is clang (given the ISA's FreeBSD target) or a gcc for the
    ISA.  gcc gets ``-fno-pic`` where the ISA's modules are not shared,
    because Debian's gcc builds PIE by default and amd64's
    ``-mcmodel=kernel`` refuses PIC (FreeBSD's cc does not default to it);
    and none of the warning options gcc does not know, and gcc's names for
    the ISA's flags where they differ from clang's (``Kmod.gcc_spelling``).
    """
    base = ["-O2", "-pipe", "-fno-strict-aliasing", "-Werror", "-D_KERNEL", "-DKLD_MODULE", "-nostdinc",
            "-fno-common", "-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer"]
    base += ["-fPIC"] if isa.kmod.shared else []
    if compiler == "clang":
        return [f"--target={isa.kmod.clang_arch}-unknown-freebsd14.0", *base, *builtin_kern_flags(isa)]
    spelled = dict(isa.kmod.gcc_spelling)
    gcc = [spelled.get(f, f) for f in (*base, *([] if isa.kmod.shared else ["-fno-pic"]), *builtin_kern_flags(isa))
           if not (f.startswith("-Wno-error=") or f.startswith("-D__printf__") or f == "-Wno-address-of-packed-member")]
    return [f for f in gcc if f]


# -- what kmod.mk generates in the object directory ----------------------------------


def generated_headers(srcs: Sequence[str], profile: KmodProfile, objdir: Path, run: Runner) -> List[List[str]]:
    """What kmod.mk generates in the object directory before compiling; returns the commands run.

    The ``machine``/``x86``/``i386`` include links, an empty ``opt_*.h`` for
    each one (kmod.mk without ``KERNBUILDDIR``), and ``vnode_if*.h`` from the
    tree's ``vnode_if.awk``.  Any other generated header in SRCS is refused:
    kinstkit does not reproduce those rules, and a guess would compile against
    the wrong declarations.
    """
    commands: List[List[str]] = []
    for name, target in profile.ilinks():
        link = objdir / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target)
    wanted = ["opt_global.h"] + [s for s in srcs if s.endswith(".h")]
    for h in dict.fromkeys(wanted):
        if h.startswith("opt_"):
            (objdir / h).write_text("")
        elif h == "vnode_if.h":
            commands += _vnode_if_headers(profile.sysdir, objdir, run)
        else:
            raise UserError(
                f"SRCS lists {h}, a header bsd.kmod.mk generates with a rule kinstkit does not reproduce; "
                "build on FreeBSD (make) instead"
            )
    return commands


def _vnode_if_headers(sysdir: Path, objdir: Path, run: Runner) -> List[List[str]]:
    """kmod.mk's rules for ``vnode_if.h`` and the two headers it includes, from the tree's
    ``vnode_if.awk`` and ``vnode_if.src``; returns the commands run."""
    awk_script = sysdir / "tools" / "vnode_if.awk"
    src = sysdir / "kern" / "vnode_if.src"
    if not awk_script.is_file() or not src.is_file():
        raise UserError(f"{sysdir}: no tools/vnode_if.awk or kern/vnode_if.src to make vnode_if.h")
    awk = require_tool("awk")
    commands: List[List[str]] = []
    for flag, out in (("-q", "vnode_if_typedef.h"), ("-p", "vnode_if_newproto.h"), ("-h", "vnode_if.h")):
        argv = [awk, "-f", str(awk_script), str(src), flag]
        checked(run, argv, f"generating {out}", cwd=objdir)
        if not (objdir / out).is_file():
            raise UserError(f"{awk_script} {flag} did not write {out}")
        commands.append(argv)
    return commands
