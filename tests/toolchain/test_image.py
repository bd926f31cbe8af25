"""Stage 1 (generator/image.py) on real and self-built ELF files.

Self-built inputs come from gcc/ld with the kernel's code-model flags, so we
know what the right answer is (where a call goes, which symbol a relocation
names); the real input (libz) is a shared object nobody here wrote.  Bad input
of every kind must end in a one-line ``UserError`` and never in another
exception type.
"""

from __future__ import annotations

import random
import re
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Dict, List, Optional

import pytest
from elftools.elf.elffile import ELFFile

from generator.common.errors import UserError
from generator.image.elf import REL_BASE, KernelImage
from generator.analysis.probes import analyse
from helpers.skips import require_system_library, require_tool

KERNEL_CFLAGS = ["-O2", "-mcmodel=kernel", "-mno-red-zone", "-fno-pic", "-ffreestanding", "-fno-omit-frame-pointer"]
EXEC_BASE = 0xFFFFFFFF80200000

MOD_C = r"""
extern int ext_func(int);
extern int ext_data;

__attribute__((section(".text.unlikely"), noinline, used))
static int cold_helper(int x)
{
	return x * 3 + ext_func(x) + ext_data;
}

int alias_target(int x)
{
	return cold_helper(x) + ext_func(x + 1) + 7;
}

int my_alias(int x) __attribute__((alias("alias_target")));
"""

EXT_C = r"""
int ext_data = 5;
int ext_func(int x) { return x ^ 0x55; }
void _start(void) { for (;;) ; }
"""

A_C = "__attribute__((noinline)) static int helper(int x) { return x + 1; }\nint from_a(int x) { return helper(x) * 2; }\n"
B_C = "__attribute__((noinline)) static int helper(int x) { return x - 1; }\nint from_b(int x) { return helper(x) * 3; }\n"


def _run(cmd: List[str], cwd: Path) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} failed: {proc.stderr.strip()}")


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> Dict[str, Path]:
    """ET_REL objects and an ET_EXEC kernel built here with kernel flags."""
    gcc = require_tool("gcc", "gcc", "the ELF inputs are built here with kernel flags")
    ld = require_tool("ld", "binutils", "the ELF inputs are linked here")
    d = tmp_path_factory.mktemp("elf")
    for name, text in (("mod.c", MOD_C), ("ext.c", EXT_C), ("a.c", A_C), ("b.c", B_C)):
        (d / name).write_text(text)
        _run([gcc, *KERNEL_CFLAGS, "-c", name, "-o", name[:-2] + ".o"], d)
    _run([ld, "-r", "a.o", "b.o", "-o", "ab.o"], d)
    _run([ld, "-static", "-nostdlib", "--build-id", f"-Ttext={EXEC_BASE:#x}", "-e", "_start",
          "mod.o", "ext.o", "ab.o", "-o", "kern.elf"], d)
    return {"mod": d / "mod.o", "ab": d / "ab.o", "kern": d / "kern.elf", "dir": d}


@pytest.fixture(scope="session")
def libz() -> Path:
    return require_system_library("libz.so.1")


def _readelf_build_id(path: Path) -> Optional[str]:
    readelf = require_tool("readelf", "binutils", "readelf is the independent reader of the build-id")
    out = subprocess.run([readelf, "-n", str(path)], capture_output=True, text=True).stdout
    m = re.search(r"Build ID: ([0-9a-f]+)", out)
    return m.group(1) if m else None


def _calls(img: KernelImage, name: str):
    rep = analyse(img, img.lookup(name))
    return [p for p in rep.probes if p.bytes[:1] == b"\xe8"]


# -- ET_DYN -------------------------------------------------------------------


def test_shared_object_libz(libz):
    img = KernelImage.open(str(libz))
    assert (img.e_type, img.arch) == ("ET_DYN", "amd64")
    funcs = img.functions()
    assert len(funcs) > 50
    f = img.lookup("deflate")
    assert f.binding == "global" and f.section == ".text"
    assert len(img.function_bytes(f)) == f.size
    assert img.relocations() == []  # nothing to apply outside ET_REL
    assert img.build_id == _readelf_build_id(libz)


# -- ET_REL -------------------------------------------------------------------


def test_rel_sections_get_disjoint_aligned_addresses(built):
    img = KernelImage.open(str(built["mod"]))
    assert img.e_type == "ET_REL"
    text = [s for s in img.sections if s.executable]
    assert {s.name for s in text} == {".text", ".text.unlikely"}
    spans = sorted((s.addr, s.addr + s.size) for s in img.sections)
    assert spans[0][0] >= REL_BASE
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))


def test_rel_call_to_static_function_in_another_section_is_relocated(built):
    img = KernelImage.open(str(built["mod"]))
    cold = img.lookup("cold_helper")
    assert cold.section == ".text.unlikely" and cold.binding == "local" and cold.file == "mod.c"
    first = _calls(img, "alias_target")[0]
    assert (first.target, first.target_symbol) == (cold.address, None)
    # The displacement in the bytes is the one the loaded module will have.
    disp = struct.unpack("<i", img.read(first.address + 1, 4))[0]
    assert first.address + 5 + disp == cold.address
    (reloc,) = img.relocs_in(first.address + 1, 4)
    assert (reloc.type, reloc.symbol, reloc.addend, reloc.resolved) == ("R_X86_64_PC32", ".text.unlikely", -4, True)


def test_rel_call_to_undefined_function_stays_symbolic(built):
    img = KernelImage.open(str(built["mod"]))
    second = _calls(img, "alias_target")[1]
    assert (second.target, second.target_symbol) == (None, "ext_func")
    assert img.read(second.address + 1, 4) == bytes(4)  # not resolvable offline: left alone
    (reloc,) = img.relocs_in(second.address + 1, 4)
    assert (reloc.type, reloc.symbol, reloc.addend, reloc.resolved) == ("R_X86_64_PLT32", "ext_func", -4, False)


def test_rel_symbol_indices_count_stt_file(built):
    """Relocations index the raw symbol table, where STT_FILE entries sit."""
    img = KernelImage.open(str(built["mod"]))
    cold = img.lookup("cold_helper")
    names = [r.symbol for r in img.relocs_in(cold.address, cold.size)]
    assert names == ["ext_func", "ext_data"]
    (call,) = _calls(img, "cold_helper")
    assert call.target_symbol == "ext_func"


def test_aliases_fold_into_one_function(built):
    img = KernelImage.open(str(built["mod"]))
    at = [f for f in img.functions() if f.address == img.lookup("alias_target").address]
    assert len(at) == 1
    assert (at[0].name, at[0].aliases) == ("alias_target", ("my_alias",))
    assert img.lookup("my_alias") == at[0]


def test_ambiguous_local_name_lists_candidates(built):
    img = KernelImage.open(str(built["ab"]))
    helpers = [f for f in img.functions() if f.name == "helper"]
    assert sorted(f.file for f in helpers) == ["a.c", "b.c"]
    with pytest.raises(UserError) as e:
        img.lookup("helper")
    msg = str(e.value)
    assert "\n" not in msg and "ambiguous" in msg
    for f in helpers:
        assert f"helper@{f.file}" in msg and f"{f.address:#x}" in msg
    by_file = {f.file: f for f in helpers}
    assert img.lookup("helper@b.c") == by_file["b.c"]
    assert img.lookup(f"{by_file['a.c'].address:#x}") == by_file["a.c"]


def test_lookup_by_address(built):
    img = KernelImage.open(str(built["mod"]))
    f = img.lookup("alias_target")
    assert img.lookup(hex(f.address)) == f
    assert img.lookup(hex(f.address).upper().replace("0X", "0x")) == f
    for bad in ("0x1", "0xnothex"):
        with pytest.raises(UserError) as e:
            img.lookup(bad)
        assert "\n" not in str(e.value)
    with pytest.raises(UserError, match="unknown function"):
        img.lookup("no_such_function")


# -- ET_EXEC ------------------------------------------------------------------


def test_exec_kernel_addresses_targets_and_build_id(built):
    img = KernelImage.open(str(built["kern"]))
    assert img.e_type == "ET_EXEC"
    assert all(f.address >= EXEC_BASE for f in img.functions())
    first, second = _calls(img, "alias_target")
    assert first.target == img.lookup("cold_helper").address
    assert second.target == img.lookup("ext_func").address
    assert first.target_symbol is None and second.target_symbol is None
    assert img.build_id is not None and img.build_id == _readelf_build_id(built["kern"])


# -- bad input ----------------------------------------------------------------


def _exercise(path: Path) -> None:
    """Everything a command does with an image, in order."""
    img = KernelImage.open(str(path))
    img.build_id
    img.sha256()
    funcs = img.functions()
    img.relocations()
    for f in funcs[:100]:
        img.function_bytes(f)
    img.lookup("alias_target")


def _assert_user_error(path: Path, *words: str) -> str:
    with pytest.raises(UserError) as e:
        _exercise(path)
    msg = str(e.value)
    assert "\n" not in msg, msg
    for w in words:
        assert w in msg, msg
    return msg


def _patched(src: Path, dest: Path, edits: Dict[int, bytes]) -> Path:
    data = bytearray(src.read_bytes())
    for off, value in edits.items():
        data[off : off + len(value)] = value
    dest.write_bytes(bytes(data))
    return dest


def test_missing_file(tmp_path):
    _assert_user_error(tmp_path / "nope", "no such file")


def test_directory(tmp_path):
    _assert_user_error(tmp_path, "directory")


def test_empty_file(tmp_path):
    (tmp_path / "empty").write_bytes(b"")
    _assert_user_error(tmp_path / "empty", "empty file")


def test_not_elf(tmp_path):
    (tmp_path / "notes.txt").write_text("this is not an ELF file\n" * 20)
    _assert_user_error(tmp_path / "notes.txt", "not an ELF file")


@pytest.mark.parametrize("which", ["kern", "mod", "libz"])
def test_truncated_to_half(which, built, libz, tmp_path):
    src = libz if which == "libz" else built[which]
    data = src.read_bytes()
    (tmp_path / "half").write_bytes(data[: len(data) // 2])
    _assert_user_error(tmp_path / "half", "truncated")


def test_truncated_header(built, tmp_path):
    (tmp_path / "short").write_bytes(built["mod"].read_bytes()[:40])
    _assert_user_error(tmp_path / "short", "truncated")


# ELF64 header fields: e_type 16, e_machine 18, e_shoff 40, e_shentsize 58,
# e_shnum 60, e_shstrndx 62.
CORRUPT_HEADERS = {
    "shoff-past-eof": {40: struct.pack("<Q", 0xFFFFFFFFFF)},
    "shoff-near-eof": None,  # filled in per file: points 10 bytes before the end
    "shnum-huge": {60: struct.pack("<H", 0xFFFF)},
    "shstrndx-out-of-range": {62: struct.pack("<H", 0x7000)},
    "shentsize-tiny": {58: struct.pack("<H", 7)},
    "type-core": {16: struct.pack("<H", 4)},
}


@pytest.mark.parametrize("case", sorted(CORRUPT_HEADERS))
@pytest.mark.parametrize("which", ["mod", "kern"])
def test_corrupt_header_bytes(case, which, built, tmp_path):
    src = built[which]
    edits = CORRUPT_HEADERS[case] or {40: struct.pack("<Q", src.stat().st_size - 10)}
    _assert_user_error(_patched(src, tmp_path / case, edits))


def test_32bit_elf(built, tmp_path):
    gcc = shutil.which("gcc")
    obj = tmp_path / "a32.o"
    ok = gcc and subprocess.run([gcc, "-m32", "-c", str(built["dir"] / "a.c"), "-o", str(obj)],
                                capture_output=True).returncode == 0
    if not ok:  # no multilib: craft the ident bytes instead
        _patched(built["mod"], obj, {4: b"\x01"})
    _assert_user_error(obj, "32-bit")


def test_foreign_machine_elf(libz, tmp_path):
    """A 64-bit little-endian ELF of a machine kinst has no port for (ppc64le: FreeBSD has no kinst there)."""
    _assert_user_error(_patched(libz, tmp_path / "ppc64.so", {18: struct.pack("<H", 21)}), "EM_PPC64")


def test_big_endian_elf(libz, tmp_path):
    _assert_user_error(_patched(libz, tmp_path / "be.so", {5: b"\x02"}), "big-endian")


def test_stripped_image_has_no_functions(built, tmp_path):
    strip = require_tool("strip", "binutils", "the test strips a kernel's symbols")
    copy = tmp_path / "kern.stripped"
    shutil.copy(built["kern"], copy)
    subprocess.run([strip, str(copy)], check=True)
    img = KernelImage.open(str(copy))  # a stripped image still opens (build-id)
    assert img.functions() == []
    _assert_user_error(copy, "no function symbols")


def test_relocation_outside_its_section(built, tmp_path):
    """A relocation whose field lies past its section's end is corruption."""
    KernelImage.open(str(built["mod"]))  # whole, it opens
    with open(built["mod"], "rb") as f:
        elf = ELFFile(f)
        rela = elf.get_section_by_name(".rela.text")
        text = elf.get_section_by_name(".text")
        off = rela["sh_offset"]  # first entry's r_offset
    bad = _patched(built["mod"], tmp_path / "badrel.o", {off: struct.pack("<Q", text["sh_size"] - 2)})
    _assert_user_error(bad, "corrupt relocation")


@pytest.mark.parametrize("which", ["mod", "ab", "kern", "libz"])
def test_random_corruption_is_always_a_user_error(which, built, libz, tmp_path):
    """Seeded byte flips in headers, section headers and anywhere else."""
    src = (libz if which == "libz" else built[which]).read_bytes()
    shoff = struct.unpack_from("<Q", src, 40)[0]
    rng = random.Random(which)
    target = tmp_path / "fuzz"
    for _ in range(150):
        data = bytearray(src)
        for _ in range(rng.randint(1, 4)):
            r = rng.random()
            lo = 16 if r < 0.3 or shoff >= len(src) else shoff if r < 0.7 else 16
            hi = 64 if r < 0.3 else len(src)
            data[rng.randrange(lo, hi)] = rng.randrange(256)
        target.write_bytes(bytes(data))
        try:
            _exercise(target)
        except UserError as e:
            assert "\n" not in str(e)


def test_unapplied_relocation_types_are_listed_unresolved(tmp_path):
    """A GOT-relative field is not the symbol's address: never patch it, but say it is relocated."""
    src = tmp_path / "got.s"
    src.write_text(
        "\t.text\n\t.globl f\n\t.type f, @function\nf:\n\tmovq g@GOTPCREL(%rip), %rax\n\tret\n\t.size f, .-f\n"
        "\t.globl g\n\t.type g, @function\ng:\n\tret\n\t.size g, .-g\n"
    )
    obj = tmp_path / "got.o"
    subprocess.run([require_tool("as", "binutils", "the GOT-relative object is assembled here"), str(src), "-o",
                    str(obj)], check=True)
    img = KernelImage.open(str(obj))
    f = img.lookup("f")
    (reloc,) = img.relocs_in(f.address, f.size)
    assert reloc.type == "R_X86_64_REX_GOTPCRELX" and reloc.symbol == "g" and not reloc.resolved
    assert img.read(reloc.address, 4) == bytes(4)


# -- corruption through every command that reads a module ------------------------------------------

# Python's and pyelftools' own wording, a doubled word (an empty field between
# two words of a message), or an unnamed placeholder: none may reach a user.
UNPLAIN = re.compile(r"unpack|buffer|Python|ssize_t|Traceback|\(unknown\)|\b(\w+) \1\b|  ")


def _cli_in_process(argv: List[str]):
    """``python -m generator ARGV`` in this process (hundreds of runs): exit status, stderr lines."""
    import contextlib
    import io

    from generator.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    return status, [ln for ln in err.getvalue().splitlines() if ln.strip()]


def test_random_corruption_through_check_ko_malloc_types_and_probes(tmp_path, tmp_path_factory):
    """Seeded corruption of two .ko files, each copy through probes, check-ko and malloc-types: never a
    traceback; bad input is one plain line naming the file (exit 2), a check-ko finding is one line per
    problem (exit 1); and a file probes calls corrupt is corrupt, in the same words, to check-ko -- never a
    verdict."""
    from helpers import dtmalloc_fixtures, kofixtures

    ko = kofixtures.shared(tmp_path_factory)
    dm = dtmalloc_fixtures.shared(tmp_path_factory)
    kernel, deps = str(ko.kernel()), [w for p in ko.dependencies() for w in ("--dep-module", str(p))]
    dm_kernel = str(dm.kernel(*dtmalloc_fixtures.RELEASE_14))
    seen = {"check-ko": set(), "malloc-types": set(), "probes": set()}
    for src in (ko.module(), dm.module()):
        data = src.read_bytes()
        shoff = struct.unpack_from("<Q", data, 40)[0]
        rng = random.Random(src.name)
        for i in range(150):
            bad = bytearray(data)
            for _ in range(rng.randint(1, 4)):
                r = rng.random()
                lo, hi = (16, 64) if r < 0.3 else (shoff, len(data)) if r < 0.7 else (64, len(data))
                bad[rng.randrange(lo, hi)] = rng.randrange(256)
            f = tmp_path / f"{src.stem}-{i}.ko"
            f.write_bytes(bytes(bad))
            runs = {
                "probes": _cli_in_process(["probes", "--kernel", str(f), "--all", "--summary"]),
                "check-ko": _cli_in_process(["check-ko", str(f), "--kernel", kernel, *deps]),
                "malloc-types": _cli_in_process(["malloc-types", "--kernel", dm_kernel, "--module", str(f)]),
            }
            for cmd, (status, lines) in runs.items():
                seen[cmd].add(status)
                where = f"{cmd} on {f.name}: {lines}"
                assert status in (0, 1, 2), where
                assert not any(UNPLAIN.search(ln.replace(str(f), "FILE")) for ln in lines), where
                if status == 2:
                    assert len(lines) == 1 and lines[0].startswith(f"error: {f}: "), where
                if status == 1:
                    assert cmd == "check-ko" and lines and all(ln.startswith(f"check-ko: {f}: ") for ln in lines), where
            probes = runs["probes"]
            if probes[0] == 2 and re.search(r"corrupt|truncated", probes[1][0].replace(str(f), "FILE")):
                assert runs["check-ko"] == probes, f"{f.name}: probes {probes}, check-ko {runs['check-ko']}"
    # The runs covered every outcome: not a test that never reaches the interesting paths.
    assert seen["check-ko"] == {0, 1, 2} and seen["malloc-types"] >= {0, 2} and seen["probes"] >= {0, 2}


@pytest.mark.parametrize("name", ["libc.so.6", "libstdc++.so.6"])  # both have aliased functions
def test_functions_read_from_function_entries_alone_equal_the_full_table(name):
    """A linked image's functions come from its STT_FUNC and STT_FILE entries alone; folded from every
    entry (what an ET_REL file and the other commands read) they are the same, aliases and files included."""
    from generator.image.elf import _fold_functions
    img = KernelImage.open(str(require_system_library(name)))
    fast = img.functions()
    assert img._symbols is None  # the full table was never unpacked for them
    full = _fold_functions(img, img.symbols())
    assert fast == full and len(fast) > 500
    assert any(f.aliases for f in fast)


def _function_entries(path: Path, count: int) -> List[tuple]:
    """(file offset of the entry, name, value) of the first ``count`` defined, sized STT_FUNC symbols of the
    dynamic symbol table, as pyelftools reads it (not the reader under test), in address order."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        sec = elf.get_section_by_name(".dynsym")
        found = [(sec["sh_offset"] + i * sec["sh_entsize"], s.name, s["st_value"])
                 for i, s in enumerate(sec.iter_symbols())
                 if s["st_info"]["type"] == "STT_FUNC" and s["st_size"] and s["st_shndx"] != "SHN_UNDEF"]
    return sorted(found, key=lambda e: e[2])[:count]


def test_a_function_outside_its_section_is_found_at_open(tmp_path):
    """A function symbol whose size runs past its section's end, or whose address is in no section, makes
    open() fail in one line naming it; with two, the first in address order."""
    lib = require_system_library("libz.so.1")
    (off1, name1, _), (off2, name2, _) = _function_entries(lib, 2)
    huge = struct.pack("<Q", 1 << 40)  # st_size, at 16 in an Elf64_Sym
    one = _patched(lib, tmp_path / "one.so", {off2 + 16: huge})
    assert _assert_user_error(one, f"function {name2} lies outside its section", "re-copy")
    both = _patched(lib, tmp_path / "both.so", {off1 + 8: struct.pack("<Q", 1 << 62), off2 + 16: huge})
    assert f"function {name2} lies" in _assert_user_error(both, "lies outside its section")  # name1 moved last


def test_functions_read_in_one_pass_keep_local_files(sample_kernel):
    """The sample kernel's .symtab has STT_FILE entries and two local functions of one name in different
    files: the one-pass read of a linked image keeps them apart, with their files, as folding every entry
    does."""
    from generator.image.elf import _fold_functions
    img = KernelImage.open(str(sample_kernel))
    fast = img.functions()
    full = _fold_functions(img, img.symbols())
    assert fast == full
    copies = [f for f in fast if f.name == "sysctl_handle"]
    assert len(copies) == 2 and len({f.file for f in copies}) == 2 and all(f.binding == "local" for f in copies)


@pytest.mark.parametrize("which", ["libc", "kern", "mod", "sample"])
def test_program_headers_read_with_struct_equal_pyelftools(which, built, sample_kernel):
    """``segments()`` and ``build_id_note()`` read the program headers themselves: the same as pyelftools'
    ``iter_segments()`` on a shared library, a kernel, the sample kernel and a relocatable module (none)."""
    path = {"libc": require_system_library("libc.so.6"), "kern": built["kern"], "mod": built["mod"],
            "sample": sample_kernel}[which]
    img = KernelImage.open(str(path))
    with open(path, "rb") as f:
        elf = ELFFile(f)
        loads = [(s["p_vaddr"], s["p_memsz"], s["p_flags"]) for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]
        notes = [s for s in elf.iter_segments() if s["p_type"] == "PT_NOTE"]
        want_id = next((n["n_desc"] for s in notes for n in s.iter_notes() if n["n_type"] == "NT_GNU_BUILD_ID"), None)
    assert [tuple(s) for s in img.segments()] == loads
    address, desc = img.build_id_note()
    assert (desc.hex() or None) == want_id
    assert bool(loads) == (which != "mod")
    if desc:  # the address is the descriptor's own: the bytes there are the build-id
        assert img.read(address, len(desc)) == desc
