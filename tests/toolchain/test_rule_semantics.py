"""The one rule (``kinst_core_dissect()``) against what capstone says the instruction does, fuzzed.

No other copy of kinst's rule is left to compare the core with, so this
checks it against its meaning, with capstone as the independent oracle:
for every instruction the core lets a probe trampoline, the trampoline the
core fills (``kinst_core_tramp_fill()``) must decode, at the trampoline's
address, to the same instruction -- the same mnemonic, the same direct
target and the same %rip-relative address (a widened short jump to its
rel32 form) -- followed by ``jmp *0(%rip)`` and the address of the next
original instruction; for every call the core emulates, the operands it
emulates (``reg1``, ``reg2``, ``scale``, ``disp``) must be the ones capstone
prints, and the target of a direct or register call the one
``kinst_core_call()`` computes.  The instructions are real code and real
code with bytes changed and prefixes added.
"""

from __future__ import annotations

import ctypes
import random
import re
from typing import Iterator, Tuple

import capstone
import pytest

from generator.image.elf import KernelImage
from generator.isa import hostcore
from generator.isa.amd64 import ISA as amd64
from helpers.skips import require_system_library

MASK = (1 << 64) - 1
REGS = ("rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", *(f"r{i}" for i in range(8, 16)))
TRAMPOLINED = {"trampoline", "riprel", "jmp-rel32", "jcc-rel32", "jmp-widen", "jcc-widen"}
_MEM = re.compile(r"^\*(?P<disp>-?0x[0-9a-f]+|-?\d+)?(?:\((?P<base>%\w+)?(?:,\s*(?P<index>%\w+))?(?:,\s*(?P<scale>\d))?\))?$")
_RIP = re.compile(r"(-?0x[0-9a-f]+|-?\d+)?\(%[re]ip\)")  # %eip: an addr32 form, the address cut to 32 bits


class _Regs(ctypes.Structure):  # struct kinst_regs (sys/modules/kinst/amd64/kinst_core.h)
    _fields_ = [("gpr", ctypes.c_uint64 * 16), ("rip", ctypes.c_uint64), ("rflags", ctypes.c_uint64)]


def _cs():
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    md.syntax = capstone.CS_OPT_SYNTAX_ATT
    return md


def _instructions(count: int, seed: int) -> Iterator[bytes]:
    """Real instructions of libcrypto, and as many again with bytes changed or prefixes put in front."""
    rng = random.Random(seed)
    md = _cs()
    lib = KernelImage.open(str(require_system_library("libcrypto.so.3")))
    real = []
    for f in lib.functions()[:3000]:
        code = lib.read(f.address, f.size)
        real += [code[a - f.address : a - f.address + n] for a, n, _, _ in md.disasm_lite(code, f.address)]
    prefixes = (0x66, 0xF2, 0xF3, 0xF0, 0x2E, 0x3E, 0x26, 0x36, 0x64, 0x65, 0x41, 0x48, 0x4C)
    for _ in range(count):
        b = bytearray(rng.choice(real))
        if rng.random() < 0.5:
            for _ in range(rng.randint(1, 2)):
                b[rng.randrange(len(b))] = rng.randrange(256)
        if rng.random() < 0.3:
            b[0:0] = bytes(rng.choice(prefixes) for _ in range(rng.randint(1, 13)))
        yield bytes(b[:15])


def _decoded(md, b: bytes, address: int) -> Tuple[int, str, str]:
    for _, size, mnem, ops in md.disasm_lite(b, address, 1):
        return size, mnem, ops
    return 0, "", ""


def _md_of(h: hostcore.Host) -> int:
    """The address of the struct kinst_md in the library's one-instruction row buffer."""
    return ctypes.addressof(h.row) + h.fields["km_kind"].offset


def _disp(text) -> int:
    return int(text, 0) if text else 0


@pytest.fixture(scope="module")
def core():
    h = hostcore.host(amd64.name)
    # (md, patch point, where the trampoline runs, where it is written: here the same place)
    h.lib.kinst_core_tramp_fill.argtypes = (ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p)
    h.lib.kinst_core_call.argtypes = (ctypes.c_void_p, ctypes.c_uint64, ctypes.POINTER(_Regs),
                                      ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64))
    return h


def test_trampolines_and_emulated_calls_do_what_the_instruction_does(core):
    md = _cs()
    slot = ctypes.create_string_buffer(amd64.tramp_size)
    tramp = ctypes.addressof(slot)
    patch = tramp + 0x10000000  # within the rel32 reach of the slot
    regs = _Regs()
    for i in range(16):
        regs.gpr[i] = 0x1111111100000000 + i * 0x1000
    seen = {k: 0 for k in ("tramp", "widen", "riprel", "call-reg", "call-mem", "call-direct")}
    for b in _instructions(40000, seed=1203):
        size, mnem, ops = _decoded(md, b, patch)
        if not size:
            continue
        b = b[:size]
        try:
            v = amd64.classify(b, patch, mnem, ops)
        except Exception:
            continue  # the core and capstone disagree: the analysis stops there (test_amd64_classify)
        if v.status != "ok":
            continue
        why = f"{b.hex()} ({mnem} {ops}) {v}"
        if v.kind in TRAMPOLINED:
            rc = core.lib.kinst_core_tramp_fill(_md_of(core), patch, tramp, tramp)
            if rc == 2:  # KINST_E_RANGE: only where no rel32 at the slot reaches the target
                where = v.target if v.target is not None else patch + size + _disp(_RIP.search(ops).group(1))
                assert not -2**31 <= where - (tramp + v.md.tinstlen) < 2**31, why
                continue
            assert rc == 0, why
            out = slot.raw
            n, m2, ops2 = _decoded(md, out, tramp)
            assert n == v.md.tinstlen and m2.split()[-1] == mnem.split()[-1], (why, out.hex(), m2, ops2)
            if v.target is not None:
                assert int(ops2, 0) & MASK == v.target == int(ops, 0) & MASK, (why, ops2)
                seen["widen" if n != size else "tramp"] += 1
            elif _RIP.search(ops):
                mask = 0xFFFFFFFF if "(%eip)" in ops else MASK
                want = patch + size + _disp(_RIP.search(ops).group(1))
                assert (tramp + n + _disp(_RIP.search(ops2).group(1))) & mask == want & mask, (why, ops2)
                seen["riprel"] += 1
            else:
                assert out[:n] == b, why
                seen["tramp"] += 1
            assert out[n : n + 6] == bytes.fromhex("ff2500000000"), (why, out.hex())
            assert int.from_bytes(out[n + 6 : n + 14], "little") == patch + size, (why, out.hex())
            continue
        target, ret = ctypes.c_uint64(), ctypes.c_uint64()
        if v.kind == "call-direct":
            assert core.lib.kinst_core_call(_md_of(core), patch, ctypes.byref(regs), ctypes.byref(target),
                                            ctypes.byref(ret)) == 0, why
            assert target.value == int(ops, 0) & MASK == v.target and ret.value == patch + size, why
            seen["call-direct"] += 1
        elif v.kind == "call-reg":
            assert ops.startswith("*%") and ops[2:] in REGS, why
            assert core.lib.kinst_core_call(_md_of(core), patch, ctypes.byref(regs), ctypes.byref(target),
                                            ctypes.byref(ret)) == 0, why
            assert target.value == regs.gpr[REGS.index(ops[2:])] and ret.value == patch + size, why
            seen["call-reg"] += 1
        elif v.kind in ("call-mem", "call-riprel"):
            m = _MEM.match(re.sub(r"%[a-z]s:", "", ops))  # a segment (%ds:, ignored in 64-bit mode) aside
            assert m, why
            base, index = m.group("base"), m.group("index")
            want = (-1 if base is None or base == "%rip" else REGS.index(base[1:]),
                    -1 if index is None else REGS.index(index[1:]),
                    {None: 0, "1": 0, "2": 1, "4": 2, "8": 3}[m.group("scale")] if index else v.md.scale,
                    _disp(m.group("disp")))
            assert (v.md.reg1, v.md.reg2, v.md.scale, v.md.disp) == want, why
            assert (base == "%rip") == (v.kind == "call-riprel"), why
            seen["call-mem"] += 1
    assert all(n >= 10 for n in seen.values()), seen  # each kind was checked on real and mutated code
