"""arm64 and riscv64 inputs for the tests: cross tools, the kfix fixtures, and Lua cross-built from Debian's source.

The foreign ISAs are tested on code built here with Debian's cross
compilers (gcc-aarch64-linux-gnu, gcc-riscv64-linux-gnu) and run under
qemu-user-static with the cross C library (libc6-dev-arm64-cross,
libc6-dev-riscv64-cross):

* ``kfix``: the harness fixture (tests/fixtures/harness/kfix.c, the ISA's
  kfix_asm_<arch>.S, kfix_main.c), with FreeBSD's kernel flags for the ISA
  as far as user space allows, built into ``build/harness-fixtures/<arch>/``;
* ``lua``: Lua 5.4, the real library: Debian's ``lua5.4`` source package
  (``apt-get source --download-only`` through a private deb-src list, so the
  system's lists stay as they are), its liblua built as a shared library
  with frame pointers and its ``lua`` interpreter linked against it, cached
  under ``<cache>/corpus/``.

Anything missing -- a tool, the source package -- skips the caller with a
reason naming it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Dict, List, NamedTuple

from generator.common.files import locked
from generator.common.paths import BUILD
from helpers.paths import CORPUS_CACHE, HARNESS_FIXTURES
from helpers.skips import missing


class Arch(NamedTuple):
    """One foreign ISA as the tests build and run it."""

    name: str  # kinstkit's ISA name
    triple: str  # Debian's cross prefix, without the dash
    qemu: str  # qemu-user-static's binary
    sysroot: str
    # FreeBSD's kernel flags for the ISA (sys/conf/kern.mk, kmod.mk) that user-space code can keep.
    kflags: tuple

    @property
    def gcc(self) -> str:
        return f"{self.triple}-gcc"

    @property
    def packages(self) -> str:
        dev = "arm64" if self.name == "arm64" else "riscv64"
        return f"gcc-{self.triple} libc6-dev-{dev}-cross qemu-user-static"


ARCHES: Dict[str, Arch] = {
    "arm64": Arch("arm64", "aarch64-linux-gnu", "qemu-aarch64-static", "/usr/aarch64-linux-gnu",
                  ("-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer", "-ffixed-x18", "-mgeneral-regs-only",
                   "-mno-outline-atomics", "-mbranch-protection=standard")),
    # -mcmodel=medium is GCC's medany; FreeBSD's -mabi=lp64 (soft float) would not link with Debian's lp64d libc.
    "riscv": Arch("riscv", "riscv64-linux-gnu", "qemu-riscv64-static", "/usr/riscv64-linux-gnu",
                  ("-fno-omit-frame-pointer", "-mno-relax", "-mcmodel=medany", "-march=rv64gc")),
}
COMMON = ("-O2", "-Wall", "-Wextra", "-Werror", "-fno-stack-protector")


def require_cross(name: str, why: str) -> Arch:
    """The ISA's cross gcc, objdump, qemu and sysroot; else skip naming the Debian packages."""
    __tracebackhide__ = True
    arch = ARCHES[name]
    absent = [t for t in (arch.gcc, f"{arch.triple}-objdump", arch.qemu) if shutil.which(t) is None]
    if not Path(arch.sysroot, "lib").is_dir():
        absent.append(f"the {arch.sysroot} C library")
    if absent:
        missing(f"{' and '.join(absent)} not installed (apt-get install {arch.packages}): {why}")
    return arch


def run_under_qemu(arch: Arch, argv: List[str], env: Dict[str, str] = None) -> subprocess.CompletedProcess:
    return subprocess.run([arch.qemu, "-L", arch.sysroot, *argv], capture_output=True, env=env, timeout=300)


def _key(*parts: object) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.read_bytes() if isinstance(p, Path) else str(p).encode())
        h.update(b"\0")
    return h.hexdigest()[:12]


def _build(out: Path, commands: List[List[str]], what: str) -> Path:
    """Run ``commands`` in a fresh directory renamed to ``out`` when all pass (cached: never half a tree)."""
    with locked(out.parent, out.name):
        if (out / ".complete").exists():
            return out
        tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}-"))
        try:
            for cmd in commands:
                proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
                if proc.returncode != 0:
                    raise AssertionError(f"building {what} failed: {' '.join(cmd)}\n{proc.stderr}")
            (tmp / ".complete").touch()
            if out.exists():
                shutil.rmtree(out)
            tmp.rename(out)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp)
    return out


# A program finds its library beside itself, wherever the cache entry is (a moved cache still runs); in the
# keys, so that no entry built with an absolute run path is reused.
RPATH = "-Wl,-rpath,$ORIGIN"


def kfix(arch: Arch) -> Dict[str, Path]:
    """libkfix.so and the driver linked against it, for ``arch``."""
    srcs = [HARNESS_FIXTURES / n for n in ("kfix.c", f"kfix_asm_{arch.name}.S", "kfix_main.c")]
    flags = [*COMMON, *arch.kflags]
    out = BUILD / "harness-fixtures" / arch.name / _key(arch.gcc, *flags, *srcs, RPATH)
    _build(out, [
        [arch.gcc, *flags, "-fPIC", "-shared", "-o", "libkfix.so", str(srcs[0]), str(srcs[1])],
        [arch.gcc, *flags, "-o", "kfix_linked", str(srcs[2]), "-L.", "-lkfix", RPATH],
    ], f"the {arch.name} kfix fixture")
    return {"lib": out / "libkfix.so", "linked": out / "kfix_linked"}


LUA_PACKAGE = "lua5.4"
# liblua: the core and the standard libraries (Lua's own makefile: CORE_O and LIB_O).
LUA_LIB = ("lapi lcode lctype ldebug ldo ldump lfunc lgc llex lmem lobject lopcodes lparser lstate lstring ltable "
           "ltm lundump lvm lzio lauxlib lbaselib lcorolib ldblib liolib lmathlib loadlib loslib lstrlib ltablib "
           "lutf8lib linit").split()


def lua_source() -> Path:
    """Debian's lua5.4 source, downloaded once and unpacked: the directory holding src/."""
    dest = CORPUS_CACHE / "lua5.4-source"
    with locked(dest.parent, dest.name):
        if not (dest / ".complete").exists():
            with tempfile.TemporaryDirectory(dir=CORPUS_CACHE, prefix=".lua-") as tmp:
                tarball = _apt_source(LUA_PACKAGE, Path(tmp))
                with tarfile.open(tarball) as tf:
                    tf.extractall(Path(tmp) / "x", filter="data")
                top = next((Path(tmp) / "x").iterdir())
                if dest.exists():
                    shutil.rmtree(dest)
                shutil.move(str(top), dest)
            (dest / ".complete").touch()
    return dest


def _apt_source(package: str, into: Path) -> Path:
    """``apt-get source --download-only`` through a private deb-src list; the orig tarball, or skip."""
    listed = Path("/etc/apt/sources.list.d/debian.sources")
    if shutil.which("apt-get") is None or not listed.is_file():
        missing(f"Debian source package {package} not downloadable: no apt-get or {listed}")
    (into / "lists" / "partial").mkdir(parents=True)
    (into / "src.sources").write_text(listed.read_text().replace("Types: deb\n", "Types: deb-src\n"))
    opts = [f"-o Dir::Etc::SourceList={into / 'src.sources'}", "-o Dir::Etc::SourceParts=/dev/null",
            f"-o Dir::State::Lists={into / 'lists'}"]
    opts = [w for o in opts for w in o.split(" ", 1)]
    env = dict(os.environ, LC_ALL="C", DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", *opts, "update", "-qq"], ["apt-get", *opts, "source", "--download-only", package]):
        proc = subprocess.run(cmd, cwd=into, capture_output=True, text=True, env=env, timeout=600)
        if proc.returncode != 0:
            first = (proc.stderr.strip().splitlines() or ["no output"])[0]
            missing(f"Debian source package {package} not downloadable ({' '.join(cmd[:1] + cmd[-2:])}: {first})")
    found = sorted(into.glob(f"{package}_*.orig.tar.*"))
    if not found:
        missing(f"Debian source package {package}: apt-get source left no orig tarball")
    return found[0]


def lua(arch: Arch) -> Dict[str, Path]:
    """liblua5.4.so (frame pointers, the ISA's kernel flags) and the lua interpreter linked against it."""
    src = lua_source() / "src"
    flags = [w for w in (*COMMON, *arch.kflags) if w not in ("-Wextra", "-Werror", "-mgeneral-regs-only")]
    # A fixed string-hash seed: Lua's own mixes in time() and the addresses of a heap block, a local and a
    # function, which differ between the probed run and QEMU's count and with them the hash tables' layout.
    flags += ["-std=gnu99", "-DLUA_COMPAT_5_3", "-DLUA_USE_LINUX", "-Dluai_makeseed(L)=0x2545f491u"]
    objs = [f"{n}.o" for n in LUA_LIB]
    out = CORPUS_CACHE / f"lua5.4-{arch.name}-{_key(arch.gcc, *flags, *sorted(src.glob('*.[ch]')), RPATH)}"
    cmds = [[arch.gcc, *flags, "-fPIC", "-c", str(src / f"{n}.c"), "-o", f"{n}.o"] for n in LUA_LIB]
    cmds += [[arch.gcc, "-shared", "-o", "liblua5.4.so", *objs, "-lm"],
             [arch.gcc, *flags, "-o", "lua", str(src / "lua.c"), "-L.", "-llua5.4", "-lm", RPATH]]
    _build(out, cmds, f"Lua 5.4 for {arch.name}")
    return {"lib": out / "liblua5.4.so", "lua": out / "lua"}


# FreeBSD's module flags per ISA (sys/conf/kern.mk, kmod.mk; clang's names), and its link steps:
# ld -r into a .kld, then -Bshareable into an ET_DYN .ko (__KLD_SHARED).  The same code is also linked
# the way a kernel is, an ET_EXEC at the ISA's kernel base (its kernel calls left unresolved).
FREEBSD_KERNBASE = {"arm64": 0xFFFF000000100000, "riscv": 0xFFFFFFC000100000}
FREEBSD_TARGET = {"arm64": "aarch64-unknown-freebsd14.3", "riscv": "riscv64-unknown-freebsd14.3"}
FREEBSD_KFLAGS = {
    "arm64": ("-mgeneral-regs-only", "-ffixed-x18", "-mbranch-protection=standard", "-mno-outline-atomics"),
    # FreeBSD's exact -march=rv64imafdch_zifencei needs clang 19; the instructions are the same for this code.
    "riscv": ("-march=rv64imafdc", "-mabi=lp64", "-mcmodel=medium", "-mno-relax"),
}
FREEBSD_EMULATION = {"arm64": ("aarch64elf", "--no-relax"), "riscv": ("elf64lriscv",)}
KERN_COMMON = ("-O2", "-std=gnu17", "-ffreestanding", "-fwrapv", "-fno-common", "-fno-omit-frame-pointer",
               "-mno-omit-leaf-frame-pointer", "-fPIC", "-D_KERNEL", "-DKLD_MODULE", "-Wall", "-Werror")


def freebsd_module(name: str) -> Dict[str, Path]:
    """kfix built as FreeBSD builds an ``name`` module: kfix.o (ET_REL), kfix.kld (ld -r) and kfix.ko (ET_DYN);
    and kfix.kernel, the same objects linked as an ET_EXEC kernel is."""
    __tracebackhide__ = True
    for tool in ("clang", "ld.lld"):
        if shutil.which(tool) is None:
            missing(f"{tool} not installed (apt-get install {'clang' if tool == 'clang' else 'lld'}): FreeBSD's "
                    f"{name} modules are built with it")
    target, flags = FREEBSD_TARGET[name], FREEBSD_KFLAGS[name]
    srcs = [HARNESS_FIXTURES / "kfix.c", HARNESS_FIXTURES / f"kfix_asm_{name}.S"]
    cc = ["clang", f"--target={target}", *KERN_COMMON, *flags]
    ld = ["ld.lld", "-m", *FREEBSD_EMULATION[name]]
    commands = [
        [*cc, "-c", str(srcs[0]), "-o", "kfix.o"],
        [*cc, "-c", str(srcs[1]), "-o", "kfix_asm.o"],
        [*ld, "-r", "-o", "kfix.kld", "kfix.o", "kfix_asm.o"],
        [*ld, "-Bshareable", "-znotext", "-znorelro", "-o", "kfix.ko", "kfix.kld"],
        [*ld, "-static", "-e", "0", "--unresolved-symbols=ignore-all", f"-Ttext={FREEBSD_KERNBASE[name]:#x}",
         "-o", "kfix.kernel", "kfix.kld"],
    ]
    out = BUILD / "freebsd-modules" / name / _key(*(w for c in commands for w in c), *srcs)
    _build(out, commands, f"the FreeBSD-style {name} module")
    return {"o": out / "kfix.o", "kld": out / "kfix.kld", "ko": out / "kfix.ko", "kernel": out / "kfix.kernel"}
