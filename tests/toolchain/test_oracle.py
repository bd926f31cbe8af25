"""The decoder proof: our instruction walk against GNU objdump's.

Real inputs nobody here wrote (system libraries, Debian's kernel modules) must
agree with objdump everywhere; self-built objects pin the encodings where
decoders are known to differ; and negative tests prove the oracle can fail.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
from pathlib import Path
from typing import List, Tuple

import pytest

from generator.cli import main
from generator.common.errors import UserError
from generator.isa import amd64 as amd64_package
from generator.isa.amd64 import ISA as amd64
from generator.isa.contract import Insn
from generator.verify.objdump import verify_decoder
from helpers.corpus import debian_kernel_modules
from helpers.skips import missing, require_system_library, require_tool


def patch_isa(monkeypatch, **fields) -> None:
    """Give images the amd64 ISA with ``fields`` replaced (the contract record is frozen)."""
    monkeypatch.setattr(amd64_package, "ISA", amd64._replace(**fields))


def main_verify(argv) -> int:
    return main(["verify-decoder", *argv])


@pytest.fixture(autouse=True)
def _objdump() -> None:
    require_tool("objdump", "binutils", "objdump is the oracle")


def _assemble(tmp_path: Path, name: str, body: str, extra: str = "") -> Path:
    """One function ``name`` in .text from AT&T assembly lines, then ``extra``."""
    src = tmp_path / f"{name}.s"
    src.write_text(
        f"\t.text\n\t.globl {name}\n\t.type {name}, @function\n{name}:\n{body}\n\t.size {name}, .-{name}\n{extra}"
    )
    out = tmp_path / f"{name}.o"
    assembler = require_tool("as", "binutils", "the encodings are assembled here")
    proc = subprocess.run([assembler, str(src), "-o", str(out)], capture_output=True, text=True)
    if proc.returncode != 0:
        missing(f"assembler cannot build {name}: {proc.stderr.strip().splitlines()[-1]}")
    return out


def _explain(res) -> str:
    return "\n".join([res.summary(), *(m.line() for m in res.mismatches), *res.notes])


# -- real inputs --------------------------------------------------------------


def test_libz_agrees_with_objdump():
    res = verify_decoder(str(require_system_library("libz.so.1")))
    assert res.ok, _explain(res)
    assert res.functions > 50 and res.instructions > 5000 and res.branches > 1000


def test_libcrypto_agrees_with_objdump():
    """Multi-MB, hand-written assembly included (data inside function symbols)."""
    res = verify_decoder(str(require_system_library("libcrypto.so.3")))
    assert res.ok, _explain(res)
    assert res.functions > 4000 and res.instructions > 150_000 and res.branches > 30_000
    assert res.seconds < 60


def _verify_one(path: str) -> Tuple[str, bool, str, int]:
    res = verify_decoder(path, max_report=5)
    return path, res.ok, _explain(res), res.instructions


def _verify_many(paths: List[Path]) -> Tuple[List[str], int]:
    """verify_decoder over many files, one worker per core; (failures, instructions)."""
    jobs = max(1, min(os.cpu_count() or 1, len(paths)))
    failures, total = [], 0
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(jobs) as pool:
        biggest_first = sorted(paths, key=lambda p: p.stat().st_size, reverse=True)
        for path, ok, text, n in pool.imap_unordered(_verify_one, [str(p) for p in biggest_first]):
            total += n
            if not ok:
                failures.append(text)
    return failures, total


def _module_selection() -> List[Path]:
    """The 40 largest modules (most code) plus every 50th by path (a spread)."""
    mods = debian_kernel_modules()
    largest = sorted(mods, key=lambda p: p.stat().st_size, reverse=True)[:40]
    return sorted(set(largest) | set(mods[::50]))


def test_debian_module_selection_agrees_with_objdump():
    selection = _module_selection()
    failures, instructions = _verify_many(selection)
    assert not failures, "\n\n".join(failures)
    assert instructions > 2_000_000


@pytest.mark.slow
def test_every_debian_module_agrees_with_objdump():
    """All ~4000 modules of the Debian kernel (about 3 minutes on 2 cores)."""
    failures, instructions = _verify_many(debian_kernel_modules())
    assert not failures, f"{len(failures)} modules disagree:\n\n" + "\n\n".join(failures[:20])
    assert instructions > 10_000_000


@pytest.mark.slow
def test_debian_kernel_image_agrees_with_objdump():
    """The Debian 6.1 kernel with its symbols (the -dbg package: about 4 minutes to fetch once, 2 to verify):
    only objdump's known quirks differ -- the deliberately overlapping retbleed_untrain_ret and
    srso_untrain_ret, and fpu__init_check_bugs' `9b db e3` (fwait; fninit)."""
    from helpers.corpus import debian_vmlinux

    res = verify_decoder(str(debian_vmlinux()))
    assert res.ok, _explain(res)
    assert res.functions > 45_000 and res.instructions > 2_500_000
    assert dict(res.tolerated) == {"objdump fuses fwait into the x87 instruction after it": 1,
                                   "objdump restarts at a symbol inside an instruction": 2}


# Programs that carry OpenSSL inside them, with symbols: its padlock_sha512_blocks holds `rep xsha512`
# (f3 0f a6 e0), which objdump 2.40 cannot decode.
OPENSSL_PROGRAMS = {
    "cargo": "~/.rustup/toolchains/stable-x86_64-unknown-linux-gnu/bin/cargo",
    "node": "/usr/bin/node",
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(OPENSSL_PROGRAMS))
def test_programs_that_embed_openssl_agree_with_objdump(name):
    """cargo (rustup) and node link OpenSSL in; several minutes each."""
    path = Path(os.path.expanduser(OPENSSL_PROGRAMS[name]))
    if not path.is_file():
        missing(f"{path} not installed ({name}): a program with OpenSSL linked in is verified here")
    res = verify_decoder(str(path))
    assert res.ok, _explain(res)
    assert res.tolerated and dict(res.tolerated).get("objdump (bad)", 0) >= 1
    assert any(n.startswith("padlock_sha512_blocks+") and "(length from iced-x86)" in n for n in res.notes)


# -- encodings where decoders are known to differ -----------------------------

ODD_BODY = r"""
	push	%rbp
	mov	%rsp, %rbp
	.byte 0x0f, 0xb9, 0x40, 0x10		# ud1 0x10(%rax),%eax: ModR/M, as objdump
	.byte 0x0f, 0xff, 0x0c, 0x24		# ud0 (%rsp),%ecx
	.byte 0x0f, 0x0b			# ud2
1:	loop	1b
	loope	1b
	loopne	1b
	jrcxz	1b
	.byte 0x67, 0xe3, 0xf0			# jecxz
	xbegin	2f
	xend
2:	.byte 0x3e, 0x74, 0x00			# je,pt
	.byte 0x2e, 0x75, 0x00			# jne,pn
	bnd call ext_func			# relocated, undefined
	bnd jmp 3f
3:	call	other				# relocated, other section
	jmp	ext_tail
	.byte 0x4f, 0x47, 0x41, 0x4d, 0x53	# redundant REX prefixes: push %r11
	.byte 0x48, 0x0f, 0x1f, 0x44, 0x00, 0x00
	leave
	ret
"""

OTHER_SECTION = r"""
	.section .text.other,"ax",@progbits
	.type	other, @function
other:
	push	%rbp
	mov	%rsp, %rbp
	jmp	odd
	.size	other, .-other
"""


def test_odd_encodings_agree(tmp_path):
    """ud0/ud1 lengths, loop/jrcxz/xbegin targets, hinted and bnd branches,
    relocated calls to undefined and to other-section symbols, redundant REX."""
    res = verify_decoder(str(_assemble(tmp_path, "odd", ODD_BODY, OTHER_SECTION)))
    assert res.ok, _explain(res)
    assert res.branches == 13
    assert dict(res.tolerated) == {"redundant REX": 1}


def test_linked_kernel_agrees(tmp_path):
    """ET_EXEC at a kernel address: no relocations left, targets absolute."""
    stubs = "\t.globl ext_func, ext_tail\n\t.type ext_func, @function\next_func:\n\tret\n" \
            "\t.size ext_func, .-ext_func\n\t.type ext_tail, @function\next_tail:\n\tret\n\t.size ext_tail, .-ext_tail\n"
    obj = _assemble(tmp_path, "odd", ODD_BODY, OTHER_SECTION + stubs)
    kern = tmp_path / "kern.elf"
    ld = require_tool("ld", "binutils", "the kernel-like image is linked here")
    subprocess.run([ld, "-static", "-nostdlib", "-Ttext=0xffffffff80200000", "-e", "odd",
                    str(obj), "-o", str(kern)], check=True)
    res = verify_decoder(str(kern))
    assert res.ok, _explain(res)
    assert res.functions == 4 and res.branches == 13


def test_stripped_image_is_a_user_error(tmp_path):
    copy = tmp_path / "stripped.o"
    copy.write_bytes(_assemble(tmp_path, "odd", ODD_BODY).read_bytes())
    strip = require_tool("strip", "binutils", "the test strips an object's symbols")
    subprocess.run([strip, str(copy)], check=True)
    with pytest.raises(UserError, match="no symbol table"):
        verify_decoder(str(copy))


# Found by the oracle in Debian's idxd.ko (ENQCMDS) and with an assembler:
# capstone 5 cannot decode these, and the byte-by-byte resync after its
# "(bad)" byte then produces instructions inside the real one.
CAPSTONE_GAPS = {
    "enqcmds": "enqcmds (%rdx), %rax",
    "enqcmd": "enqcmd (%rdx), %rax",
    "tdcall": "tdcall",
    "serialize": "serialize",
    "wrmsrns": "wrmsrns",
    "uiret": "uiret",
    "senduipi": "senduipi %rax",
    "hreset": "hreset $1",
    "rdpru": "rdpru",
    "invlpgb": "invlpgb",
    "tlbsync": "tlbsync",
    "pvalidate": "pvalidate",
    "psmash": "psmash",
    "rmpupdate": "rmpupdate",
    "xsusldtrk": "xsusldtrk",
}


@pytest.mark.parametrize("name", sorted(CAPSTONE_GAPS))
def test_capstone_gap_agrees(name, tmp_path):
    """capstone 5 cannot decode these; iced-x86 sizes them so the walk stays
    on objdump's boundaries, and the instruction itself is refused."""
    body = f"\tpush %rbp\n\tmov %rsp, %rbp\n\t{CAPSTONE_GAPS[name]}\n\txchg %ax, %ax\n\tleave\n\tret"
    path = _assemble(tmp_path, f"gap_{name}", body)
    res = verify_decoder(str(path))
    assert res.ok, _explain(res)
    from generator.image.elf import KernelImage
    from generator.analysis.probes import analyse

    img = KernelImage.open(str(path))
    rep = analyse(img, img.lookup(f"gap_{name}"))
    gap = rep.probes[2]
    assert gap.status == "skip" and "cannot decode" in gap.reason
    assert [p.status for p in rep.probes[3:]] == ["ok"] * (len(rep.probes) - 3)


# -- objdump's own quirks, each with hand-assembled bytes ------------------------


def _quirk_result(tmp_path: Path, name: str, body: str, extra: str = ""):
    res = verify_decoder(str(_assemble(tmp_path, name, body, extra)))
    assert res.ok, _explain(res)
    return res


def test_objdump_restarting_at_an_inner_symbol_is_tolerated(tmp_path):
    """Linux 6.1's deliberately overlapping code.  retbleed_untrain_ret: `test $0xcc,%bl` (f6 c3 cc) whose last
    two bytes are the `ret; int3` of retbleed_return_thunk, a label one byte in.  srso_untrain_ret: `movabs
    $imm64,%rax` (48 b8 ...) whose immediate is srso_safe_ret's `lea 8(%rsp),%rsp; ret; int3; int3`, a label
    two bytes in.  objdump restarts at each label (`.byte 0xf6`; `rex.W`, `.byte 0xb8`); the CPU entering at
    the function's start runs the long instruction."""
    body = ("\tpush %rbp\n\tmov %rsp, %rbp\n\tpop %rbp\n\t.byte 0xf6\n\t.globl inner_thunk\ninner_thunk:\n"
            "\tret\n\tint3\n\tlfence\n\tjmp inner_thunk\n"
            "\t.byte 0x48, 0xb8\n\t.globl inner_safe_ret\ninner_safe_ret:\n"
            "\tlea 8(%rsp), %rsp\n\tret\n\tint3\n\tint3\n\tlfence\n\tjmp inner_safe_ret\n\tint3")
    res = _quirk_result(tmp_path, "untrain", body)
    assert dict(res.tolerated) == {"objdump restarts at a symbol inside an instruction": 2}


def test_a_call_behind_a_redundant_rex_is_one_instruction_and_its_target_agrees(tmp_path):
    """`48 41 e8 rel32`: the Intel SDM (vol. 2A, 2.2.1) allows one REX per instruction, immediately before the
    opcode, ignores other placements, and says that in 64-bit mode 40H-4FH are prefixes, "not treated as
    individual instructions".  So the CPU runs one 7-byte call, as capstone decodes it; objdump prints the
    ignored 48 as a `rex.W` line and the call one byte later.  The boundary is tolerated as a redundant REX
    and the call's target is objdump's, read where objdump decoded the call (in an object and linked)."""
    body = ("\tpush %rbp\n\tmov %rsp, %rbp\n\t.byte 0x48, 0x41, 0xe8\n\t.long rex_callee - . - 4\n"
            "\t.byte 0x41, 0x48, 0x4f, 0xe8\n\t.long rex_callee - . - 4\n\tpop %rbp\n\tret")
    callee = "\t.globl rex_callee\n\t.type rex_callee, @function\nrex_callee:\n\tret\n\t.size rex_callee, .-rex_callee\n"
    obj = _assemble(tmp_path, "rex_call", body, callee)
    linked = tmp_path / "rex_call.exe"
    ld = require_tool("ld", "binutils", "the object is linked too")
    proc = subprocess.run([ld, "-e", "rex_call", str(obj), "-o", str(linked)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    for image in (obj, linked):
        res = verify_decoder(str(image))
        assert res.ok, _explain(res)
        assert dict(res.tolerated) == {"redundant REX": 2} and res.branches == 2, _explain(res)


def test_objdump_fusing_fwait_into_the_x87_instruction_is_tolerated(tmp_path):
    """`9b db e3` is objdump's one `finit`; the CPU runs fwait, then fninit (and capstone decodes both)."""
    body = "\tpush %rbp\n\tmov %rsp, %rbp\n\t.byte 0x9b, 0xdb, 0xe3\n\t.byte 0x9b, 0xd9, 0x38\n\tpop %rbp\n\tret"
    res = _quirk_result(tmp_path, "fpu_init", body)
    assert dict(res.tolerated) == {"objdump fuses fwait into the x87 instruction after it": 2}
    from generator.image.elf import KernelImage
    from generator.analysis.probes import analyse

    img = KernelImage.open(str(_assemble(tmp_path, "fpu_init", body)))
    assert [p.mnemonic for p in analyse(img, img.lookup("fpu_init")).probes][2:6] == ["wait", "fninit", "wait",
                                                                                      "fnstcw"]


def test_objdump_prefixed_bad_is_its_bad_and_the_note_names_the_length_source(tmp_path):
    """OpenSSL's padlock_sha512_blocks: `f3 0f a6 e0` (rep xsha512) is a 3-byte `repz (bad)` to objdump 2.40,
    which then decodes `e0 0f` as loopne; capstone cannot decode it either, iced-x86 gives its 4 bytes."""
    body = "\tpush %rbp\n\tmov %rsp, %rbp\n\t.byte 0xf3, 0x0f, 0xa6, 0xe0\n\tmovaps (%rsp), %xmm0\n\tpop %rbp\n\tret"
    path = _assemble(tmp_path, "padlock_sha512", body)
    listing = subprocess.run(["objdump", "-d", str(path)], capture_output=True, text=True).stdout
    if "repz (bad)" not in listing:
        pytest.skip("this objdump decodes rep xsha512 (binutils newer than 2.40): the quirk is not there to see")
    res = verify_decoder(str(path))
    assert res.ok, _explain(res)
    assert dict(res.tolerated) == {"objdump (bad)": 1}
    assert res.notes == ("padlock_sha512+0x4: objdump cannot decode f3 0f a6 e0 0f 28 04 24; capstone cannot "
                         "either, so it is refused (length from iced-x86)",)


# -- the oracle can fail ------------------------------------------------------


def test_shifted_boundary_is_reported(monkeypatch):
    """Merge two instructions of one function: the oracle must say where."""
    lib = str(require_system_library("libz.so.1"))
    from generator.image.elf import KernelImage

    victim = KernelImage.open(lib).lookup("deflate")
    real = amd64.decode

    def shifted(code, address, limit=None):
        insns, err = real(code, address, limit)
        if address == victim.address:
            (o1, l1, m1, a1), (_, l2, _, _) = insns[1], insns[2]
            insns = [insns[0], Insn(o1, l1 + l2, m1, a1), *insns[3:]]
        return insns, err

    patch_isa(monkeypatch, decode=shifted)
    res = verify_decoder(lib)
    assert not res.ok
    assert {m.function for m in res.mismatches} == {"deflate"}
    m = res.mismatches[0]
    assert m.kind == "boundary" and m.offset > 0
    assert m.objdump.count("+") == m.ours.count("+") + 1  # objdump has the start we dropped


def test_wrong_branch_target_is_reported(monkeypatch):
    lib = str(require_system_library("libz.so.1"))
    real = amd64.classify
    hit = []

    def off_by_one(b, address, mnemonic, operands):
        v = real(b, address, mnemonic, operands)
        if v.target is not None and not hit:
            hit.append(address)
            v = v._replace(target=v.target + 1)
        return v

    patch_isa(monkeypatch, classify=off_by_one)
    res = verify_decoder(lib)
    assert res.mismatch_count == 1
    (m,) = res.mismatches
    assert (m.kind, m.address) == ("branch", hit[0])


def test_wrong_relocation_is_reported(monkeypatch, tmp_path):
    """Apply resolvable relocations 16 bytes off: the relocated calls disagree."""
    from generator.image.elf import KernelImage

    obj = str(_assemble(tmp_path, "odd", ODD_BODY, OTHER_SECTION))
    real = KernelImage._raw_relocs_for

    def skewed(self, s):
        for reloc, width, pcrel, value in real(self, s):
            yield reloc, width, pcrel, value + 16 if reloc.resolved else value

    monkeypatch.setattr(KernelImage, "_raw_relocs_for", skewed)
    res = verify_decoder(obj)
    assert res.functions == 2
    # call other (odd) and jmp odd (other): the two resolvable relocations
    assert sorted((m.function, m.kind) for m in res.mismatches) == [("odd", "branch"), ("other", "branch")]


def test_missing_objdump_is_a_user_error(monkeypatch):
    # The objdump's name follows from the GNU triple of an ISA run under qemu-user (OracleQuirks.objdump).
    patch_isa(monkeypatch, oracle=amd64.oracle._replace(gnu_triple="no-such-triple", qemu="qemu-none"))
    with pytest.raises(UserError, match="no-such-triple-objdump not found; install binutils"):
        verify_decoder(str(require_system_library("libz.so.1")))


# -- command line -------------------------------------------------------------


def test_main_verify_ok_text_and_json(capsys):
    lib = str(require_system_library("libz.so.1"))
    assert main_verify(["--kernel", lib]) == 0
    assert "OK" in capsys.readouterr().out
    assert main_verify(["--kernel", lib, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True and doc["mismatches"] == [] and doc["instructions"] > 0


def test_main_verify_fails_on_mismatch(monkeypatch, capsys):
    lib = str(require_system_library("libz.so.1"))
    real = amd64.decode

    def drop_second(code, address, limit=None):
        insns, err = real(code, address, limit)
        if len(insns) > 3:
            (o1, l1, m1, a1), (_, l2, _, _) = insns[1], insns[2]
            insns = [insns[0], Insn(o1, l1 + l2, m1, a1), *insns[3:]]
        return insns, err

    patch_isa(monkeypatch, decode=drop_second)
    assert main_verify(["--kernel", lib, "--max-report", "3"]) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out and out.count(" boundary: ") == 3


def test_main_verify_bad_input_is_one_line(tmp_path, capsys):
    assert main_verify(["--kernel", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
