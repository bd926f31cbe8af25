"""invoke build: generate, compile, link and check, with and without a FreeBSD sys/ tree.

What runs here, in order of strength:

* without a tree: generation, the portable cores with gcc and clang, their
  link and symbol check, the table's build-id -- then exactly one error line,
  exit 2, and no .ko anywhere;
* the whole cross-build path against FreeBSD 14.3's installed headers laid
  out as a sys/ tree, with stand-ins only for what FreeBSD does not install
  (tests/helpers/standin.py, freebsd_headers.py): kern.mk evaluated, include links,
  opt_global.h, vnode_if.h, clang, ld.lld -r with the link script, symbol
  localisation, strip, manifest, check-ko against a stand-in kernel with
  stand-in dtrace.ko/opensolaris.ko -- and the stamp: same inputs, no work;
  a changed header or kern.mk, a rebuild;
* the FreeBSD path's command construction, with a runner that plays make;
* against a real release only when KINSTKIT_TEST_RELEASE names one that
  `invoke fetch-release` cached (skipped, naming it, otherwise).

The make reader on its own, with no tree, is tests/unit/test_mk.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import pytest

from generator.kmod.build import BuildRequest
from generator.common.errors import UserError
from generator import isa
from generator.image.elf import KernelImage
from generator.kmod.kmodflags import KmodProfile
from generator.kmod.manifest import sha256_file
from generator.kmod.mk import ModuleMakefile
from generator.kmod.backends.native import native_build
from generator.providers import PROVIDERS
from generator.common.paths import REPO, SYS_MODULES
from generator.common.tools import Completed, run_tool
from helpers import kofixtures, skips, standin


PORTABLE_WHY = "the build compiles the portable cores with gcc and clang and links them with ld.lld"


def run_build(*args: str, env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "SYSDIR"}
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "generator", "build", *args], capture_output=True, text=True,
                          cwd=REPO, env=environ, timeout=600)


# -- without a tree ------------------------------------------------------------------


def test_without_a_tree_does_the_offline_work_then_stops_in_one_line(sample_kernel: Path, tmp_path: Path) -> None:
    skips.require_tools("gcc", "clang", "ld.lld", why=PORTABLE_WHY)
    out, src = tmp_path / "build", tmp_path / "src"
    res = run_build("--out", str(out), "--src", str(src))
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "--sysdir" in lines[0] and "invoke fetch-release" in lines[0] and "no .ko was made" in lines[0]
    bid = KernelImage.open(str(sample_kernel)).build_id
    for m, portable in (("kinst", "kinst_funcs.c, amd64/kinst_core.c, amd64/kinst_core_jump.c, kinst_table.c, "
                                  "kinst_target.c"),
                        ("dtmalloc", "dtmalloc_core.c, dtmalloc_table.c")):
        assert f"{m}: sources generated in {src / m}" in res.stdout
        assert f"{m}: {m}_table.c names kernel build-id {bid}" in res.stdout
        assert f"{m}: portable {portable} compile with gcc and clang" in res.stdout
        assert f"{m}: portable objects link (ld.lld -r)" in res.stdout
        # The hand-written Makefile and C are staged beside the generated files.
        for rel in ("Makefile", *PROVIDERS[m].plain()):
            assert (src / m / rel).read_bytes() == (SYS_MODULES / m / rel).read_bytes(), rel
    assert not list(out.rglob("*.ko")) and not list((out / bid).glob("*.json"))


def test_without_a_tree_the_portable_work_is_not_redone(sample_kernel: Path, tmp_path: Path) -> None:
    skips.require_tools("gcc", "clang", "ld.lld", why=PORTABLE_WHY)
    args = ("--out", str(tmp_path / "build"), "--src", str(tmp_path / "src"), "--modules", "kinst")
    run_build(*args)
    res = run_build(*args)
    assert res.returncode == 2
    assert "kinst: sources unchanged" in res.stdout and "portable core unchanged" in res.stdout


# -- against FreeBSD's installed headers ------------------------------------------------------


class StandinWorld:
    """The stand-in kernel (with dtrace.ko and opensolaris.ko beside it), built once, and copies of the
    FreeBSD 14.3 header tree."""

    def __init__(self, root: Path):
        self.root = root
        self.kernel = standin.build_kernel(root / "kernel")
        standin.build_dependencies(root / "kernel")
        self.build_id = KernelImage.open(str(self.kernel)).build_id

    @staticmethod
    def tree(module: str, where: Path) -> Path:
        """A private copy of the tree ``module`` is built against (the same for both modules)."""
        return standin.make_tree(where)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, sample_kernel: Path) -> StandinWorld:
    skips.require_tools("clang", "ld.lld", "gcc", "awk",
                        why="the stand-in kernel, its modules and the cross build (vnode_if.awk) need them")
    return StandinWorld(tmp_path_factory.mktemp("standin"))


def manifest(out: Path, build_id: str, module: str) -> dict:
    return json.loads((out / build_id / f"{module}.json").read_text())


@pytest.mark.parametrize("module", ["kinst", "dtmalloc"])
def test_cross_build_produces_a_checked_ko(world: StandinWorld, module: str, tmp_path: Path) -> None:
    tree = world.tree(module, tmp_path / "sys")
    out = tmp_path / "build"
    res = run_build("--kernel", str(world.kernel), "--sysdir", str(tree), "--modules", module, "--out", str(out),
                    "--src", str(tmp_path / "src"))
    assert res.returncode == 0, res.stdout + res.stderr
    ko = out / world.build_id / f"{module}.ko"
    assert f"{module}: built {ko} (cross (clang + ld.lld))" in res.stdout
    assert "check-ko: ok" in res.stdout and "NOT CHECKED" not in res.stdout
    head = ko.read_bytes()[:20]
    assert head[:4] == b"\x7fELF" and head[7] == 9  # EI_OSABI FreeBSD, from ld.lld -m elf_x86_64_fbsd
    img = KernelImage.open(str(ko))
    assert img.e_type == "ET_REL" and img.build_id
    assert {"set_modmetadata_set", "set_sysinit_set"} <= {s.name for s in img.sections}
    assert not any(s.name.startswith(".debug") for s in img.sections)  # stripped, as without DEBUG_FLAGS
    defined = [s for s in img.symbols() if s.shndx != 0 and s.bind == 1]
    assert defined == []  # EXPORT_SYMS=NO: every definition made local

    m = manifest(out, world.build_id, module)
    assert m["table_build_id"] == world.build_id == m["kernel"]["build_id"]
    assert m["ko"]["sha256"] == sha256_file(ko)
    assert m["check_ko"]["ok"] and {d["name"] for d in m["check_ko"]["depends"]} == {"kernel", "dtrace", "opensolaris"}
    assert m["check_ko"]["versions"] == [{"name": module, "version": 1}]
    cflags = m["flags"]["cflags"]
    # kmod.mk's part, kern.mk's part (evaluated from the stand-in), then the Makefile's after the include.
    assert cflags[:2] == ["-O2", "-pipe"] and "-D_SYS_VMEM_H_" in cflags  # OPENZFS_CFLAGS, before kmod.mk's
    assert cflags.index("-D_SYS_VMEM_H_") < cflags.index("-D_KERNEL") < cflags.index("-mcmodel=kernel")
    assert "-std=gnu99" in cflags and "-D__printf__=__freebsd_kprintf__" in cflags
    from helpers.kmod import KERN_MK

    assert cflags[cflags.index("-mcmodel=kernel"):cflags.index("-std=gnu99") + 1] == KERN_MK  # 14.x's kern.mk
    assert "-mretpoline" not in cflags  # MK_KERNEL_RETPOLINE defaults to no
    assert cflags[-2:] == ["-include", f"{tree.resolve()}/cddl/compat/opensolaris/sys/debug_compat.h"]
    assert m["flags"]["ldflags"] == ["-m", "elf_x86_64_fbsd", "-warn-common", "--build-id=sha1", "-T",
                                     f"{tree.resolve()}/conf/ldscript.kmod.amd64"]
    assert m["profile"]["kern.mk"] == "evaluated from the tree" and m["profile"]["clang_target"].endswith("14.3")
    assert "clang" in m["tools"] and "ld.lld" in m["tools"]
    roles = {i["role"] for i in m["inputs"]}
    assert roles >= {"source", "header", "kernel", "dependency module", "sys/ build file"}
    assert any(i["path"].endswith("/sys/param.h") and i["role"] == "header" for i in m["inputs"])
    assert any(c[0].endswith("awk") and c[-1] == "-h" for c in m["commands"])  # vnode_if.h, as kmod.mk makes it


def test_same_inputs_no_work_and_each_change_rebuilds(world: StandinWorld, tmp_path: Path) -> None:
    tree = world.tree("kinst", tmp_path / "sys")
    out = tmp_path / "build"
    args = ("--kernel", str(world.kernel), "--sysdir", str(tree), "--modules", "kinst", "--out", str(out),
            "--src", str(tmp_path / "src"))
    assert run_build(*args).returncode == 0
    ko = out / world.build_id / "kinst.ko"
    stat = ko.stat()
    res = run_build(*args)
    assert res.returncode == 0 and f"kinst: up to date: {ko}" in res.stdout and "kinst: built" not in res.stdout
    assert "sources unchanged" in res.stdout and ko.stat().st_mtime_ns == stat.st_mtime_ns
    # A header the compiler read changes: rebuilt.
    with open(tree / "sys" / "proc.h", "a") as f:
        f.write("/* changed */\n")
    res = run_build(*args)
    assert res.returncode == 0 and f"kinst: built {ko}" in res.stdout
    # The tree's kern.mk picks another C standard: rebuilt with it.
    kern = tree / "conf" / "kern.mk"
    kern.write_text(kern.read_text().replace("CSTD?=\t\tgnu99", "CSTD?=\t\tgnu17"))
    res = run_build(*args)
    assert res.returncode == 0 and f"kinst: built {ko}" in res.stdout
    assert "-std=gnu17" in manifest(out, world.build_id, "kinst")["flags"]["cflags"]


def test_check_ko_failure_fails_the_build_and_leaves_no_stamp(world: StandinWorld, sample_kernel: Path,
                                                              tmp_path: Path) -> None:
    """Against the sample kernel, which lacks the stand-in services, with the dependencies found: exit 1."""
    tree = world.tree("dtmalloc", tmp_path / "sys")
    out = tmp_path / "build"
    args = ("--kernel", str(sample_kernel), "--sysdir", str(tree), "--modules", "dtmalloc", "--out", str(out),
            "--src", str(tmp_path / "src"), "--module-path", str(world.kernel.parent))
    res = run_build(*args)
    assert res.returncode == 1, res.stdout + res.stderr
    errors = res.stderr.strip().splitlines()
    assert errors and all(ln.startswith("check-ko: ") and "undefined symbol" in ln for ln in errors)
    assert any("undefined symbol malloc_type_list " in ln for ln in errors)
    bid = KernelImage.open(str(sample_kernel)).build_id
    assert manifest(out, bid, "dtmalloc")["key"] is None
    assert "up to date" not in run_build(*args).stdout  # a failed check is never a stamp


def test_bad_sysdir_and_target_are_one_line(sample_kernel: Path, tmp_path: Path) -> None:
    res = run_build("--sysdir", str(tmp_path), "--out", str(tmp_path / "b"), "--src", str(tmp_path / "s"))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "not a FreeBSD sys/ tree" in res.stderr
    res = run_build("--target", "arm64", "--out", str(tmp_path / "b"))  # the sample kernel is amd64
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "--target arm64: the kernel" in res.stderr and "is amd64" in res.stderr
    res = run_build("--target", "sparc64", "--out", str(tmp_path / "b"))
    assert res.returncode == 2 and "invalid choice: 'sparc64'" in res.stderr
    res = run_build("--modules", "kinst,fbt", "--out", str(tmp_path / "b"))
    assert res.returncode == 2 and "unknown module 'fbt'" in res.stderr


# -- the flags: kern.mk evaluated, or the fallback -----------------------------------------


def test_cross_build_finds_sources_on_path(world: StandinWorld, tmp_path: Path) -> None:
    """The kinst Makefile's ISA files are found through its .PATH, as bmake finds them; a source that
    is nowhere is one line naming where it was looked for."""
    from generator.kmod.backends.cross import cross_build
    from generator.kmod.sources import stage_sources

    from generator.providers.kinst import generate as kinst

    tree = world.tree("kinst", tmp_path / "sys")
    profile = KmodProfile.for_tree(tree, isa.by_name("amd64"))
    src = tmp_path / "src" / "kinst"
    kinst.generate(KernelImage.open(str(world.kernel)), ["vm_fault"], False, src)
    stage_sources(PROVIDERS["kinst"], src)
    vars_ = profile.makefile_vars(ModuleMakefile.read(src / "Makefile"))
    assert vars_[".PATH"] == str(src / "amd64")
    (src / "kinst_target.c").unlink()
    ran: List[List[str]] = []

    def run(argv, cwd=None, env=None):
        ran.append(list(argv))
        return run_tool(argv, cwd, env)

    # The hand-written sources are found and compile; the generated file removed above is missing.
    with pytest.raises(UserError, match=rf"kinst_target.c: listed in SRCS but not in {src} or {src / 'amd64'}"):
        cross_build(PROVIDERS["kinst"], src, tmp_path / "obj", profile, run)
    compiled = [argv[argv.index("-c") + 1] for argv in ran if "-c" in argv]
    assert compiled == [str(src / "kinst.c"), str(src / "kinst_funcs.c"), str(src / "kinst_tramp.c"),
                        str(src / "amd64" / "kinst_isa.c"), str(src / "amd64" / "kinst_core.c")]


def test_a_kern_mk_that_cannot_be_read_falls_back_and_says_so(world: StandinWorld, tmp_path: Path) -> None:
    tree = world.tree("dtmalloc", tmp_path / "sys")
    (tree / "conf" / "kern.mk").write_text(".for _x in a b\nCFLAGS+= -D${_x}\n.endfor\n")
    profile = KmodProfile.for_tree(tree, isa.by_name("amd64"))
    makefile = ModuleMakefile.read(SYS_MODULES / "dtmalloc" / "Makefile")
    flags = profile.cflags(tmp_path / "obj", makefile)
    assert profile.facts["kern.mk"].startswith("not evaluated (.for)")
    assert "-mcmodel=kernel" in flags and "-std=gnu99" in flags  # the FreeBSD 14 amd64/clang flags
    assert "-Da" not in flags


def test_tree_facts(world: StandinWorld, tmp_path: Path) -> None:
    tree = world.tree("kinst", tmp_path / "sys")
    (tree / "sys" / "param.h").write_text("#define\t__FreeBSD_version\t1403000\n")
    profile = KmodProfile.for_tree(tree, isa.by_name("amd64"))
    assert profile.osreldate == 1403000 and profile.triple == "x86_64-unknown-freebsd14.3"
    assert [n for n, _ in profile.ilinks()] == ["machine", "x86", "i386"]
    (tree / "sys" / "param.h").write_text("/* no version */\n")
    with pytest.raises(UserError, match="no __FreeBSD_version"):
        KmodProfile.for_tree(tree, isa.by_name("amd64"))


# -- the FreeBSD path, with a runner that plays make ------------------------------------------


def test_native_build_command_and_manifest_fields(tmp_path: Path, tmp_path_factory) -> None:
    fx = kofixtures.shared(tmp_path_factory)
    good = fx.module()
    srcdir, objdir, sysdir = tmp_path / "src" / "kinst", tmp_path / "obj" / "kinst", tmp_path / "sys"
    srcdir.mkdir(parents=True)
    (sysdir / "kern").mkdir(parents=True)
    calls: List[tuple] = []

    def make(argv: Sequence[str], cwd: Optional[Path], env: Optional[Dict[str, str]]) -> Completed:
        calls.append((list(argv), cwd, env))
        obj = Path(env["MAKEOBJDIR"])
        if "-V" not in argv:  # bsd.kmod.mk: objects and the .ko in MAKEOBJDIR, dependency files beside them
            shutil.copy(good, obj / "kinst.ko")
            (srcdir / "kinst_encoding.h").write_text("/* header */\n")
            depend = f"kinst.o: {srcdir}/kinst.c \\\n  {srcdir}/kinst_encoding.h\n"
            (obj / ".depend.kinst.o").write_text(depend)
            return Completed(0, "", "")
        return Completed(0, "kinst\n-O2 -pipe -D_KERNEL -mcmodel=kernel\n-warn-common --build-id=sha1\ncc\nld\n"
                            "20240711\n", "")

    req = BuildRequest(kernel="k", sysdir=str(sysdir), modules=("kinst",), backend="native", make="make")
    built = native_build(req.make, PROVIDERS["kinst"], srcdir, objdir, sysdir, make)
    (argv, cwd, env), (query, _, _) = calls
    assert argv == ["make", f"SYSDIR={sysdir}"] and cwd == srcdir and env["MAKEOBJDIR"] == str(objdir)
    assert query == ["make", f"SYSDIR={sysdir}", "-V", "${KMOD}", "-V", "${CFLAGS}", "-V", "${LDFLAGS}", "-V", "${CC}",
                     "-V", "${LD}", "-V", "${MAKE_VERSION}"]
    assert built.ko_built == objdir / "kinst.ko"
    assert built.cflags == ["-O2", "-pipe", "-D_KERNEL", "-mcmodel=kernel"]
    assert built.ldflags == ["-warn-common", "--build-id=sha1"]
    assert built.mode == "native (make with bsd.kmod.mk)" and built.tools["make"] == "bmake 20240711"
    assert built.headers == [str((srcdir / "kinst_encoding.h").resolve())]  # from bsd.dep.mk's .depend.* files

    def failing(argv, cwd, env) -> Completed:
        return Completed(2, "", 'make: "/usr/share/mk/bsd.sysdir.mk" line 1: Unable to locate the kernel source tree.')

    with pytest.raises(UserError, match="kinst: make \\(bsd.kmod.mk\\): make failed \\(exit 2\\)"):
        native_build(req.make, PROVIDERS["kinst"], srcdir, objdir, sysdir, failing)


def test_native_needs_freebsd(tmp_path: Path) -> None:
    skips.require_other_than_freebsd("--native is the default")
    res = run_build("--native", "--out", str(tmp_path))
    assert res.returncode == 2 and "needs a FreeBSD host" in res.stderr


# -- fetch-release, then build --release: the CI cross path, against a loopback mirror ----------


def test_fetch_release_then_build_release(world: StandinWorld, tmp_path: Path) -> None:
    """The cross-build CI job end to end: a loopback mirror serves a "release" made of the stand-ins."""
    import hashlib
    import http.server
    import tarfile
    import threading
    from functools import partial

    name = "14.3-RELEASE"
    pub = tmp_path / "mirror" / "releases" / "amd64" / name
    pub.mkdir(parents=True)
    tree = world.tree("kinst", tmp_path / "sys")
    sets = {"src.txz": [(tree, "usr/src/sys")],
            "kernel.txz": [(p, f"boot/kernel/{p.name}") for p in (world.kernel, *world.kernel.parent.glob("*.ko"))],
            "kernel-dbg.txz": [(world.kernel, "usr/lib/debug/boot/kernel/kernel.debug")]}
    lines = []
    for dist, members in sets.items():
        with tarfile.open(pub / dist, "w:xz") as tar:
            for path, arcname in members:
                tar.add(path, arcname=arcname)
        digest = hashlib.sha256((pub / dist).read_bytes()).hexdigest()
        lines.append(f"{dist}\t{digest}\t1\t{dist[:-4]}\t\"{dist}\"\ton\n")
    (pub / "MANIFEST").write_text("".join(lines))
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    handler = partial(Quiet, directory=str(tmp_path / "mirror"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    try:
        cache = tmp_path / "cache"
        fetch = subprocess.run([sys.executable, "-m", "generator", "fetch-release", "--release", name, "--mirror",
                                f"http://127.0.0.1:{server.server_address[1]}", "--cache", str(cache)],
                               capture_output=True, text=True, cwd=REPO, timeout=120)
        assert fetch.returncode == 0, fetch.stderr
    finally:
        server.shutdown()
        server.server_close()
    out = tmp_path / "build"
    res = run_build("--release", name, "--cache", str(cache), "--modules", "kinst", "--out", str(out),
                    "--src", str(tmp_path / "src"))
    assert res.returncode == 0, res.stdout + res.stderr
    m = manifest(out, world.build_id, "kinst")
    assert m["kernel"]["path"] == str(cache / "releases" / "amd64" / name / "boot" / "kernel" / "kernel")
    assert m["sysdir"] == str(cache / "releases" / "amd64" / name / "usr" / "src" / "sys")
    # dtrace.ko and opensolaris.ko came with kernel.txz, next to the kernel: every symbol was checked.
    assert m["check_ko"]["ok"] and not m["check_ko"]["assumed"]
    assert m["check_ko"]["resolved"]["dtrace_register"] == "dtrace.ko"


# -- a real release ---------------------------------------------------------------------------


def test_build_against_a_fetched_release(tmp_path: Path) -> None:
    """The real thing: a release's sys/ tree and kernel from `invoke fetch-release`."""
    name = skips.require_env("KINSTKIT_TEST_RELEASE", "set it to a release `invoke fetch-release` cached "
                             "(e.g. 14.3-RELEASE); no FreeBSD sys/ tree or kernel exists here otherwise")
    from generator.kmod.release import fetched

    rel = fetched(name)
    res = run_build("--release", name, "--out", str(tmp_path / "build"), "--src", str(tmp_path / "src"))
    assert res.returncode == 0, res.stdout + res.stderr
    bid = KernelImage.open(str(rel.kernel)).build_id
    for m in ("kinst", "dtmalloc"):
        man = manifest(tmp_path / "build", bid, m)
        assert man["check_ko"]["ok"] and not man["check_ko"]["assumed"]


@pytest.mark.parametrize("arch, machine", [("arm64", "EM_AARCH64"), ("riscv", "EM_RISCV")])
def test_cross_build_for_a_shared_module_isa(arch: str, machine: str, tmp_path: Path) -> None:
    """arm64 and riscv modules are ET_DYN (kmod.mk's __KLD_SHARED): ``build`` with an ISA's kernel links
    ``ld -r`` into a .kld, then ``-Bshareable``, from the ISA's own record, and check-ko reads the result's
    module records through its dynamic relocations.  The kernel is kfix linked as a FreeBSD kernel of that
    ISA, the tree FreeBSD 14.3's installed headers for it (the ziglang wheel)."""
    from helpers import cross
    from helpers.freebsd_arch_headers import sys_tree

    cross.require_cross(arch, f"the {arch} module's portable core is also compiled with the ISA's gcc")
    kernel = cross.freebsd_module(arch)["kernel"]
    out = tmp_path / "out"
    res = run_build("--kernel", str(kernel), "--sysdir", str(sys_tree(arch)), "--modules", "kinst", "--all",
                    "--out", str(out), "--src", str(tmp_path / "src"))
    assert res.returncode == 0, res.stderr[-2000:]
    ko = next(out.glob("*/kinst.ko"))
    img = KernelImage.open(str(ko))
    assert (img.e_type, img.machine) == ("ET_DYN", machine)
    manifest = json.loads(ko.with_suffix(".json").read_text())
    links = [c for c in manifest["commands"] if "ld.lld" in Path(c[0]).name]
    assert [("-r" in c, "-Bshareable" in c) for c in links] == [(True, False), (False, True)]
    assert all(isa.by_name(arch).kmod.ld_emulation in c for c in links)
    report = manifest["check_ko"]
    assert report["ok"] and report["modules"] == ["kinst"] and report["versions"] == [{"name": "kinst", "version": 1}]
    assert {d["name"] for d in report["depends"]} == {"kernel", "dtrace", "opensolaris"}
