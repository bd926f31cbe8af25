"""The C writer of ``probes --all --json`` (``kk_json.c``) against the Python writer, byte for byte.

``test_fastjson.py`` holds the writer (native where it can) equal to the
per-function report.  Here: the C writer really carries the work, it writes
exactly what the Python writer writes on whole real images and on mutated
code, and it hands back every function whose record needs more than the
bytes and capstone's text.
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from generator.analysis.fastjson import ImageJson
from generator.analysis.probes import MAX_INSN
from generator.common.errors import ClassifierError
from generator.image.elf import Function, KernelImage
from generator.isa.amd64 import ISA as amd64
from generator.isa.amd64 import native
from helpers.skips import require_system_library

BASE = 0xFFFFFFFF80200000


@pytest.fixture(scope="module", autouse=True)
def writer_built():
    if native.json_library() is None:
        pytest.skip("kk_json.c could not be built: it needs a C compiler and the capstone wheel's "
                    "include/ and lib/ (pip install capstone)")


def _writers(img, rule):
    fast, slow = ImageJson(img, rule), ImageJson(img, rule)
    assert fast.native is not None
    slow.native = None
    return fast, slow


@pytest.mark.parametrize("name", ["libstdc++.so.6", "libcrypto.so.3"])
@pytest.mark.parametrize("rule", ["any", "first"])
def test_native_json_equals_python_on_real_libraries(name, rule):
    img = KernelImage.open(str(require_system_library(name)))
    fast, slow = _writers(img, rule)
    funcs = img.functions()
    for f in funcs:
        assert fast.function(f) == slow.function(f), f.name
    assert len(funcs) > 1000


def test_native_json_carries_the_work():
    """Nearly every function of a real library is written by C, not handed back."""
    from generator.analysis.probes import function_code

    img = KernelImage.open(str(require_system_library("libstdc++.so.6")))
    fast, _ = _writers(img, "any")
    funcs = img.functions()
    taken = sum(fast._native(f, function_code(img, f)) is not None for f in funcs)
    assert taken >= 0.99 * len(funcs)


class _Image:
    """The slice of ``KernelImage`` the JSON writers use: one .text of the given bytes."""

    isa = amd64
    path = "mutated"
    e_type = "ET_EXEC"

    def __init__(self, code: bytes):
        self.code = code
        self.text = SimpleNamespace(name=".text", addr=BASE, size=len(code), nobits=False)

    def functions(self):
        return []  # no named function: no NMI entry point, so no call closure to refuse

    def section_at(self, address):
        t = self.text
        return t if t.addr <= address < t.addr + t.size else None

    def read(self, address, size):
        off = address - BASE
        return self.code[off : off + size]

    def read_in(self, sec, address, size):
        return self.read(address, size)


def test_native_json_equals_python_on_mutated_code():
    """Real functions with bytes changed and prefixes inserted: the C writer hands back, or writes what Python
    writes.  Where Python stops (a cross-check capstone fails), C must have handed the function back."""
    from generator.analysis.probes import function_code

    rng = random.Random(1201)
    lib = KernelImage.open(str(require_system_library("libcrypto.so.3")))
    sources = [f for f in lib.functions() if 8 < f.size < 300]
    prefixes = (0x66, 0xF2, 0xF3, 0xF0, 0x2E, 0x3E, 0x64, 0x65, 0x40, 0x48, 0x4F, 0x67)
    compared = handed_back = 0
    for i in range(3000):
        src = rng.choice(sources)
        code = bytearray(lib.read(src.address, src.size))
        for _ in range(rng.randint(1, 3)):
            code[rng.randrange(len(code))] = rng.randrange(256)
        if rng.random() < 0.3:
            at = rng.randrange(len(code))
            code[at:at] = bytes(rng.choice(prefixes) for _ in range(rng.randint(1, 3)))
        img = _Image(bytes(code) + b"\xcc" * MAX_INSN)
        func = Function(name=f"m{i}", address=BASE, size=len(code), binding="global", file=None, section=".text")
        fast, slow = ImageJson(img, "any"), ImageJson(img, "any")
        slow.native = None
        got = fast._native(func, function_code(img, func))
        try:
            want = slow.function(func)
        except ClassifierError:
            assert got is None, bytes(code).hex()
            continue
        if got is None:
            handed_back += 1
            continue
        compared += 1
        assert got.decode() == want, bytes(code).hex()
    assert compared > 1000 and handed_back > 50


def test_records_of_repeated_instructions_equal_python():
    """Eligible functions (push %rbp first) made of real and mutated function bodies, one after another in
    one .text: their instructions recur at other addresses, in other functions, which is where C reuses a
    record it wrote before.  Every line equals Python's, relative branches (whose records name an address)
    included, and the reuse happened."""
    rng = random.Random(1202)
    lib = KernelImage.open(str(require_system_library("libcrypto.so.3")))
    bodies = [lib.read(f.address, f.size) for f in lib.functions() if 8 < f.size < 200][:400]
    codes = []
    for _ in range(1500):
        body = bytearray(rng.choice(bodies))
        if rng.random() < 0.3:
            body[rng.randrange(len(body))] = rng.randrange(256)
        codes.append(b"\x55" + bytes(body))
    img = _Image(b"".join(codes) + b"\xcc" * MAX_INSN)
    fast, slow = ImageJson(img, "any"), ImageJson(img, "any")
    slow.native = None
    hits = native.json_library().kk_json_cache_hits()
    address, compared, branches = BASE, 0, 0
    for i, code in enumerate(codes):
        func = Function(name=f"r{i}", address=address, size=len(code), binding="global", file=None,
                        section=".text")
        address += len(code)
        try:
            want = slow.function(func)
        except ClassifierError:
            continue
        got = fast.function(func)
        assert got == want, code.hex()
        compared += 1
        branches += want.count('"target":') - want.count('"target":null')
    assert compared > 1000 and branches > 100
    assert native.json_library().kk_json_cache_hits() - hits > 10000


@pytest.mark.parametrize("hexcode, why", [
    ("55 0f0b c3", None),  # ud2: refused by name, written natively
    ("55 c4e2f9f7c0 c3", None),  # VEX shlx: the table walk declines it, capstone decodes it, C writes it
    ("55 0fb9c0 c3", "ud1: capstone's length is corrected by decode.py"),
    ("55 8ee8 0f30 c3", "a %gs load opens a refused region"),
    ("55 06 c3", "(bad): capstone cannot decode it"),
    ("55 48", "the last instruction runs past the symbol"),
])
def test_hands_back_what_needs_python(hexcode, why):
    from generator.analysis.probes import function_code

    code = bytes.fromhex(hexcode.replace(" ", ""))
    img = _Image(code + b"\xcc" * MAX_INSN)
    func = Function(name="f", address=BASE, size=len(code), binding="global", file=None, section=".text")
    fast, slow = ImageJson(img, "any"), ImageJson(img, "any")
    slow.native = None
    got = fast._native(func, function_code(img, func))
    if why is None:
        assert got is not None and got.decode() == slow.function(func)
    else:
        assert got is None, why
        assert fast.function(func) == slow.function(func)


def test_refused_function_records_say_why(sample_kernel):
    """A function refused by name or by the prologue rule: every record says so, as Python's do."""
    img = KernelImage.open(str(sample_kernel))
    for rule in ("any", "first"):
        fast, slow = _writers(img, rule)
        lines = [(fast.function(f), slow.function(f)) for f in img.functions()]
        assert all(a == b for a, b in lines)
        assert any('"eligible":false' in a and '"reason":"function refused: ' in a for a, _ in lines)


def test_chunk_written_through_the_native_buffer_equals_the_lines(tmp_path):
    """``write`` (C's buffer straight to a file) gives the same bytes as the lines, in order, with the
    functions C hands back written by Python in their place."""
    lib = KernelImage.open(str(require_system_library("libz.so.1")))
    code = bytes.fromhex("554889e5e8000000005dc3" "55 06 c3".replace(" ", "") + "554889e5c3")
    img = _Image(code + b"\xcc" * MAX_INSN)
    mk = [Function(name=n, address=BASE + a, size=s, binding="global", file=None, section=".text")
          for n, a, s in (("f", 0, 11), ("g", 11, 3), ("h", 14, 5))]
    for image, funcs in ((lib, lib.functions()), (img, mk)):
        writer = ImageJson(image, "any")
        out = tmp_path / "chunk.jsonl"
        with open(out, "wb") as f:
            writer.write(funcs, f.fileno())
        want = "".join(writer.function(f) + "\n" for f in funcs)
        assert out.read_text() == want
        assert want.count("\n") == len(funcs) > 2


def test_writer_loads_in_a_process_that_never_imported_capstone():
    """The writer links the wheel's libcapstone.so, whose own name (libcapstone.so.5) is no file there: it
    must load by path first, not ride on the Python binding having loaded it."""
    import subprocess
    import sys

    code = ("import sys; from generator.isa.amd64 import native; ok = native.json_library() is not None; "
            "sys.exit(0 if ok and 'capstone' not in sys.modules else 1)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
