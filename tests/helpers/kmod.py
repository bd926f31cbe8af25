"""FreeBSD's amd64 kmod compile line, spelled out for the tests, independently of generator/kmod/.

What ``make`` with ``bsd.kmod.mk`` runs for a DTrace provider module's C file,
in its order:

1. ``sys.mk``: ``-O2 -pipe``;
2. the module Makefile's CFLAGS from before ``.include <bsd.kmod.mk>``:
   ``${OPENZFS_CFLAGS}`` (the OpenZFS and OpenSolaris compatibility include
   directories, ahead of ``-I$SYSDIR``: a header they shadow wins) and the
   Makefile's own ``-I`` directories;
3. ``sys/conf/kmod.mk``'s: ``-Werror -D_KERNEL -DKLD_MODULE -nostdinc``, the
   object directory's ``opt_global.h``, ``-I. -I$SYSDIR
   -I$SYSDIR/contrib/ck/include``, the frame-pointer flags;
4. ``sys/conf/kern.mk``'s for amd64 and clang (``KERN_MK``, FreeBSD 14's:
   CWARNFLAGS without the ``-Wredundant-decls``/``-Wnested-externs`` of
   older releases, ``CSTD`` gnu99);
5. the Makefile's CFLAGS from after the include: ``-include debug_compat.h``.

``generator.kmod.kmodflags.builtin_kern_flags`` for amd64 (the cross build's fallback
when a tree's kern.mk cannot be read) must equal ``KERN_MK``; a unit test
holds them equal.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import List, Sequence

# kern.mk as FreeBSD 14 evaluates it for amd64 with clang, in its order.
KERN_MK: List[str] = [
    # the amd64 code model and no FPU
    "-mcmodel=kernel", "-mno-red-zone", "-mno-mmx", "-mno-sse", "-msoft-float", "-fno-asynchronous-unwind-tables",
    "-ffreestanding", "-fwrapv", "-fstack-protector",
    # CWARNFLAGS, FORMAT_EXTENSIONS, CWARNEXTRA (clang)
    "-Wall", "-Wstrict-prototypes", "-Wmissing-prototypes", "-Wpointer-arith", "-Wcast-qual", "-Wundef",
    "-Wno-pointer-sign", "-D__printf__=__freebsd_kprintf__", "-Wmissing-include-dirs", "-fdiagnostics-show-option",
    "-Wno-unknown-pragmas", "-Wno-error=tautological-compare", "-Wno-error=empty-body",
    "-Wno-error=parentheses-equality", "-Wno-error=unused-function", "-Wno-error=pointer-sign",
    "-Wno-error=shift-negative-value", "-Wno-address-of-packed-member", "-Wno-format-zero-length",
    # CFLAGS.clang for amd64, then CSTD
    "-mno-aes", "-mno-avx", "-std=gnu99",
]

# What vnode_if.awk writes for kmod.mk: (its flag, the header).
VNODE_IF = (("-h", "vnode_if.h"), ("-p", "vnode_if_newproto.h"), ("-q", "vnode_if_typedef.h"))


def prepare_objdir(sysdir: Path, objdir: Path) -> None:
    """The object directory as kmod.mk fills it: the machine, x86 and i386 links, an empty opt_global.h
    (no KERNBUILDDIR) and the vnode_if headers (the module Makefiles list vnode_if.h in SRCS)."""
    objdir.mkdir(parents=True, exist_ok=True)
    for link, target in (("machine", "amd64"), ("x86", "x86"), ("i386", "i386")):
        if not (objdir / link).exists():
            (objdir / link).symlink_to(sysdir / target / "include")
    (objdir / "opt_global.h").write_text("")
    for flag, name in VNODE_IF:
        res = subprocess.run(["awk", "-f", str(sysdir / "tools" / "vnode_if.awk"), str(sysdir / "kern" / "vnode_if.src"),
                              flag], cwd=objdir, capture_output=True, text=True)
        if res.returncode != 0 or not (objdir / name).is_file():
            raise AssertionError(f"vnode_if.awk {flag}: {res.stderr}")


def kmod_cflags(sysdir: Path, objdir: Path, includes: Sequence[Path], triple: str,
                kern_mk: Sequence[str] = tuple(KERN_MK)) -> List[str]:
    """The clang command line, without the source and output, for a module whose Makefile adds ``includes``."""
    zinc = sysdir / "contrib" / "openzfs" / "include"
    return [
        "clang", f"--target={triple}", "-O2", "-pipe",
        # the Makefile, before bsd.kmod.mk: ${OPENZFS_CFLAGS}, then its -I directories
        "-D_SYS_VMEM_H_", "-D__KERNEL__", "-nostdinc", "-DSMP", f"-I{zinc}", f"-I{zinc}/os/freebsd",
        f"-I{zinc}/os/freebsd/spl", f"-I{zinc}/os/freebsd/zfs", f"-I{sysdir}/cddl/compat/opensolaris",
        f"-I{sysdir}/cddl/contrib/opensolaris/uts/common", "-include", f"{zinc}/os/freebsd/spl/sys/ccompile.h",
        *(f"-I{d}" for d in includes),
        # kmod.mk
        "-fno-strict-aliasing", "-Werror", "-D_KERNEL", "-DKLD_MODULE", "-nostdinc",
        "-include", str(objdir / "opt_global.h"), f"-I{objdir}", f"-I{sysdir}", f"-I{sysdir}/contrib/ck/include",
        "-fno-common", "-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer",
        # kern.mk
        *kern_mk,
        # the Makefile, after bsd.kmod.mk
        "-include", f"{sysdir}/cddl/compat/opensolaris/sys/debug_compat.h",
    ]
