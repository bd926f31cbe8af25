"""The embedded sample kernel: built from samples/kernel/, cached, and shaped as promised.

Every later stage's tests lean on this image, so these tests pin down what it
contains -- with pyelftools directly, not through generator.image, so that a bug
there cannot hide a bug here.  Each test runs once per toolchain (clang + ld.lld,
the preferred one, and the gcc + GNU ld fallback) and is skipped, naming the
missing tool, when that toolchain is not installed.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import pytest
from elftools.elf.elffile import ELFFile

from generator.image import sample
from generator.common.errors import UserError
from generator.image.sample import ENV_TOOLCHAIN, find_toolchain, sample_kernel
from helpers.skips import require_sample_toolchain

# Functions the analysis tests rely on.  All must be sized STT_FUNC symbols.
C_FUNCS = [
    "vm_fault", "amd64_syscall", "exit1", "spinlock_enter", "spinlock_exit",
    "malloc", "free", "memcpy", "uma_zalloc_arg", "kern_ioctl", "sys_read",
    "kern_read", "sys_read_alias",
    # excluded by name in kinst (dtrace_safe_copy is not: dtrace_safe_ prefix)
    "dtrace_probe", "dtrace_safe_copy", "db_print_backtrace", "kdb_enter",
    "owner_mtx", "cpu_switch", "trap_check", "kinst_dummy",
    # popf, sti, cli
    "intr_restore", "enable_intr", "disable_intr",
]
ZOO = ["zoo_loops", "zoo_traps", "zoo_far", "zoo_calls", "zoo_jumps", "zoo_riprel", "zoo_misc"]
ASM_FUNCS = ["btext", "bcopy_nofp", "late_frame", *ZOO]
NO_FRAME_AT_ENTRY = {"bcopy_nofp", "late_frame"}

PUSH_RBP_MOV_RSP_RBP = b"\x55\x48\x89\xe5"

# Byte sequences the hand-written zoo must contain (the assembly is fixed, so
# these do not depend on the compiler).
ZOO_BYTES: Dict[str, List[Tuple[str, bytes]]] = {
    "zoo_loops": [("loop", b"\xe2"), ("loope", b"\xe1"), ("loopne", b"\xe0"), ("jrcxz", b"\xe3")],
    "zoo_traps": [
        ("int3", b"\xcc"), ("int $0x80", b"\xcd\x80"), ("int1", b"\xf1"), ("ud2", b"\x0f\x0b"),
        ("ud1", b"\x0f\xb9\xc0"), ("ud0", b"\x0f\xff\xc0"),
    ],
    "zoo_far": [("lcall *(%rax)", b"\xff\x18"), ("ljmp *(%rax)", b"\xff\x28"), ("iretq", b"\x48\xcf")],
    "zoo_calls": [
        ("call *8(%rsp)", b"\xff\x54\x24\x08"),
        ("call *0x10(,%rcx,8)", b"\xff\x14\xcd\x10\x00\x00\x00"),
        ("call *0x8(%rbp,%rcx,8)", b"\xff\x54\xcd\x08"),
        ("call *%rax", b"\xff\xd0"),
        ("call *%r11", b"\x41\xff\xd3"),
        ("call *(%rax)", b"\xff\x10"),
        ("call *sym(%rip)", b"\xff\x15"),
    ],
    "zoo_jumps": [
        ("jmp *%rax", b"\xff\xe0"),
        ("jmp *0x20(,%rax,8)", b"\xff\x24\xc5\x20\x00\x00\x00"),
        ("jmp *sym(%rip)", b"\xff\x25"),
        ("je rel8", b"\x74"), ("jmp rel8", b"\xeb"), ("jmp rel32", b"\xe9"), ("jne rel32", b"\x0f\x85"),
    ],
    "zoo_riprel": [
        ("lea sym(%rip),%rax", b"\x48\x8d\x05"),
        ("movl $5,sym(%rip)", b"\xc7\x05"),
        ("cmpb $1,sym(%rip)", b"\x80\x3d"),
    ],
    "zoo_misc": [
        ("rep movsb", b"\xf3\xa4"), ("lock cmpxchg", b"\xf0\x0f\xb1\x15"), ("popfq", b"\x9d"),
        ("sti", b"\xfb"), ("swapgs", b"\x0f\x01\xf8"), ("xbegin", b"\xc7\xf8"),
    ],
    "intr_restore": [("popfq", b"\x9d")],
    "enable_intr": [("sti", b"\xfb")],
    "disable_intr": [("cli", b"\xfa")],
}


class Image:
    """The parts of the ELF file the assertions need, read once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with open(path, "rb") as f:
            elf = ELFFile(f)
            self.header = elf.header
            self.text = elf.get_section_by_name(".text")
            self.text_addr: int = self.text["sh_addr"]
            self.text_bytes: bytes = self.text.data()
            # (name, type, bind, value, size, file): file is the STT_FILE in effect.
            self.symbols: List[Tuple[str, str, str, int, int, str]] = []
            current_file = ""
            for sym in elf.get_section_by_name(".symtab").iter_symbols():
                kind = sym["st_info"]["type"]
                if kind == "STT_FILE":
                    current_file = os.path.basename(sym.name)
                    continue
                self.symbols.append(
                    (sym.name, kind, sym["st_info"]["bind"], sym["st_value"], sym["st_size"], current_file)
                )
            self.notes = [
                (note["n_name"], note["n_type"], note["n_desc"])
                for sec in elf.iter_sections()
                if sec["sh_type"] == "SHT_NOTE"
                for note in sec.iter_notes()
            ]

    def funcs(self, name: str) -> List[Tuple[str, str, str, int, int, str]]:
        return [s for s in self.symbols if s[0] == name and s[1] == "STT_FUNC"]

    def func(self, name: str) -> Tuple[str, str, str, int, int, str]:
        found = self.funcs(name)
        assert len(found) == 1, f"{name}: {found}"
        return found[0]

    def body(self, name: str) -> bytes:
        _, _, _, value, size, _ = self.func(name)
        start = value - self.text_addr
        assert 0 <= start and start + size <= len(self.text_bytes), name
        return self.text_bytes[start : start + size]


@pytest.fixture(scope="module", params=["clang", "gcc"])
def toolchain(request: pytest.FixtureRequest) -> Iterator[str]:
    """Force one toolchain for the tests that use it; skip, naming the tool, if it is missing."""
    require_sample_toolchain(request.param)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ENV_TOOLCHAIN, request.param)
        yield request.param


@pytest.fixture(scope="module")
def image(toolchain: str) -> Image:
    return Image(sample_kernel())


def test_elf_header(image: Image) -> None:
    assert image.header["e_type"] == "ET_EXEC"
    assert image.header["e_machine"] == "EM_X86_64"
    assert image.header["e_entry"] == image.func("btext")[3]
    assert image.text_addr > sample.TEXT_BASE
    assert image.text_addr - sample.TEXT_BASE < 0x1000


def test_build_id(image: Image) -> None:
    ids = [desc for name, kind, desc in image.notes if name == "GNU" and kind == "NT_GNU_BUILD_ID"]
    assert len(ids) == 1
    assert len(bytes.fromhex(ids[0])) == 20  # sha1


@pytest.mark.parametrize("name", C_FUNCS + ASM_FUNCS)
def test_function_symbol(image: Image, name: str) -> None:
    _, kind, _, value, size, _ = image.func(name)
    assert kind == "STT_FUNC"
    assert size > 0
    assert image.text_addr <= value < image.text_addr + len(image.text_bytes)


@pytest.mark.parametrize("name", [n for n in C_FUNCS + ASM_FUNCS if n not in NO_FRAME_AT_ENTRY])
def test_frame_pointer_prologue(image: Image, name: str) -> None:
    assert image.body(name)[:4] == PUSH_RBP_MOV_RSP_RBP


def test_vm_fault_prologue(image: Image) -> None:
    code = image.body("vm_fault")
    assert code[0] == 0x55  # push %rbp
    assert code[1:4] == b"\x48\x89\xe5"  # mov %rsp,%rbp
    # the third instruction, at offset 4, saves a callee-saved register
    assert (code[4] == 0x41 and 0x50 <= code[5] <= 0x57) or 0x50 <= code[4] <= 0x57


def test_frameless_functions(image: Image) -> None:
    assert 0x55 not in image.body("bcopy_nofp")  # no push %rbp anywhere
    late = image.body("late_frame")
    assert late[0] != 0x55 and late[3:7] == b"\x55\x48\x89\xe5"


def test_same_named_locals(image: Image) -> None:
    locals_ = [s for s in image.funcs("sysctl_handle") if s[2] == "STB_LOCAL"]
    assert len(locals_) == 2
    assert {s[5] for s in locals_} == {"vm_fault.c", "sys_generic.c"}
    assert locals_[0][3] != locals_[1][3]
    assert all(s[4] > 0 for s in locals_)


def test_global_alias(image: Image) -> None:
    read = image.func("kern_read")
    alias = image.func("sys_read_alias")
    assert read[2] == alias[2] == "STB_GLOBAL"
    assert read[3] == alias[3] and read[4] == alias[4]


@pytest.mark.parametrize("name", sorted(ZOO_BYTES))
def test_instruction_zoo(image: Image, name: str) -> None:
    code = image.body(name)
    missing = [what for what, pattern in ZOO_BYTES[name] if pattern not in code]
    assert not missing, f"{name} lacks {missing}"


def test_syscall_dispatch(image: Image) -> None:
    """amd64_syscall calls through sysent(,%reg,8) and through a plain register."""
    code = image.body("amd64_syscall")
    sib_indexed = any(
        code[i] == 0xFF and code[i + 1] == 0x14 and (code[i + 2] & 7) == 5 and (code[i + 2] >> 3) & 7 != 4
        for i in range(len(code) - 2)
    )
    register = any(
        code[i] == 0xFF and 0xD0 <= code[i + 1] <= 0xD7 for i in range(len(code) - 1)
    )
    assert sib_indexed and register


def test_cache_hit_does_not_rebuild(image: Image) -> None:
    before = image.path.stat().st_mtime_ns
    again = sample_kernel()
    assert again == image.path
    assert again.stat().st_mtime_ns == before
    leftovers = [p for p in sample.BUILD_DIR.iterdir() if p.name.startswith(f".{again.parent.name}.")]
    assert leftovers == []


@pytest.fixture
def scratch(toolchain: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private copy of the sources and a private cache, so the tests can break and rebuild them."""
    src = tmp_path / "src"
    shutil.copytree(sample.SOURCE_DIR, src)
    monkeypatch.setattr(sample, "SOURCE_DIR", src)
    monkeypatch.setattr(sample, "BUILD_DIR", tmp_path / "build")
    return src


def test_rebuild_replaces_in_place(scratch: Path) -> None:
    first = sample_kernel()
    before = first.stat().st_mtime_ns
    second = sample_kernel(rebuild=True)
    assert second == first
    assert second.stat().st_mtime_ns != before
    assert sorted(p.name for p in sample.BUILD_DIR.iterdir()) == [first.parent.name]


def test_source_change_gets_new_key(scratch: Path) -> None:
    first = sample_kernel()
    with open(scratch / "kern_exit.c", "a") as f:
        f.write("\nint sample_key_probe;\n")
    assert sample_kernel().parent != first.parent


def test_compiler_error_is_one_line(scratch: Path) -> None:
    with open(scratch / "trap.c", "a") as f:
        f.write("\n#error deliberately broken\n")
    with pytest.raises(UserError) as e:
        sample_kernel()
    message = str(e.value)
    assert "\n" not in message
    assert "trap.c" in message and "deliberately broken" in message
    assert not sample.BUILD_DIR.exists() or list(sample.BUILD_DIR.iterdir()) == []


def test_bad_toolchain_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_TOOLCHAIN, "tcc")
    with pytest.raises(UserError, match=ENV_TOOLCHAIN):
        find_toolchain()


def _release_constants(path: Path) -> Tuple[int, int, str]:
    """osreldate, the ks_version of M_DEVBUF and the version string, read from the image with pyelftools."""
    import struct

    with open(path, "rb") as f:
        elf = ELFFile(f)
        syms = {s.name: s for s in elf.get_section_by_name(".symtab").iter_symbols()}

        def read(name: str, offset: int, size: int) -> bytes:
            addr = syms[name]["st_value"] + offset
            sec = next(s for s in elf.iter_sections() if s["sh_addr"] <= addr < s["sh_addr"] + s["sh_size"])
            return sec.data()[addr - sec["sh_addr"]:addr - sec["sh_addr"] + size]

        osreldate = struct.unpack("<i", read("osreldate", 0, 4))[0]
        ks_version = struct.unpack("<Q", read("M_DEVBUF", 8, 8))[0]  # struct malloc_type: ks_next, ks_version
        version = read("version", 0, syms["version"]["st_size"]).split(b"\0")[0].decode()
    return osreldate, ks_version, version


@pytest.mark.parametrize("release, osreldate, m_version", [("14.3", 1403000, 2020110501),
                                                            ("15.0", 1500068, 2024073001)])
def test_carries_a_real_releases_constants(toolchain: str, release: str, osreldate: int, m_version: int,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A module built against the release's sys/ tree checks these: dtmalloc's CTASSERT(M_VERSION == ...) and
    check-ko's kernel dependency range.  14.3 is the default; KINSTKIT_SAMPLE_RELEASE picks the other."""
    if release == sample.DEFAULT_RELEASE:
        monkeypatch.delenv(sample.ENV_RELEASE, raising=False)
    else:
        monkeypatch.setenv(sample.ENV_RELEASE, release)
    path = sample_kernel()
    assert _release_constants(path) == (osreldate, m_version,
                                        f"FreeBSD {release}-SAMPLE kinstkit sample kernel (not FreeBSD code)\n")
    assert path == sample_kernel(release=release)  # the option and the variable are one key


def test_unknown_release_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sample.ENV_RELEASE, "14.0")
    with pytest.raises(UserError, match=r"KINSTKIT_SAMPLE_RELEASE='14.0': the sample kernel is built for FreeBSD "
                                        r"14.3 or 15.0"):
        sample_kernel()
