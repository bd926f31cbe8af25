"""The C summary walk (``isa/amd64/native``) against iced-x86 and capstone.

``test_accelerator.py`` holds every accelerator equal to the capstone path
function by function.  Here: that the C walk really carries the work (it
could pass those tests by declining everything), that it never accepts what
iced-x86 would not, on real and on mutated code, that its table is the one
``opmap.py`` derives from iced today, and that without a compiler the
summaries are unchanged.
"""

from __future__ import annotations

import random
import re
import subprocess
from pathlib import Path

import pytest

from generator.analysis import report, summary
from generator.analysis.probes import MAX_INSN, code_runs
from generator.image.elf import KernelImage
from generator.isa.amd64 import fast, native, opmap
from helpers.skips import require_system_library, require_tool


@pytest.fixture(scope="module")
def lib():
    if native.library() is None:
        pytest.skip("no C compiler (cc, gcc or clang) to build generator/isa/amd64/accel/kk_accel.c")
    return native.library()


def _items(path: str, max_size: int = 0):
    img = KernelImage.open(path)
    out = []
    for f in img.functions():
        sec = img.section_at(f.address)
        if sec is None or sec.nobits or f.address + f.size > sec.addr + sec.size:
            continue
        if max_size and f.size > max_size:
            continue
        out.append((img.read_in(sec, f.address, min(f.size + MAX_INSN, sec.addr + sec.size - f.address)),
                    f.address, f.size))
    return out


@pytest.mark.parametrize("name", ["libz.so.1", "libcrypto.so.3", "libstdc++.so.6"])
def test_native_walk_carries_real_libraries(lib, name):
    """On real libraries the C walk decides almost every function, and always as iced-x86 does."""
    items = _items(str(require_system_library(name)))
    got = native.summarise_native(items)
    accepted = [(it, s) for it, s in zip(items, got) if s is not None]
    assert len(accepted) >= 0.99 * len(items) > 50
    for it, s in accepted:
        iced = fast.summarise(*it)
        assert s == iced and list(s.kinds) == list(iced.kinds), hex(it[1])


def test_native_walk_never_accepts_what_iced_declines(lib):
    """Real functions with random bytes changed and prefixes inserted: the C walk declines, or agrees with iced.

    An accepted function that iced declines would print a summary where capstone (the authority on bad bytes)
    was never asked: the one failure this test exists for.
    """
    rng = random.Random(20261201)
    sources = _items(str(require_system_library("libcrypto.so.3")), max_size=400)
    prefixes = (0x66, 0xF2, 0xF3, 0xF0, 0x2E, 0x3E, 0x26, 0x36, 0x64, 0x65, 0x40, 0x41, 0x48, 0x4F, 0x67, 0x0F)
    items = []
    for _ in range(20000):
        code = bytearray(rng.choice(sources)[0])
        size = len(code) - MAX_INSN if len(code) > MAX_INSN + 1 else len(code)
        for _ in range(rng.randint(1, 4)):
            code[rng.randrange(size)] = rng.randrange(256)
        if rng.random() < 0.3:
            at = rng.randrange(size)
            extra = bytes(rng.choice(prefixes) for _ in range(rng.randint(1, 3)))
            code[at:at] = extra
            size += len(extra)
        items.append((bytes(code), 0x1000, size))
    got = native.summarise_native(items)
    accepted = 0
    for it, s in zip(items, got):
        if s is None:
            continue
        accepted += 1
        iced = fast.summarise(*it)
        assert iced is not None, f"C walk accepted bytes iced declines: {it[0][:it[2]].hex()}"
        assert s == iced and list(s.kinds) == list(iced.kinds), it[0][: it[2]].hex()
    assert accepted > 0.3 * len(items)


@pytest.mark.parametrize("hexcode, why", [
    ("55c5f877c3", "VEX (vzeroupper)"),
    ("558ee8c3", "a %gs load (capstone counts its region)"),
    ("55678b00c3", "address-size prefix"),
    ("5548", "truncated: REX at the end"),
])
def test_native_walk_declines_to_iced(lib, hexcode, why):
    code = bytes.fromhex(hexcode)
    assert native.summarise_native([(code, 0x1000, len(code))]) == [None], why
    assert native.summarise(code, 0x1000, len(code)) == fast.summarise(code, 0x1000, len(code))


def test_chunked_summaries_equal_per_function(lib, sample_kernel):
    """``fast_chunk`` (the whole chunk in one C call) gives what ``fast`` gives one function at a time."""
    img = KernelImage.open(str(require_system_library("libcrypto.so.3")))
    funcs = img.functions()[:1500]
    chunk = summary.fast_chunk(img, funcs, "any", img.isa, native)
    one = [summary.fast(img, f, "any", img.isa, native) for f in funcs]
    assert chunk == one


@pytest.mark.parametrize("name, rule", [("libz.so.1", "any"), ("libcrypto.so.3", "any"),
                                        ("libcrypto.so.3", "first"), ("libstdc++.so.6", "any")])
def test_json_lines_written_by_c_equal_the_records(lib, name, rule):
    """``fast_json_chunk`` (each line's end written by ``kk_summary.c``) gives the lines ``fast_chunk`` makes
    through ``report.summary_json_fields``, byte for byte, and the C really wrote them."""
    img = KernelImage.open(str(require_system_library(name)))
    funcs = img.functions()
    lines = summary.fast_json_chunk(img, funcs, rule, img.isa, native)
    assert lines == summary.fast_chunk(img, funcs, rule, img.isa, native, report.summary_json_fields)
    ends = [tail for run, span, first in code_runs(img, funcs)
            for tail in native.summary_json_span(span, [funcs[k].address - first for k in run],
                                                 [funcs[k].size for k in run], rule == "first", '"x"')[1]]
    assert sum(1 for t in ends if t) >= 0.99 * len(funcs) > 50
    eligible = sum(1 for ln in lines if '"eligible":true' in ln)
    assert eligible and (rule == "first" or eligible < len(lines)), "both verdicts seen"


def test_json_lines_of_a_kernel_and_modules(lib, sample_kernel, debian_modules):
    """The sample kernel (every emulation kind, excluded names, local copies of one name) and Debian's
    modules (ET_REL, relocated from one buffer per section): the C-written lines equal the records'."""
    for path in [sample_kernel, *debian_modules[:40]]:
        img = KernelImage.open(str(path))
        funcs = img.functions()
        for rule in ("any", "first"):
            got = summary.fast_json_chunk(img, funcs, rule, img.isa, native)
            assert got == [report.summary_json(summary.fast(img, f, rule, img.isa, native)) for f in funcs], \
                (path.name, rule)
    img = KernelImage.open(str(sample_kernel))
    text = "\n".join(summary.fast_json_chunk(img, img.functions(), "any", img.isa, native))
    assert "excluded by name" in text and '"call-riprel":' in text and '"jcc-widen":' in text


def test_json_lines_of_mutated_code_equal_the_records(lib):
    """Random bytes in real functions, laid out as one section: the C writes the lines of what it walks and
    leaves the rest to iced and capstone, with the same lines as the records' either way."""
    rng = random.Random(20261202)
    sources = _items(str(require_system_library("libcrypto.so.3")), max_size=300)
    codes = []
    for _ in range(3000):
        code = bytearray(rng.choice(sources)[0])
        for _ in range(rng.randint(0, 3)):
            code[rng.randrange(len(code))] = rng.randrange(256)
        codes.append(bytes(code))
    span = b"".join(codes)
    starts = [sum(len(c) for c in codes[:k]) for k in range(len(codes))]
    for rule in ("any", "first"):
        counts, tails = native.summary_json_span(span, starts, [len(c) for c in codes], rule == "first",
                                                 '"refused: no frame"')
        walked = native.walk_span(span, starts, [len(c) for c in codes])
        assert sum(1 for t in tails if t) > 0.3 * len(codes)
        for code, n, tail, s in zip(codes, counts, tails, walked):
            assert bool(tail) == (s is not None), code.hex()
            if s is None:
                continue
            reason = "" if rule in s.frame_rules else "refused: no frame"
            want = report.summary_json_fields("f", 0, len(code), reason, "", s.instructions,
                                              {} if reason else s.kinds)
            assert report.summary_json_head("f", 0, len(code)) + tail == want, code.hex()
            assert n == s.instructions


def test_without_a_compiler_summaries_come_from_iced(monkeypatch, tmp_path):
    monkeypatch.setattr(native, "CACHE_DIR", tmp_path / "accel")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CC", raising=False)
    native.library.cache_clear()
    try:
        assert native.library() is None and not native.prepare()
        code = bytes.fromhex("554889e5e800000000ff15000000005dc3")
        assert native.summarise(code, 0x1000, len(code)) == fast.summarise(code, 0x1000, len(code))
        assert not (tmp_path / "accel").exists() or not list((tmp_path / "accel").iterdir())
    finally:
        native.library.cache_clear()


def test_disabled_by_environment(monkeypatch):
    monkeypatch.setenv(native.ENV_DISABLE, "1")
    native.library.cache_clear()
    try:
        assert native.library() is None
    finally:
        monkeypatch.delenv(native.ENV_DISABLE)
        native.library.cache_clear()


@pytest.mark.parametrize("cc", ["gcc", "clang"])
def test_walk_and_json_writer_compile_cleanly(cc, tmp_path):
    """Both shared objects, warnings as errors, C99, as native.py builds them (with the headers it
    generates, and the JSON writer with capstone's own)."""
    require_tool(cc, cc, "compile the native accelerators with warnings as errors")
    for spec in (native.SUMMARY_LIB, native.JSON_LIB):
        for name, text in spec.generated().items():
            (tmp_path / name).write_text(text)
        flags = spec.flags()
        if flags is None:
            pytest.skip("the capstone wheel's include/ and lib/ are missing (pip install capstone)")
        out = tmp_path / f"{spec.name}.so"
        subprocess.run([cc, "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC",
                        f"-I{native.SOURCE_DIR}", f"-I{tmp_path}", "-o", str(out),
                        *(str(native.SOURCE_DIR / s) for s in spec.sources if s.endswith(".c")), *flags], check=True)
        assert out.stat().st_size > 0


def _committed_table():
    text = (native.SOURCE_DIR / "kk_opmap.h").read_text()
    top_text = text[text.index("kk_top[") : text.index("};", text.index("kk_top["))]
    rows_text = text[text.index("kk_rows[") :]
    top = [int(v, 16) for v in re.findall(r"0x([0-9a-f]{4})", top_text)]
    rows = [bytes(int(v, 16) for v in re.findall(r"0x([0-9a-f]{2})", block))
            for block in re.findall(r"\{([^{}]*)\}", rows_text)]
    return top, rows


def _check_classes(opcodes_by_map):
    top, rows = _committed_table()
    assert len(top) == opmap.NKEYS
    checked = 0
    for m, opcodes in opcodes_by_map.items():
        for op in opcodes:
            if op in opmap._NOT_OPCODES.get(m, ()):
                continue
            for pfx in range(len(opmap.PFX)):
                for rex in range(len(opmap.REX)):
                    for lock in (0, 1):
                        entry = top[opmap.key(m, op, pfx, rex, lock)]
                        cells = list(rows[entry & 0x7FFF]) if entry & 0x8000 else [entry] * opmap.CELLS
                        assert cells == opmap._class_cells(m, op, pfx, rex, lock), (m, hex(op), pfx, rex, lock)
                        checked += 1
    return checked


def test_committed_table_matches_iced_on_a_sample():
    """A spread of classes re-derived from iced-x86 equal the committed header (the full check is slow)."""
    sample = {m: range(m, 256, 23) for m in range(len(opmap.MAPS))}
    sample[0] = (*sample[0], 0xFF, 0x8E, 0xE8, 0x75, 0xCC)  # calls, %ss loads, rel32, jcc, int3
    sample[1] = (*sample[1], 0x01, 0x05, 0x84)  # the 0f 01 group, syscall, jcc rel32
    assert _check_classes(sample) > 1000


@pytest.mark.slow
def test_committed_table_matches_iced():
    """``python3 -m generator.isa.amd64.opmap`` would write the committed header byte for byte."""
    assert opmap.render(*opmap.build()) == (native.SOURCE_DIR / "kk_opmap.h").read_text()


def test_table_is_used_not_bypassed(lib):
    """The walk's lengths come from the table: a call rel32 is 5 bytes, a jcc rel8 2, and their kinds count."""
    code = bytes.fromhex("55" "e800000000" "7500" "ff d0" "ff 15 00000000" "c3".replace(" ", ""))
    s = native.summarise_native([(code, 0x1000, len(code))])[0]
    assert s is not None and s.instructions == 6
    assert s.kinds == {"call-direct": 1, "call-reg": 1, "call-riprel": 1, "jcc-widen": 1, "trampoline": 2}
    assert Path(native.library_path()).is_file()
