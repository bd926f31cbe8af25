"""``probes --all --json`` as the host library writes it, against the per-function report, byte for byte.

The library (``isa/hostcore.py``) formats each row as ``report.probe_dict`` lays
a record out, from the keys and fields Python hands it; the report is
``json.dumps`` of ``probe_dict`` over ``probes.analyse``.  Their bytes must
be equal on real images and on mutated code, the library must carry the
work (and reuse what it wrote for repeated instructions), and it must hand
back every function whose records need Python.
"""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from generator.analysis import report
from generator.analysis.fastjson import ImageJson
from generator.analysis.probes import analyse
from generator.common.errors import ClassifierError
from generator.image.elf import Function, KernelImage
from generator.isa import hostcore
from generator.isa.amd64 import ISA as amd64
from helpers.skips import require_system_library
from helpers.textimage import TextImage, lay_out, mutated_bodies


class _Counting(ImageJson):
    """An ``ImageJson`` that counts the functions it writes in Python (the library handed them back)."""

    handed_back = 0

    def _python(self, func):
        self.handed_back += 1
        return super()._python(func)


def _same(img, funcs, rule="any"):
    writer = _Counting(img, rule)
    assert writer.native is not None
    got = writer.lines(funcs).decode().split("\n")
    want = [report.function_json(analyse(img, f, rule)) for f in funcs]
    return writer, [f.name for f, a, b in zip(funcs, got, want) if a != b]


@pytest.mark.parametrize("name, rule, limit", [("libstdc++.so.6", "any", 0), ("libstdc++.so.6", "first", 1500),
                                               ("libcrypto.so.3", "any", 1500)])
def test_real_libraries(name, rule, limit):
    img = KernelImage.open(str(require_system_library(name)))
    funcs = img.functions()[:limit] if limit else img.functions()
    writer, bad = _same(img, funcs, rule)
    assert len(funcs) > 1000 and not bad, bad[:5]
    assert writer.handed_back < 0.01 * len(funcs)


def test_the_sample_kernel(sample_kernel):
    """Every kind, refusals by name and by bytes, functions refused by name and by the prologue rule."""
    img = KernelImage.open(str(sample_kernel))
    for rule in ("any", "first"):
        writer, bad = _same(img, img.functions(), rule)
        assert not bad, bad[:5]
    text = writer.lines(img.functions()).decode()
    assert '"reason":"function refused: ' in text and '"kind":"call-riprel"' in text


def test_mutated_code():
    """Real functions with bytes changed and prefixes inserted: each line is the report's, whether the library
    wrote it or handed it back; where the report stops (capstone and the core disagree), the library handed the
    function back and the writer stops the same way."""
    bodies = mutated_bodies(str(require_system_library("libcrypto.so.3")), 1500, seed=1201, max_size=300)
    img, funcs = lay_out(amd64, bodies)
    writer = _Counting(img, "any")
    written = 0
    for f, body in zip(funcs, bodies):
        try:
            want = report.function_json(analyse(img, f, "any"))
        except ClassifierError:
            with pytest.raises(ClassifierError):
                writer.function(f)
            continue
        before = writer.handed_back
        assert writer.function(f) == want, body.hex()
        written += writer.handed_back == before
    assert written > 0.5 * len(funcs) and writer.handed_back > 50


def test_repeated_instructions_are_written_once():
    """Eligible functions made of real bodies, one after another: their instructions recur at other addresses,
    where the library pastes the record it wrote before.  Every line is the report's, relative branches (whose
    records name an address) included, and the reuse happened."""
    rng = random.Random(1202)
    lib = KernelImage.open(str(require_system_library("libcrypto.so.3")))
    bodies = [lib.read(f.address, f.size) for f in lib.functions() if 8 < f.size < 200][:400]
    img, funcs = lay_out(amd64, [b"\x55" + rng.choice(bodies) for _ in range(1200)])
    hits = hostcore.host(amd64.name).lib.kk_cache_hit_count()
    writer, bad = _same(img, funcs)
    assert not bad, bad[:3]
    assert hostcore.host(amd64.name).lib.kk_cache_hit_count() - hits > 10000


def test_displacements_are_written_once():
    """A memory operand's displacement is printed as a number too, but it is the instruction's own: the same
    load over and over is pasted from the cache (it was written anew each time while any operand starting
    0x counted as an address)."""
    img, (func,) = lay_out(amd64, [b"\x55" + bytes.fromhex("488b4710") * 200 + b"\xc3"])
    hits = hostcore.host(amd64.name).lib.kk_cache_hit_count()
    writer, bad = _same(img, [func])
    assert not bad and '"operands":"0x10(%rdi), %rax"' in writer.function(func)
    assert hostcore.host(amd64.name).lib.kk_cache_hit_count() - hits >= 199


def test_an_address_in_the_operands_is_never_pasted():
    """capstone prints a relative branch's target as a bare number, in decimal below 10: the same bytes
    elsewhere print another one.  A loop (refused by the core, so its record has no target field to set it
    apart) at address 0, printed ``loop 6``, and again at 0x100: each line is the report's."""
    body = bytes.fromhex("e204c3")
    funcs = [Function(name=f"f{i}", address=at, size=len(body), binding="global", file=None, section=".text")
             for i, at in enumerate((0, 0x100))]
    img = TextImage(amd64, body + b"\xcc" * (0x100 - len(body)) + body + b"\xcc" * 16, funcs, base=0)
    writer, bad = _same(img, funcs)
    assert not bad, bad
    lines = writer.lines(funcs).decode()
    assert '"operands":"6"' in lines and '"operands":"0x106"' in lines


@pytest.mark.parametrize("hexcode, why", [
    ("55 0f0b c3", None),  # ud2: refused by name, written by the library
    ("55 c4e2f9f7c0 c3", None),  # VEX shlx: not in the table, capstone decodes it, the library writes it
    ("55 ff18 c3", None),  # lcall: refused by the core from its bytes
    ("55 " + "2e" * 13 + "7410 c3", None),  # a jcc rel8 the trampoline could not hold (issue 20, item 2)
    ("55 0fb9c0 c3", None),  # ud1: the table's length, decode.py's correction of capstone's
    ("e9 00000000 0fb9cc", None),  # a vmlinux static-call trampoline: jmp, then ud1
    ("55 67 0fb9c0 c3", "ud1 after 0x67: the table does not know its length"),
    ("55 8ee8 0f30 c3", "a %gs load opens a refused region"),
    ("55 06 c3", "(bad): capstone cannot decode it"),
    ("55 48", "the last instruction runs past the symbol"),
])
def test_hands_back_what_needs_python(hexcode, why):
    code = bytes.fromhex(hexcode.replace(" ", ""))
    img, (func,) = lay_out(amd64, [code])
    writer = _Counting(img, "any")
    assert writer.function(func) == report.function_json(analyse(img, func, "any"))
    assert writer.handed_back == (0 if why is None else 1), why


def test_a_chunk_written_to_a_file_equals_the_lines(tmp_path):
    """``write`` (the library's buffer straight to a file) gives the lines, in order, with the functions it
    hands back written by Python in their place."""
    code = [bytes.fromhex(h) for h in ("554889e5e8000000005dc3", "5506c3", "554889e5c3")]
    img, funcs = lay_out(amd64, code)
    lib = KernelImage.open(str(require_system_library("libz.so.1")))
    for image, fs in ((lib, lib.functions()), (img, funcs)):
        writer = ImageJson(image, "any")
        out = tmp_path / "chunk.jsonl"
        with open(out, "wb") as f:
            writer.write(fs, f.fileno())
        want = writer.lines(fs).decode() + "\n"
        assert out.read_text() == want and want.count("\n") == len(fs) > 2


def test_loads_in_a_process_that_never_imported_capstone():
    """The library links the wheel's libcapstone.so, whose own name (libcapstone.so.5) is no file there: it
    must load by path first, not ride on the Python binding having loaded it."""
    code = ("import sys; from generator.isa import hostcore; h = hostcore.host('amd64'); "
            "sys.exit(0 if h is not None and 'capstone' not in sys.modules else 1)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
