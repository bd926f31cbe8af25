"""The kinst provider: generated files deterministic, the module compiling, and the glue's logic run.

``generate`` writes only what varies with the image (kinst_table.c,
kinst_target.c, kinst_encoding.h, kinst_refused.txt); the rest is hand-written
in sys/modules/kinst/ (kinst.c, kinst.h, kinst_target.h, kinst_funcs.[ch];
amd64/kinst_isa.c and the portable core amd64/kinst_core.[ch]).  The tests
compile the two together in a module directory staged the way ``invoke build
--src`` stages one.  What this machine can check, in order of strength:

* the portable core, the table and the target data compile with gcc and with
  clang for FreeBSD (freestanding, kernel code model, -Wall -Wextra
  -Werror), also with the warnings FreeBSD's kernel builds add;
* the same inputs give byte-identical files, whose headers name the
  generator, the input and its build-id and sha256, and whose KINST_F_* and
  enum kinst_kind values are the Python ones;
* the FreeBSD glue (kinst.c and amd64/kinst_isa.c), built with the stand-in
  declarations of tests/fixtures/kinst/kinst_standin.h, *runs* over stand-in kernel services (tests/fixtures/kinst/glue_world.c,
  a unity build of both): load and the build-id check, resolution with a
  load bias, probes made on demand only (never for provide(NULL) or a glob),
  every copy of a same-named function, the per-function digest, every table
  probe armed, hit and disarmed with its trampoline contents and call target
  checked against what capstone reads from the live instruction (computed
  here, not by the C core), trampolines taken at enable and kept by address,
  another patcher's byte left alone, and unload keeping the trampoline pages
  -- for a kernel table and for a .ko table whose relocated fields differ
  from the file;
* against a real FreeBSD sys/ tree when $SYSDIR names one (skipped, naming
  SYSDIR, otherwise); FreeBSD 14.3's and 15's installed headers are
  tests/toolchain/test_real_headers.py.
"""

from __future__ import annotations

import filecmp
import hashlib
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional

import pytest
from elftools.elf.elffile import ELFFile

from generator import __version__
from generator.analysis.plan import ProbePlan
from generator.kmod.sources import source_dir, stage_sources
from generator.providers import PROVIDERS
from generator.common.paths import REPO, SAMPLES
from generator import isa
from generator.image.elf import KernelImage
from generator.isa.contract import STATUS_OK
from generator.isa.amd64.probe_md import KinstFlag
from generator.isa.amd64.probe_md import TABLE_KINDS
from helpers.ctext import c_bytes
from helpers.paths import KINST_FIXTURES as FIXTURES
from generator.providers.kinst.generate import build_plan
from helpers.skips import require_sample_toolchain, require_sysdir, require_tools

KINST = PROVIDERS["kinst"]
RENDERED = ["kinst_encoding.h", "kinst_refused.txt", "kinst_table.c", "kinst_target.c"]
CORE_SOURCES = list(KINST.portable("amd64"))  # amd64/kinst_core.c, kinst_table.c, kinst_target.c
INCLUDES = [f"-I{d}" for d in KINST.includes("amd64")]  # relative to the module directory
GLUE_SOURCES = ["kinst.c", "kinst_tramp.c", "amd64/kinst_isa.c"]  # hand-written, each its own compilation unit

STRICT = ["-std=c99", "-ffreestanding", "-mcmodel=kernel", "-mno-red-zone", "-fno-pic", "-Wall", "-Wextra", "-Werror"]
FREEBSD_CLANG = ["clang", "--target=x86_64-unknown-freebsd14.0"]
COMPILERS = {"gcc": ["gcc"], "clang-freebsd": FREEBSD_CLANG}
COMPILERS_WHY = "the portable core, the table and the glue are compiled with gcc and with clang"
# sys/conf/kern.mk's CWARNFLAGS, with -Wredundant-decls and -Wnested-externs
# that older releases had: the portable core passes the stricter set.
KERNEL_WARNINGS = ["-Wredundant-decls", "-Wnested-externs", "-Wstrict-prototypes", "-Wmissing-prototypes",
                   "-Wpointer-arith", "-Wcast-qual", "-Wundef", "-Wno-pointer-sign"]


def generate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "generator", "generate", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=600)


def render(out: Path, *args: str) -> Path:
    res = generate("--provider", "kinst", *args, "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[1:] == [str(out / n) for n in RENDERED]
    return out


def module_dir(tree: Path, where: Path) -> Path:
    """A complete module directory: the rendered ``tree`` plus the hand-written C and Makefile, staged."""
    shutil.copytree(tree, where)
    stage_sources(KINST, where)
    return where


@pytest.fixture(scope="module")
def trees(sample_kernel: Path, tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    """The sample kernel rendered for one function and for --all (generated files only)."""
    base = tmp_path_factory.mktemp("kinst")
    return {
        "single": render(base / "single", "--kernel", str(sample_kernel), "--function", "vm_fault"),
        "all": render(base / "all", "--kernel", str(sample_kernel), "--all"),
    }


@pytest.fixture(scope="module")
def modules(trees: Dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    """Each rendered tree staged into a module directory, as ``invoke build --src`` stages one."""
    base = tmp_path_factory.mktemp("kinst-module")
    return {which: module_dir(tree, base / which) for which, tree in trees.items()}


def cc(argv: List[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True)


# --- (a) the core and the table compile ----------------------------------


@pytest.mark.parametrize("which", ["single", "all"])
@pytest.mark.parametrize("compiler", sorted(COMPILERS))
def test_core_and_table_compile(modules: Dict[str, Path], which: str, compiler: str, tmp_path: Path) -> None:
    argv = COMPILERS[compiler]
    require_tools(argv[0], why=COMPILERS_WHY)
    for src in CORE_SOURCES:
        res = cc([*argv, *STRICT, *INCLUDES, "-c", src, "-o", str(tmp_path / (Path(src).name + ".o"))],
                 modules[which])
        assert res.returncode == 0, f"{compiler} {src}:\n{res.stderr}"


@pytest.mark.parametrize("compiler", sorted(COMPILERS))
def test_core_compiles_with_kernel_warnings(modules: Dict[str, Path], compiler: str, tmp_path: Path) -> None:
    """The kmod build adds kern.mk's CWARNFLAGS; the core must pass them too."""
    argv = COMPILERS[compiler]
    require_tools(argv[0], why=COMPILERS_WHY)
    for src in CORE_SOURCES:
        res = cc([*argv, *STRICT, *KERNEL_WARNINGS, "-nostdinc", *INCLUDES, "-c", src, "-o", str(tmp_path / "x.o")],
                 modules["all"])
        assert res.returncode == 0, f"{compiler} {src}:\n{res.stderr}"


def test_portable_sources_include_no_system_header(modules: Dict[str, Path]) -> None:
    """The core, its headers, the table and the target data compile anywhere: no <...> include, but
    <sys/types.h> in a FreeBSD kernel build (style(9)'s integer types)."""
    files = [*CORE_SOURCES, "amd64/kinst_core.h", "kinst_funcs.h", "kinst_encoding.h", "kinst_target.h"]
    text = "".join((modules["all"] / f).read_text() for f in files)
    kernel_only = re.compile(r"#ifdef \w+_SYS_TYPES\n#include <sys/types.h>\n.*?#else\n",
                             re.S)
    assert '#include "kinst_core.h"' in text and "#include <" not in kernel_only.sub("", text)


# --- (b) determinism -------------------------------------------------------


@pytest.mark.parametrize("which", ["single", "all"])
def test_same_inputs_give_identical_trees(trees: Dict[str, Path], sample_kernel: Path, which: str,
                                          tmp_path: Path) -> None:
    args = ["--kernel", str(sample_kernel)] + (["--all"] if which == "all" else ["--function", "vm_fault"])
    again = render(tmp_path / "again", *args)
    assert sorted(p.name for p in again.iterdir()) == sorted(p.name for p in trees[which].iterdir()) == RENDERED
    match, mismatch, errors = filecmp.cmpfiles(trees[which], again, RENDERED, shallow=False)
    assert (mismatch, errors) == ([], []), mismatch


# --- (c) the header names generator, input, build-id, sha256 --------------


def build_id(path: Path) -> str:
    with open(path, "rb") as f:
        for sec in ELFFile(f).iter_sections():
            if sec["sh_type"] == "SHT_NOTE":
                for note in sec.iter_notes():
                    if note["n_type"] == "NT_GNU_BUILD_ID":
                        return note["n_desc"]
    return ""


def test_headers_name_generator_and_input(trees: Dict[str, Path], sample_kernel: Path) -> None:
    sha = hashlib.sha256(sample_kernel.read_bytes()).hexdigest()
    bid = build_id(sample_kernel)
    assert re.fullmatch(r"[0-9a-f]{40}", bid)
    for which, tree in trees.items():
        for name in RENDERED:
            head = "\n".join((tree / name).read_text().splitlines()[:12])
            assert f"Generated by kinstkit {__version__} from templates/kinst/{name}.j2" in head, (which, name)
            assert f"Input: {sample_kernel}" in head and f"build-id {bid}" in head and f"sha256 {sha}" in head
            assert "Do not edit" in head
    table = (trees["all"] / "kinst_table.c").read_text()
    assert f'.kt_build_id = "{bid}",' in table


# --- (d) encodings: the C header equals the Python owners -----------------


def test_core_header_encodings_match_python(trees: Dict[str, Path]) -> None:
    header = (trees["single"] / "kinst_encoding.h").read_text()
    flags = {m[0]: int(m[1], 16) for m in re.findall(r"#define\s+KINST_F_(\w+)\s+(0x[0-9a-fA-F]+)", header)}
    assert flags == {f.name: int(f) for f in KinstFlag}
    enum = re.search(r"enum kinst_kind \{(.*?)\};", header, re.S).group(1)
    kinds = [(m[0], int(m[1])) for m in re.findall(r"(KINST_K_\w+)\s*=\s*(\d+)", enum)]
    assert kinds == [(c, i) for i, (_, c, _) in enumerate(TABLE_KINDS)]


# --- (e) the glue against a FreeBSD sys/ tree ------------------------------


def test_glue_against_sysdir(trees: Dict[str, Path], tmp_path: Path) -> None:
    """On FreeBSD, `make` with bsd.kmod.mk; elsewhere clang with the kmod line (helpers.kmod) against $SYSDIR."""
    sysdir = require_sysdir("sys/dtrace_bsd.h", "the kinst glue build against it is skipped")
    work = module_dir(trees["all"], tmp_path / "kinst")
    share_mk = sysdir.parent / "share" / "mk"
    if os.uname().sysname == "FreeBSD":
        argv = ["make", f"SYSDIR={sysdir}", "WITHOUT_CTF=yes"]
        if share_mk.is_dir():
            argv[1:1] = ["-m", str(share_mk)]
        res = subprocess.run(argv, cwd=work, capture_output=True, text=True)
        assert res.returncode == 0, res.stdout + res.stderr
        assert (work / "kinst.ko").is_file()
        return
    require_tools("clang", "awk", why="the glue is compiled with clang against $SYSDIR, vnode_if.h made with awk")
    from generator.kmod.kmodflags import KmodProfile
    from helpers.kmod import kmod_cflags, prepare_objdir

    obj = tmp_path / "obj"
    prepare_objdir(sysdir, obj)
    argv = kmod_cflags(sysdir, obj, [work, work / "amd64"], KmodProfile.for_tree(sysdir, isa.by_name("amd64")).triple)
    for src in (*GLUE_SOURCES, *CORE_SOURCES):
        res = cc([*argv, "-c", str(work / src), "-o", str(obj / (Path(src).stem + ".o"))], obj)
        assert res.returncode == 0, f"{src}:\n{res.stderr}"


@pytest.mark.parametrize("cpuarch, folders", [("amd64", ["amd64"]), ("aarch64", ["arm64", "dbp"]),
                                              ("riscv", ["riscv", "dbp"])])
def test_makefile_builds_the_module_sources(cpuarch: str, folders: list) -> None:
    """SRCS: the hand-written and the generated C, as bmake reads the Makefile for each MACHINE_CPUARCH;
    .PATH finds the ISA folder's files (and, on arm64 and riscv, their shared dbp/), -I their headers."""
    from generator.kmod.mk import MkReader, ModuleMakefile

    module = source_dir(KINST)
    text = (module / "Makefile").read_text()
    assert re.search(r"^KMOD=\s+kinst$", text, re.M)
    assert ".include <bsd.kmod.mk>" in text and "${OPENZFS_CFLAGS}" in text
    assert "debug_compat.h" in text.split(".include <bsd.kmod.mk>")[1]
    makefile = ModuleMakefile.read(module / "Makefile")
    mk = MkReader({"MACHINE_CPUARCH": cpuarch, ".CURDIR": str(module)})
    mk.read(makefile.before)
    srcs = mk.expand("${SRCS}").split()
    c_files = [n for n in srcs if n.endswith(".c")]
    shared = ["kinst_dbp.c", "kinst_dbp_tramp.c", "kinst_core_dbp.c"] if "dbp" in folders else []
    jump = ["kinst_core_jump.c"] if cpuarch == "amd64" else []  # jump probes: amd64 only
    assert sorted(c_files) == sorted(["kinst.c", "kinst_funcs.c", "kinst_tramp.c", "kinst_isa.c", "kinst_core.c",
                                      "kinst_target.c", "kinst_table.c", *shared, *jump])
    assert "vnode_if.h" in srcs
    assert mk.search_path(".c") == [str(module / f) for f in folders]
    assert " ".join(f"-I{d}" for d in (module, *(module / f for f in folders))) in mk.expand("${CFLAGS}")
    # Each source is hand-written (in the module directory or on .PATH) or generated.
    for name in c_files:
        found = [d for d in (module, *map(Path, mk.search_path(".c"))) if (d / name).is_file()]
        assert len(found) == 1 or name in RENDERED, name


# --- the glue run over stand-in kernel services ------------------------------
#
# Compiling the glue against FreeBSD's own headers is tests/toolchain/test_real_headers.py;
# here it runs in user space, over the stand-ins of tests/fixtures/kinst/.


def standin_tree(module: Path, root: Path) -> Path:
    """Every <...> header the glue (kinst.c, amd64/kinst_isa.c) includes, as a file that includes kinst_standin.h,
    for running the glue in user space (glue_world.c)."""
    for glue in GLUE_SOURCES:
        for header in re.findall(r"^#include <([^>]+)>", (module / glue).read_text(), re.M):
            path = root / header
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text('#include "kinst_standin.h"\n')
    return root


class LiveImage(NamedTuple):
    """An image as glue_host maps it: its allocated sections laid out from ``base``, in bytes the test may
    change before the glue sees them (another build's byte, a loader's relocated values)."""

    path: Path
    base: int
    data: bytearray


def live_image(image: Path) -> LiveImage:
    from generator.image.elf import KernelImage

    img = KernelImage.open(str(image))
    secs = [s for s in img.sections if s.size]
    base = min(s.addr for s in secs)
    data = bytearray(max(s.addr + s.size for s in secs) - base)
    for s in secs:
        if not s.nobits:
            data[s.addr - base : s.addr + s.size - base] = img.read(s.addr, s.size)
    return LiveImage(image, base, data)


def image_files(live: LiveImage, out: Path) -> List[str]:
    """The live bytes as glue_host maps them, and the image's function symbols."""
    from generator.image.elf import KernelImage

    img = KernelImage.open(str(live.path))
    name = live.path.name
    (out / f"{name}.img").write_bytes(f"{live.base:x}\n".encode() + bytes(live.data))
    syms = [f"{n} {f.address:x} {f.size:x}" for f in img.functions() for n in (f.name, *f.aliases)]
    (out / f"{name}.syms").write_text("\n".join(syms) + "\n")
    return [str(out / f"{name}.img"), str(out / f"{name}.syms")]


class Expected(NamedTuple):
    probe: str  # name@file:offset
    kind: str
    relocated: bool  # a relocation fills part of the instruction


def write_expectations(live: LiveImage, plan: ProbePlan, path: Path) -> List[Expected]:
    """What each table probe must do when hit, one line each for glue_host (read_expect()): kinst's
    probe metadata as capstone reads the *live* instruction -- the ISA's decode and classify, the
    generator's own classification -- so that the glue's trampolines and emulated calls are checked
    against values computed without the C core that derived them."""
    from generator.image.elf import KernelImage

    img = KernelImage.open(str(live.path))
    lines: List[str] = []
    out: List[Expected] = []
    for p in plan.probes():
        func = plan.funcs[p.func]
        addr = func.address + p.offset
        code = bytes(live.data[addr - live.base : addr - live.base + p.length + 15])
        insns, _ = img.isa.decode(code, addr, p.length)
        assert insns and insns[0].length == p.length, plan.probe_name(p)
        v = img.isa.classify(code[: p.length], addr, insns[0].mnemonic, insns[0].operands)
        assert v.status == STATUS_OK and v.kind == p.kind, (plan.probe_name(p), v.kind, v.reason)
        md = v.md
        assert len(md.template) == 16
        relocated = img.e_type == "ET_REL" and bool(img.relocs_in(addr, p.length))
        lines.append(f"{func.address:x} {p.offset} {TABLE_KINDS.code(p.kind)} {md.flags} {md.instlen} {md.tinstlen} "
                     f"{md.dispoff} {md.disp} {md.reg1} {md.reg2} {md.scale} {md.template.hex()} {int(relocated)}")
        out.append(Expected(plan.probe_name(p), p.kind, relocated))
    path.write_text("\n".join(lines) + "\n")
    return out


def run_world(tree: Path, work: Path, scenario: str, kernel: LiveImage, build_id_arg: str, *,
              module: Optional[LiveImage] = None, expect: Optional[Path] = None, victim: str = "",
              far: bool = False, sanitize: str = "") -> str:
    """Build glue_world (kinst.c and amd64/kinst_isa.c as one unit) with the module's portable
    objects and run one scenario; ``tree`` is a staged module directory, ``sanitize`` a gcc
    -fsanitize= value for every part (the scenario fails on any report)."""
    require_tools("gcc", why="glue_world and its host are built with gcc")
    work.mkdir(parents=True, exist_ok=True)
    stubs = standin_tree(tree, work / "stubs")
    flags = ["-std=c99", "-Wall", "-Wextra", "-Werror"]
    if sanitize:
        flags += [f"-fsanitize={sanitize}", "-g", "-O1"]
    includes = [f"-I{tree / d}" for d in KINST.includes("amd64")]
    res = cc(["gcc", *flags, "-ffreestanding", "-nostdinc", "-D_KERNEL", f"-I{stubs}", f"-I{FIXTURES}", *includes,
              "-c", str(FIXTURES / "glue_world.c"), "-o", str(work / "world.o")], work)
    assert res.returncode == 0, res.stderr
    exe = work / "glue_host"
    res = cc(["gcc", *flags, f"-I{FIXTURES}", *includes, str(FIXTURES / "glue_host.c"), str(work / "world.o"),
              *(str(tree / src) for src in CORE_SOURCES), "-o", str(exe)], work)
    assert res.returncode == 0, res.stderr
    argv = [str(exe), scenario, build_id_arg, *image_files(kernel, work)]
    if module is not None:
        argv += ["--module", module.path.name, *image_files(module, work)]
    if expect is not None:
        argv += ["--expect", str(expect)]
    if victim:
        argv += ["--victim", victim]
    if far:
        argv.append("--far-pool")
    # The host's own allocations live to the end; the world counts the glue's (w_alloc_bytes).
    env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=0"}
    run = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stdout[:3000] + "\n...\n" + run.stdout[-6000:] + run.stderr[-8000:]
    last = run.stdout.strip().splitlines()[-1]
    assert re.fullmatch(rf"{scenario}: \d+ checks, 0 failed, \d+ probes, \d+ trampoline pages", last), last
    return run.stdout


def kinst_lines(out: str, prefix: str = "kinst: ") -> List[str]:
    return [x for x in out.splitlines() if x.startswith(prefix)]


def between(lines: List[str], first: str, last: str) -> List[str]:
    return lines[lines.index(first) + 1 : lines.index(last)]


HINT = ("kinst: probes are made per named function (kinst::FUNC: or kinst::FUNC:OFFSET), none for an empty or "
        "glob function; `invoke probes` (python -m generator probes) lists a function's probe sites")


def plan_of(kernel: Path, which: str) -> ProbePlan:
    """The plan ``generate`` rendered into trees[which]."""
    return build_plan(KernelImage.open(str(kernel)), [] if which == "all" else ["vm_fault"], which == "all")


@pytest.mark.parametrize("which", ["single", "all"])
def test_glue_runs_a_kernel_table(modules: Dict[str, Path], sample_kernel: Path, which: str, tmp_path: Path) -> None:
    """Probes on demand only, every copy of a same-named function, every table probe armed, hit and
    disarmed against capstone's expectations, trampolines taken at enable and kept by their address,
    another patcher's byte left alone, and unload keeping the trampoline pages (glue_world checks each)."""
    plan = plan_of(sample_kernel, which)
    expected = write_expectations(live_image(sample_kernel), plan, tmp_path / "expect")
    assert len(expected) == plan.nprobes > 0
    out = run_world(modules[which], tmp_path / "world", "kernel", live_image(sample_kernel), build_id(sample_kernel),
                    expect=tmp_path / "expect")
    lines = out.splitlines()
    # provide(): the hint for kinst::: and kinst::vm_*:, once each; none for ::: or another provider.
    assert between(lines, "world: provide kinst::: and kinst::vm_*:", "world: provide ::: and fbt::vm_fault:") == \
        [HINT, HINT]
    assert between(lines, "world: provide ::: and fbt::vm_fault:", "world: provided") == []
    assert kinst_lines(out).count(HINT) == 2
    assert f"world: {len(expected)} probes hit" in lines and f"world: {len(expected)} probes hit again" in lines
    assert any(x.startswith("world: trampoline reused at ") for x in lines)
    # Another patcher: enable refused once (though asked twice), disable leaves its byte, once.
    refusals = [x for x in lines if re.fullmatch(r"kinst: not enabling kernel:\w+:\d+: the byte there is not the "
                                                 r"original one \(another provider's breakpoint\?\) \(byte 0xcc, "
                                                 r"original 0x[0-9a-f]+\)", x)]
    assert len(refusals) == 1, kinst_lines(out)
    left = [x for x in lines if re.fullmatch(r"kinst: disabling kernel:\w+:\d+: the byte there is 0xe9, not our "
                                             r"breakpoint: left as it is \(another patcher rewrote the site\)", x)]
    assert len(left) == 1, kinst_lines(out)
    if which == "all":
        copies = [f for f in plan.funcs if f.name == "sysctl_handle"]
        assert len(copies) == 2
        assert (f"world: same-named sysctl_handle: 2 copies, {sum(f.probes for f in copies)} probes, "
                "2 entries fired their own probe") in lines
        refused = [x.split()[-1] for x in lines if x.startswith("world: refused offset ")]
        assert len(refused) == 1
        assert f"kinst: {refused[0]} is not a probe of the generated table (kinst_refused.txt says why)" in lines


def test_glue_reuses_its_trampoline_pages_across_load_cycles(modules: Dict[str, Path], sample_kernel: Path,
                                                             tmp_path: Path) -> None:
    """Issue 20 item 9: six kldload/kldunload cycles, each arming, hitting and disarming every table probe.
    The pages stay mapped at unload (a thread may be inside one) and the first cycle's pool is found by every
    later load through the sysctl the kernel keeps: no cycle after the first maps a page or keeps a byte more,
    and each probe gets the slot it had (glue_world counts every map and unmap of a trampoline page)."""
    plan = plan_of(sample_kernel, "single")
    write_expectations(live_image(sample_kernel), plan, tmp_path / "expect")
    out = run_world(modules["single"], tmp_path / "world", "cycles", live_image(sample_kernel),
                    build_id(sample_kernel), expect=tmp_path / "expect")
    cycles = [tuple(map(int, m.groups())) for m in
              re.finditer(r"^world: cycle (\d+): (\d+) trampoline pages mapped, (\d+) unmapped, (\d+) bytes kept, "
                          r"pool found (\d+) times$", out, re.M)]
    assert [c[0] for c in cycles] == list(range(1, 7)), out[-3000:]
    pages, kept = cycles[0][1], cycles[0][3]
    assert pages > 0 and kept > 0
    assert all(c[1] == pages and c[2] == 0 and c[3] == kept for c in cycles), cycles
    assert [c[4] for c in cycles] == list(range(6)), cycles


def test_glue_makes_probes_while_dtrace_destroys_others(modules: Dict[str, Path], sample_kernel: Path,
                                                        tmp_path: Path) -> None:
    """Two threads over the glue with real locks, under ThreadSanitizer: one makes vm_fault's probes by
    the ioctl (kinst_sx), the other closes the device, which condenses them (dtps_destroy unlinks them
    from the address chains under kinst_hash_mtx).  Any memory both touch unordered is a report, and
    the run fails."""
    out = run_world(modules["single"], tmp_path, "race", live_image(sample_kernel), build_id(sample_kernel),
                    sanitize="thread")
    assert re.search(r"^world: race: \d+ probes made$", out, re.M), out[-2000:]


def test_glue_refuses_a_malformed_table(trees: Dict[str, Path], sample_kernel: Path, tmp_path: Path) -> None:
    """A table whose name order points past its functions (an index the glue would use to write its
    per-function state): MOD_LOAD fails with one line and registers nothing.  Under AddressSanitizer, so
    that a load that went on would be caught writing out of bounds."""
    from generator.common.cstring import c_blob
    from generator.providers.kinst.generate import table_blobs

    work = module_dir(trees["single"], tmp_path / "malformed")
    blobs = table_blobs(plan_of(sample_kernel, "single"))
    bad = struct.pack("<I", 0x7FFF) + blobs["byname"][4:]
    table = work / "kinst_table.c"
    text = table.read_text()
    assert c_blob(blobs["byname"]) in text
    table.write_text(text.replace(c_blob(blobs["byname"]), c_blob(bad)))
    out = run_world(work, tmp_path / "world", "malformed", live_image(sample_kernel), build_id(sample_kernel),
                    sanitize="address")
    assert kinst_lines(out) == ["kinst: the generated table is malformed (a name-order index is not a function): "
                                "not loading"]


def test_glue_refuses_another_kernel(modules: Dict[str, Path], sample_kernel: Path, tmp_path: Path) -> None:
    out = run_world(modules["single"], tmp_path, "build-id", live_image(sample_kernel), "0" * 40)
    assert kinst_lines(out) == [f"kinst: table made for kernel build-id {build_id(sample_kernel)}, running kernel is "
                                f"{'0' * 40}: not loading"]


def test_glue_refuses_unload_while_a_thread_may_be_in_a_trampoline(modules: Dict[str, Path], sample_kernel: Path,
                                                                    tmp_path: Path) -> None:
    """The ISA part (arm64's, riscv's kinst_tramp_quiesce(), stood in for by glue_world) says a thread may
    still be inside a trampoline: kldunload is EBUSY with one line each time, safe to repeat (the provider
    is unregistered once), and goes through once none is."""
    out = run_world(modules["single"], tmp_path, "unload-busy", live_image(sample_kernel), build_id(sample_kernel))
    line = ("kinst: not unloading: a thread is still inside a trampoline, or left one through an exception; the "
            "breakpoint handler and the trampolines stay (kldunload again later)")
    assert between(out.splitlines(), "world: unload with a thread in a trampoline", "world: the thread left") == \
        [line, line]
    assert kinst_lines(out).count(line) == 2


def test_glue_skips_a_function_whose_bytes_differ(modules: Dict[str, Path], sample_kernel: Path,
                                                   tmp_path: Path) -> None:
    """One byte of vm_fault changed in the live image: no probes there, one line naming it; every other
    function still gets all its probes."""
    from generator.image.elf import KernelImage

    live = live_image(sample_kernel)
    func = KernelImage.open(str(sample_kernel)).lookup("vm_fault")
    live.data[func.address + func.size // 2 - live.base] ^= 0x5a
    out = run_world(modules["all"], tmp_path, "digest", live, build_id(sample_kernel), victim="vm_fault")
    assert between(out.splitlines(), "world: making vm_fault, twice", "world: made") == [
        "kinst: no probes in vm_fault: its bytes differ from the table's (another build of it, or code patched since)"]
    assert len(kinst_lines(out)) == 1


def test_glue_excluded_function_with_an_offset_is_not_an_error(trees: Dict[str, Path], sample_kernel: Path,
                                                                tmp_path: Path) -> None:
    """A function the module's exclusion list names: an explicit offset makes nothing and answers 0, as
    stock kinst does, with one line saying why."""
    work = module_dir(trees["single"], tmp_path / "excluded")
    target = work / "kinst_target.c"
    marker = "const struct kinst_exclusion kinst_excluded_names[] = {\n"
    text = target.read_text()
    assert marker in text
    target.write_text(text.replace(marker, marker + '\t{ "vm_fault", "listed by this test" },\n'))
    out = run_world(work, tmp_path / "world", "excluded", live_image(sample_kernel), build_id(sample_kernel),
                    victim="vm_fault")
    assert kinst_lines(out) == ["kinst: no probes in vm_fault: listed by this test"]


def test_glue_refuses_to_enable_out_of_reach_trampolines(modules: Dict[str, Path], sample_kernel: Path,
                                                          tmp_path: Path) -> None:
    """Trampoline pages more than 2 GiB from the code: a probe whose trampoline needs a rel32 to its
    target is refused at enable, with one line; the others arm."""
    plan = plan_of(sample_kernel, "single")
    write_expectations(live_image(sample_kernel), plan, tmp_path / "expect")
    out = run_world(modules["single"], tmp_path / "world", "far", live_image(sample_kernel),
                    build_id(sample_kernel), expect=tmp_path / "expect", far=True)
    m = re.search(r"^world: far: (\d+) refused, (\d+) armed$", out, re.M)
    assert m, out[-2000:]
    lines = [x for x in kinst_lines(out) if "its trampoline cannot reach the instruction's target" in x]
    assert len(lines) == int(m[1]) > 0 and int(m[2]) > 0


@pytest.fixture(scope="module")
def module_ko(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A kernel module (ET_REL, ld -r) built from two of the sample kernel's sources."""
    tc = require_sample_toolchain()
    out = tmp_path_factory.mktemp("ko")
    objs = []
    for src in ("vm_fault.c", "kern_exit.c"):
        obj = out / src.replace(".c", ".o")
        res = cc([tc.cc, *tc.cflags(), f"-I{SAMPLES / 'kernel'}", "-c", str(SAMPLES / "kernel" / src),
                  "-o", str(obj)], out)
        assert res.returncode == 0, res.stderr
        objs.append(str(obj))
    ko = out / "fixmod.ko"
    res = cc([tc.ld, "-r", "-o", str(ko), *objs], out)
    assert res.returncode == 0, res.stderr
    return ko


def relocate_elsewhere(live: LiveImage) -> int:
    """Write other values into every field the module's relocations fill, as a loader would that put the
    module's sections and the kernel's symbols elsewhere than this layout: calls into the kernel (left
    as e8 00 00 00 00 by the file), calls and references inside the module, absolute addresses -- all
    now point elsewhere.  Returns how many fields changed."""
    from generator.image.elf import KernelImage

    changed = 0
    for i, r in enumerate(KernelImage.open(str(live.path)).relocations()):
        assert r.width in (4, 8), r
        at = r.address - live.base
        old = int.from_bytes(live.data[at : at + r.width], "little", signed=True)
        delta = 0x100000 + 0x40 * i
        new = old + delta if old + delta < 1 << (8 * r.width - 1) else old - delta
        live.data[at : at + r.width] = new.to_bytes(r.width, "little", signed=True)
        changed += 1
    return changed


def test_glue_runs_a_module_table(module_ko: Path, sample_kernel: Path, tmp_path: Path) -> None:
    """A .ko table on a module whose every relocated field differs from the file: every probe is made,
    armed and hit, calls emulated to the live targets and trampolines built from the live bytes.
    Probes are named by lf->filename, and the ioctl takes the module with and without ".ko".  kldunload
    in kern_linker.c's order: refused while a probe is enabled; refused later (a module's MOD_UNLOAD)
    with its probes kept and usable; done, with its text made to fault, its probes destroyed but the
    one an enabling holds, which an enable in the window before kld_unload never arms."""
    tree = render(tmp_path / "gen", "--kernel", str(module_ko), "--all")
    target = (tree / "kinst_target.c").read_text()
    assert 'const char kinst_file[] = "fixmod.ko";' in target and 'char kinst_modname[] = "fixmod.ko";' in target
    assert "const int kinst_table_kernel = 0;" in target
    live = live_image(module_ko)
    file_bytes = bytes(live.data)
    assert relocate_elsewhere(live) > 0
    expected = write_expectations(live, build_plan(KernelImage.open(str(module_ko)), [], True), tmp_path / "expect")
    relocated = [e for e in expected if e.relocated]
    # The calls into the kernel, at least, are probes whose live bytes differ from the file's.
    assert any(e.kind == "call-direct" for e in relocated) and live.data != file_bytes
    # A module table is not held to the kernel's build-id.
    out = run_world(module_dir(tree, tmp_path / "module"), tmp_path / "world", "module", live_image(sample_kernel),
                    "0" * 40, module=live, expect=tmp_path / "expect")
    lines = out.splitlines()
    assert f"world: module: {len(expected)} probes hit, {len(relocated)} over relocated fields" in lines
    assert "world: module probes named fixmod.ko" in lines
    assert not [x for x in kinst_lines(out) if "differ from the table" in x]
    # An enable that comes while the module's text is gone touches nothing and says why, once.
    assert between(lines, "world: unload", "world: unloaded") == [
        "world: enable while the text is gone",
        "kinst: not enabling fixmod.ko:sysctl_handle:0: its linker file is unloaded or being unloaded"]


def test_glue_data_for_the_kernel(trees: Dict[str, Path], sample_kernel: Path) -> None:
    glue = (trees["all"] / "kinst_target.c").read_text()
    assert 'const char kinst_file[] = "kernel";' in glue and 'char kinst_modname[] = "kernel";' in glue
    assert "const int kinst_table_kernel = 1;" in glue
    from generator.analysis.exclusions import EXCLUDED_NAMES, EXCLUDED_PREFIXES
    from generator.common.cstring import c_blob
    from generator.providers.kinst.generate import table_blobs

    plan = plan_of(sample_kernel, "all")
    blobs = table_blobs(plan)
    table = (trees["all"] / "kinst_table.c").read_text()
    assert c_blob(blobs["byname"]) in table and c_blob(blobs["names"]) in table
    names = [f.name for f in plan.funcs]
    byname = struct.unpack(f"<{len(names)}I", blobs["byname"])
    assert [names[i] for i in byname] == sorted(names, key=lambda n: n.encode())
    from generator.isa.amd64 import ISA as amd64

    # The glue applies the generator's lists again: the machine-independent and the ISA's.
    for name in (*EXCLUDED_NAMES, *amd64.md_excluded):
        assert f'{{ "{name}",' in glue, name
    assert '{ "nmi_handle_intr",' in glue
    for prefix, _ in EXCLUDED_PREFIXES:
        assert f'{{ "{prefix}",' in glue


def test_invoke_generate(sample_kernel: Path, tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "invoke", "generate", "--kernel", str(sample_kernel),
                          "--function", "vm_fault", "--function", "malloc", "--out", str(tmp_path / "o")],
                         cwd=REPO, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    table = (tmp_path / "o" / "kinst_table.c").read_text()
    from generator.common.cstring import c_blob
    from generator.providers.kinst.generate import table_blobs

    names = table_blobs(build_plan(KernelImage.open(str(sample_kernel)), ["vm_fault", "malloc"], False))["names"]
    assert sorted(names.split(b"\0")[:-1]) == [b"malloc", b"vm_fault"] and c_blob(names) in table
    assert " * 2 functions, " in table


# --- generate --jump: the table carries the jump proof (issue 22) -------------------------------------------


def test_jump_table_is_opt_in_deterministic_and_follows_the_proof(sample_kernel: Path, tmp_path: Path) -> None:
    """``generate --jump``: the table says per probe how many probes a jump there fires; the same inputs give
    the same bytes, the table differs from the default one only by that (and its command line), and every
    head is a site ``probes --jump`` proves, whose window is the contiguous probes that cover 5 bytes."""
    args = ["--kernel", str(sample_kernel), "--function", "vm_fault"]
    plain = render(tmp_path / "plain", *args)
    jumped = [render(tmp_path / f"jump{i}", *args, "--jump") for i in (1, 2)]
    assert filecmp.cmp(jumped[0] / "kinst_table.c", jumped[1] / "kinst_table.c", shallow=False)
    text = (jumped[0] / "kinst_table.c").read_text()
    assert "kinst_jump_blob" not in (plain / "kinst_table.c").read_text() and "--jump`" in text
    assert ".kt_jump = kinst_jump_blob," in text
    for name in ("kinst_funcs_blob", "kinst_records_blob"):
        assert c_bytes(text, name) == c_bytes((plain / "kinst_table.c").read_text(), name)
    fires = c_bytes(text, "kinst_jump_blob")
    import json

    res = subprocess.run([sys.executable, "-m", "generator", "probes", *args, "--jump", "--json"], capture_output=True,
                         text=True, cwd=REPO, timeout=600)
    assert res.returncode == 0, res.stderr
    probes = [p for p in json.loads(res.stdout)["probes"] if p["status"] == "ok"]
    assert len(probes) == len(fires)
    covered = 0
    for i, k in enumerate(fires):
        if not k:
            continue
        assert i >= covered, f"probe {i} heads a jump inside another's window"
        window = probes[i : i + k]
        assert probes[i]["jump"], probes[i]
        assert all(b["offset"] == a["offset"] + a["length"] for a, b in zip(window, window[1:])), window
        assert sum(p["length"] for p in window[:-1]) < 5 <= sum(p["length"] for p in window)
        covered = i + k
    assert fires[0] == 3 and sum(1 for k in fires if k) > 10  # pushq %rbp; movq %rsp,%rbp; pushq %r15


def test_jump_option_is_in_the_build_stamp() -> None:
    """The build's stamp (what decides whether sources are regenerated) tells the two tables apart."""
    from generator.providers.contract import Selection

    assert KINST.stamp(Selection(jump=True)) != KINST.stamp(Selection())


def test_glue_places_jump_probes_by_the_protocol(sample_kernel: Path, tmp_path: Path) -> None:
    """debug.kinst.jump over the stand-in kernel (glue_world's "jump" scenario): off, a head's enable and
    disable write the breakpoint's byte and nothing else; on, the jump task places the jump by the core's
    protocol (the exact writes and CPU syncs the stand-in records), keeps the breakpoint while a stopped
    thread's saved PC is inside the tail or the head's trampoline, fires the same probe with the registers
    a breakpoint hit gives, and removes it by the reverse sequence, also when a displaced probe is armed."""
    gen = render(tmp_path / "gen", "--kernel", str(sample_kernel), "--function", "vm_fault", "--jump")
    tree = module_dir(gen, tmp_path / "module")
    plan = plan_of(sample_kernel, "single")
    write_expectations(live_image(sample_kernel), plan, tmp_path / "expect")
    out = run_world(tree, tmp_path / "world", "jump", live_image(sample_kernel), build_id(sample_kernel),
                    expect=tmp_path / "expect")
    log = dict(m.groups() for m in re.finditer(r"^world: jump ([a-z ]+):(.*)$", out, re.M))
    assert re.search(r"^world: jump head vm_fault:0 displaces 3 probes$", out, re.M), out[-3000:]
    live = live_image(sample_kernel)
    img = KernelImage.open(str(sample_kernel))
    at = img.lookup("vm_fault").address - live.base
    orig = bytes(live.data[at : at + 5])  # objdump-independent: the image's own bytes
    assert log["off"] == f" w0=cc w0={orig[0]:02x}"
    assert log["requeued"] == f" w0={orig[0]:02x} w0=cc"
    assert log["busy"] == log["busy in the trampoline"] == " sync sync"
    assert re.fullmatch(r" sync sync w1=[0-9a-f]{8} sync w0=e9 sync", log["placed"]), log
    assert log["removed"] == f" w0=cc sync w1={orig[1:].hex()} sync w0={orig[0]:02x}"
    assert log["inner armed"] == f" w0=cc sync w1={orig[1:].hex()} sync w1=cc"


def test_jump_on_an_isa_without_jump_facts_is_one_line(tmp_path: Path) -> None:
    """``generate --jump`` for an ISA without jump probes: one line naming the option, exit 2, nothing written."""
    lib = Path("/usr/aarch64-linux-gnu/lib/libc.so.6")  # libc6-arm64-cross (./bootstrap)
    if not lib.is_file():
        pytest.skip(f"{lib} is missing (an arm64 image; ./bootstrap installs libc6-dev-arm64-cross)")
    res = generate("--provider", "kinst", "--kernel", str(lib), "--function", "malloc", "--jump",
                   "--out", str(tmp_path / "out"))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "--jump" in res.stderr and "Traceback" not in res.stderr and not (tmp_path / "out").exists()
