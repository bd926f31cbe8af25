"""amd64 classification against kinst_instr_dissect(), one encoding per class.

Every encoding below is written out by hand, with the instruction it spells.
For each one the test checks *all* of kinst's per-probe fields (flags, instlen,
tinstlen, template, dispoff, disp, reg1, reg2, scale) and kinstkit's verdict
(status, reason, kind, target).

The expected kinst fields follow FreeBSD's kinst_isa.c:

- ``struct kinst_probe`` is allocated M_ZERO, so a field nobody writes is 0:
  an instruction without a ModR/M byte has reg1 = reg2 = 0, and ``dispoff``
  (kp_md.dispoff) stays 0 for calls and for anything that is not RIP-relative;
  kinst's *local* dispoff is only copied into kp_md for RIP-relative
  templates.
- With a ModR/M byte, reg1 = reg2 = -1 before anything else.
- Calls are emulated, so their template stays all zero.
- A non-RIP-relative, non-call instruction is copied verbatim: template =
  bytes, disp 0.

Where kinstkit deliberately differs from kinst (docs/refusals.md), the test
says what kinst would store instead.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import pytest

from generator.analysis import records as R
from generator.common.errors import ClassifierError
from generator.isa.amd64 import ISA as amd64
from generator.isa.amd64 import tables as T

CALL, DIRECT, RIPREL, JMP, MODDIR = 0x01, 0x02, 0x04, 0x08, 0x10
ADDR = 0x1000


class K(NamedTuple):
    """What ``amd64.classify`` returns, with the probe metadata spread out, by name."""

    status: str
    reason: str
    kind: str
    flags: int
    instlen: int
    tinstlen: int
    template: bytes
    dispoff: int
    disp: int
    reg1: int
    reg2: int
    scale: int
    target: Optional[int]


def flat(v) -> K:
    """A ``Verdict`` with its ``struct kinst_probe_md`` spread out, as ``K``."""
    return K(v.status, v.reason, v.kind, *v.md, v.target)


def k(hexbytes: str, address: int = ADDR) -> K:
    """Decode ``hexbytes`` as exactly one instruction, then classify it."""
    b = bytes.fromhex(hexbytes)
    insns, err = amd64.decode(b, address)
    assert err == "", err
    assert [(off, ln) for off, ln, _, _ in insns] == [(0, len(b))], insns
    _, _, mnem, ops = insns[0]
    return flat(amd64.classify(b, address, mnem, ops))


def t16(hexbytes: str) -> bytes:
    """A 16-byte template: the given bytes, then zeros."""
    return bytes.fromhex(hexbytes).ljust(16, b"\0")


def check(hexbytes: str, want: dict) -> K:
    """Compare every field; ``reason`` in ``want`` is a substring."""
    got = k(hexbytes)
    want = dict(want)
    reason = want.pop("reason", "")
    want.setdefault("status", R.STATUS_OK)
    want.setdefault("instlen", len(bytes.fromhex(hexbytes)))
    want["template"] = t16(want["template"])
    missing = set(K._fields) - set(want) - {"reason"}
    assert not missing, f"test case must give every field; missing {sorted(missing)}"
    assert {f: getattr(got, f) for f in want} == want
    if reason:
        assert reason in got.reason
    else:
        assert got.reason == ""
    return got


# fmt: off
CASES = [
    # --- copied verbatim -------------------------------------------------
    pytest.param("48 89 e5", dict(  # mov %rsp,%rbp: ModR/M, so reg1 = reg2 = -1
        kind="trampoline", flags=0, tinstlen=3, template="48 89 e5",
        dispoff=0, disp=0, reg1=-1, reg2=-1, scale=0, target=None), id="mov-reg"),
    pytest.param("55", dict(  # push %rbp: no ModR/M, so reg1 = reg2 = 0 (M_ZERO)
        kind="trampoline", flags=0, tinstlen=1, template="55",
        dispoff=0, disp=0, reg1=0, reg2=0, scale=0, target=None), id="push-rbp"),
    pytest.param("c3", dict(  # ret: no ModR/M
        kind="trampoline", flags=0, tinstlen=1, template="c3",
        dispoff=0, disp=0, reg1=0, reg2=0, scale=0, target=None), id="ret"),
    pytest.param("8b 04 25 10 00 00 00", dict(  # mov 0x10,%eax: SIB base 101 mod 00 is absolute, not RIP-relative
        kind="trampoline", flags=0, tinstlen=7, template="8b 04 25 10 00 00 00",
        dispoff=0, disp=0, reg1=-1, reg2=-1, scale=0, target=None), id="absolute-disp32"),
    pytest.param("48 8b 45 f8", dict(  # mov -0x8(%rbp),%rax: a displacement, but not RIP-relative
        kind="trampoline", flags=0, tinstlen=4, template="48 8b 45 f8",
        dispoff=0, disp=0, reg1=-1, reg2=-1, scale=0, target=None), id="rbp-disp8"),
    pytest.param("f3 ab", dict(  # rep stos %eax,(%rdi)
        kind="trampoline", flags=0, tinstlen=2, template="f3 ab",
        dispoff=0, disp=0, reg1=0, reg2=0, scale=0, target=None), id="rep-stos"),
    pytest.param("8e d8", dict(  # mov %eax,%ds: only %ss (and %gs, by region) loads are refused
        kind="trampoline", flags=0, tinstlen=2, template="8e d8",
        dispoff=0, disp=0, reg1=-1, reg2=-1, scale=0, target=None), id="mov-to-ds"),
    pytest.param("8c d0", dict(  # mov %ss,%eax: reading %ss is harmless
        kind="trampoline", flags=0, tinstlen=2, template="8c d0",
        dispoff=0, disp=0, reg1=-1, reg2=-1, scale=0, target=None), id="mov-from-ss"),

    # --- RIP-relative ModR/M: copied with a 4-byte hole at rmindex + 1 ---
    pytest.param("48 8b 05 10 00 00 00", dict(  # mov 0x10(%rip),%rax
        kind="riprel", flags=RIPREL, tinstlen=7, template="48 8b 05 00 00 00 00",
        dispoff=3, disp=0x10, reg1=-1, reg2=-1, scale=0, target=None), id="riprel-load"),
    pytest.param("48 8d 05 f0 ff ff ff", dict(  # lea -0x10(%rip),%rax
        kind="riprel", flags=RIPREL, tinstlen=7, template="48 8d 05 00 00 00 00",
        dispoff=3, disp=-0x10, reg1=-1, reg2=-1, scale=0, target=None), id="riprel-lea-negative"),
    pytest.param("c7 05 10 00 00 00 2a 00 00 00", dict(  # movl $0x2a,0x10(%rip): the imm32 after the hole is kept
        kind="riprel", flags=RIPREL, tinstlen=10, template="c7 05 00 00 00 00 2a 00 00 00",
        dispoff=2, disp=0x10, reg1=-1, reg2=-1, scale=0, target=None), id="riprel-imm-after-disp"),
    pytest.param("0f 10 05 10 00 00 00", dict(  # movups 0x10(%rip),%xmm0: 0f map but not a jcc
        kind="riprel", flags=RIPREL, tinstlen=7, template="0f 10 05 00 00 00 00",
        dispoff=3, disp=0x10, reg1=-1, reg2=-1, scale=0, target=None), id="riprel-0f-map"),
    pytest.param("c5 fa 6f 05 10 00 00 00", dict(  # vmovdqu 0x10(%rip),%xmm0 (two-byte VEX)
        kind="riprel", flags=RIPREL, tinstlen=8, template="c5 fa 6f 05 00 00 00 00",
        dispoff=4, disp=0x10, reg1=-1, reg2=-1, scale=0, target=None), id="riprel-vex2"),
    pytest.param("c4 e2 79 18 05 10 00 00 00", dict(  # vbroadcastss 0x10(%rip),%xmm0 (three-byte VEX, map 0f38)
        kind="riprel", flags=RIPREL, tinstlen=9, template="c4 e2 79 18 05 00 00 00 00",
        dispoff=5, disp=0x10, reg1=-1, reg2=-1, scale=0, target=None), id="riprel-vex3"),
    pytest.param("62 f1 7c 48 10 05 01 00 00 00", dict(  # vmovups 0x1(%rip),%zmm0 (EVEX; disp32 is not scaled)
        kind="riprel", flags=RIPREL, tinstlen=10, template="62 f1 7c 48 10 05 00 00 00 00",
        dispoff=6, disp=1, reg1=-1, reg2=-1, scale=0, target=None), id="riprel-evex"),

    # --- rel32 branches: hole at the displacement --------------------------
    pytest.param("e9 10 00 00 00", dict(  # jmp .+0x15
        kind="jmp-rel32", flags=JMP | RIPREL, tinstlen=5, template="e9 00 00 00 00",
        dispoff=1, disp=0x10, reg1=0, reg2=0, scale=0, target=ADDR + 5 + 0x10), id="jmp-rel32"),
    pytest.param("0f 85 10 00 00 00", dict(  # jne .+0x16
        kind="jcc-rel32", flags=JMP | RIPREL, tinstlen=6, template="0f 85 00 00 00 00",
        dispoff=2, disp=0x10, reg1=0, reg2=0, scale=0, target=ADDR + 6 + 0x10), id="jcc-rel32"),
    pytest.param("0f 8c f0 ff ff ff", dict(  # jl .-0xa
        kind="jcc-rel32", flags=JMP | RIPREL, tinstlen=6, template="0f 8c 00 00 00 00",
        dispoff=2, disp=-0x10, reg1=0, reg2=0, scale=0, target=ADDR + 6 - 0x10), id="jcc-rel32-back"),

    # --- rel8 branches: widened to rel32, disp adjusted by -3 / -4 ---------
    pytest.param("eb 10", dict(  # jmp .+0x12 -> e9 rel32
        kind="jmp-widen", flags=JMP | RIPREL, tinstlen=5, template="e9 00 00 00 00",
        dispoff=1, disp=0x10 - 3, reg1=0, reg2=0, scale=0, target=ADDR + 2 + 0x10), id="jmp-rel8"),
    pytest.param("eb fe", dict(  # jmp . (to itself)
        kind="jmp-widen", flags=JMP | RIPREL, tinstlen=5, template="e9 00 00 00 00",
        dispoff=1, disp=-2 - 3, reg1=0, reg2=0, scale=0, target=ADDR), id="jmp-rel8-self"),
    pytest.param("74 10", dict(  # je .+0x12 -> 0f 84 rel32
        kind="jcc-widen", flags=JMP | RIPREL, tinstlen=6, template="0f 84 00 00 00 00",
        dispoff=2, disp=0x10 - 4, reg1=0, reg2=0, scale=0, target=ADDR + 2 + 0x10), id="jcc-rel8"),
    pytest.param("7f f0", dict(  # jg .-0xe -> 0f 8f rel32
        kind="jcc-widen", flags=JMP | RIPREL, tinstlen=6, template="0f 8f 00 00 00 00",
        dispoff=2, disp=-0x10 - 4, reg1=0, reg2=0, scale=0, target=ADDR + 2 - 0x10), id="jcc-rel8-back"),
    # Prefixed short jumps keep their prefixes, so the widened instruction is
    # prefixes + 5 / + 6 long.  kinst stores tinstlen 5 / 6 and so copies a
    # truncated instruction; kinstkit stores the true length.
    pytest.param("f2 eb 10", dict(  # bnd jmp .+0x13 (kinst: tinstlen 5)
        kind="jmp-widen", flags=JMP | RIPREL, tinstlen=6, template="f2 e9 00 00 00 00",
        dispoff=2, disp=0x10 - 3, reg1=0, reg2=0, scale=0, target=ADDR + 3 + 0x10), id="bnd-jmp-rel8"),
    pytest.param("2e 74 10", dict(  # je,pn .+0x13 (kinst: tinstlen 6)
        kind="jcc-widen", flags=JMP | RIPREL, tinstlen=7, template="2e 0f 84 00 00 00 00",
        dispoff=3, disp=0x10 - 4, reg1=0, reg2=0, scale=0, target=ADDR + 3 + 0x10), id="hinted-je-rel8"),
    pytest.param("3e 75 10", dict(  # jne,pt .+0x13 (kinst: tinstlen 6)
        kind="jcc-widen", flags=JMP | RIPREL, tinstlen=7, template="3e 0f 85 00 00 00 00",
        dispoff=3, disp=0x10 - 4, reg1=0, reg2=0, scale=0, target=ADDR + 3 + 0x10), id="hinted-jne-rel8"),

    # --- direct call: emulated; template zero, kp_md.dispoff untouched -----
    pytest.param("e8 10 00 00 00", dict(  # call .+0x15
        kind="call-direct", flags=CALL | DIRECT, tinstlen=5, template="",
        dispoff=0, disp=0x10, reg1=0, reg2=0, scale=0, target=ADDR + 5 + 0x10), id="call-rel32"),
    pytest.param("e8 fb ff ff ff", dict(  # call . (to itself)
        kind="call-direct", flags=CALL | DIRECT, tinstlen=5, template="",
        dispoff=0, disp=-5, reg1=0, reg2=0, scale=0, target=ADDR), id="call-rel32-self"),

    # --- indirect calls: emulated from reg1 + (reg2 << scale) + disp -------
    pytest.param("ff d0", dict(  # call *%rax
        kind="call-reg", flags=CALL | MODDIR, tinstlen=2, template="",
        dispoff=0, disp=0, reg1=0, reg2=-1, scale=0, target=None), id="call-rax"),
    pytest.param("41 ff d3", dict(  # call *%r11 (REX.B)
        kind="call-reg", flags=CALL | MODDIR, tinstlen=3, template="",
        dispoff=0, disp=0, reg1=11, reg2=-1, scale=0, target=None), id="call-r11"),
    pytest.param("ff 10", dict(  # call *(%rax)
        kind="call-mem", flags=CALL, tinstlen=2, template="",
        dispoff=0, disp=0, reg1=0, reg2=-1, scale=0, target=None), id="call-mem-rax"),
    pytest.param("ff 50 10", dict(  # call *0x10(%rax): disp8
        kind="call-mem", flags=CALL, tinstlen=3, template="",
        dispoff=0, disp=0x10, reg1=0, reg2=-1, scale=0, target=None), id="call-mem-disp8"),
    pytest.param("ff 50 f0", dict(  # call *-0x10(%rax): disp8 is signed
        kind="call-mem", flags=CALL, tinstlen=3, template="",
        dispoff=0, disp=-0x10, reg1=0, reg2=-1, scale=0, target=None), id="call-mem-disp8-negative"),
    pytest.param("ff 90 78 56 34 12", dict(  # call *0x12345678(%rax): disp32
        kind="call-mem", flags=CALL, tinstlen=6, template="",
        dispoff=0, disp=0x12345678, reg1=0, reg2=-1, scale=0, target=None), id="call-mem-disp32"),
    pytest.param("41 ff 55 00", dict(  # call *0x0(%r13): rm 101 with mod 01 is %rbp/%r13, not RIP
        kind="call-mem", flags=CALL, tinstlen=4, template="",
        dispoff=0, disp=0, reg1=13, reg2=-1, scale=0, target=None), id="call-mem-r13"),
    pytest.param("41 ff 14 24", dict(  # call *(%r12): SIB base 100 + REX.B, no index
        kind="call-mem", flags=CALL, tinstlen=4, template="",
        dispoff=0, disp=0, reg1=12, reg2=-1, scale=0, target=None), id="call-mem-r12"),
    # SIB index 100 without REX.X means "no index"; kinst stores reg2 = 4 and
    # would add %rsp again: rsp + rsp + 8.
    pytest.param("ff 54 24 08", dict(  # call *0x8(%rsp) (kinst: reg2 4)
        kind="call-mem", flags=CALL, tinstlen=4, template="",
        dispoff=0, disp=8, reg1=4, reg2=-1, scale=0, target=None), id="call-mem-rsp"),
    pytest.param("42 ff 14 24", dict(  # call *(%rsp,%r12,1): index 100 with REX.X is %r12
        kind="call-mem", flags=CALL, tinstlen=4, template="",
        dispoff=0, disp=0, reg1=4, reg2=12, scale=0, target=None), id="call-mem-index-r12"),
    # SIB base 101 with mod 00 means "no base, disp32"; kinst never reads the
    # disp32 (it only reads displacements for mod 01/10): kinst disp 0.
    pytest.param("ff 14 cd 10 00 00 00", dict(  # call *0x10(,%rcx,8) (kinst: disp 0)
        kind="call-mem", flags=CALL, tinstlen=7, template="",
        dispoff=0, disp=0x10, reg1=-1, reg2=1, scale=3, target=None), id="call-mem-index-disp32"),
    # SIB base 101 with mod 01/10 is %rbp (or %r13); kinst skips every base
    # 101 and so loses it: kinst reg1 -1.
    pytest.param("ff 54 cd 08", dict(  # call *0x8(%rbp,%rcx,8) (kinst: reg1 -1)
        kind="call-mem", flags=CALL, tinstlen=4, template="",
        dispoff=0, disp=8, reg1=5, reg2=1, scale=3, target=None), id="call-mem-rbp-index"),
    pytest.param("43 ff 54 8d 00", dict(  # call *0x0(%r13,%r9,4): REX.B and REX.X (kinst: reg1 -1)
        kind="call-mem", flags=CALL, tinstlen=5, template="",
        dispoff=0, disp=0, reg1=13, reg2=9, scale=2, target=None), id="call-mem-r13-r9"),
    pytest.param("ff 15 10 00 00 00", dict(  # call *0x10(%rip): reg1 = reg2 = -1 means RIP-relative
        kind="call-riprel", flags=CALL | RIPREL, tinstlen=6, template="",
        dispoff=0, disp=0x10, reg1=-1, reg2=-1, scale=0, target=None), id="call-riprel"),

    # --- indirect jumps: JMP only, copied (with a hole when RIP-relative) --
    pytest.param("ff e0", dict(  # jmp *%rax
        kind="trampoline", flags=JMP, tinstlen=2, template="ff e0",
        dispoff=0, disp=0, reg1=-1, reg2=-1, scale=0, target=None), id="jmp-rax"),
    pytest.param("3e ff e0", dict(  # notrack jmp *%rax
        kind="trampoline", flags=JMP, tinstlen=3, template="3e ff e0",
        dispoff=0, disp=0, reg1=-1, reg2=-1, scale=0, target=None), id="notrack-jmp-rax"),
    pytest.param("ff 24 c5 20 00 00 00", dict(  # jmp *0x20(,%rax,8): operands only decoded for calls
        kind="trampoline", flags=JMP, tinstlen=7, template="ff 24 c5 20 00 00 00",
        dispoff=0, disp=0, reg1=-1, reg2=-1, scale=0, target=None), id="jmp-table"),
    pytest.param("ff 25 10 00 00 00", dict(  # jmp *0x10(%rip)
        kind="riprel", flags=JMP | RIPREL, tinstlen=6, template="ff 25 00 00 00 00",
        dispoff=2, disp=0x10, reg1=-1, reg2=-1, scale=0, target=None), id="jmp-riprel"),
]
# fmt: on


@pytest.mark.parametrize("hexbytes, want", CASES)
def test_kinst_fields(hexbytes, want):
    check(hexbytes, want)


def test_trampoline_arithmetic_keeps_the_target():
    """disp32' = patchpoint + disp - tramp at dispoff reaches the original target.

    This is kinst_riprel_disp(); it checks the -3/-4 adjustment and kinstkit's
    tinstlen for prefixed short jumps together.
    """
    patch = 0xFFFFFFFF80400000  # kernel text
    tramp = 0xFFFFFFFF81001000  # kinst allocates trampolines above KERNBASE: within +-2 GiB
    for hexbytes in ("eb 10", "74 10", "f2 eb 10", "2e 74 10", "e9 10 00 00 00", "0f 85 10 00 00 00"):
        got = k(hexbytes, patch)
        d32 = (patch + got.disp - tramp) & 0xFFFFFFFF
        d32 -= (1 << 32) if d32 & 0x80000000 else 0
        # The rel32 ends the rewritten instruction, so it counts from tramp + tinstlen.
        assert got.dispoff + 4 == got.tinstlen, hexbytes
        assert (tramp + got.tinstlen + d32) & (2**64 - 1) == got.target, hexbytes


# --- refusals ----------------------------------------------------------------

# One encoding per capstone mnemonic in REFUSED.
REFUSED_ENCODINGS = {
    "popfq": "9d",  # popfq
    "popfw": "66 9d",  # popfw
    "sti": "fb",  # sti
    "hlt": "f4",  # hlt
    "mwait": "0f 01 c9",  # mwait
    "mwaitx": "0f 01 fb",  # mwaitx
    "loop": "e2 fe",  # loop .
    "loope": "e1 fe",  # loope .
    "loopne": "e0 fe",  # loopne .
    "jrcxz": "e3 fe",  # jrcxz .
    "jecxz": "67 e3 fe",  # jecxz . (address-size prefix)
    "int3": "cc",  # int3
    "int": "cd 80",  # int $0x80
    "int1": "f1",  # icebp
    "ud0": "0f ff c0",  # ud0 %eax,%eax
    "ud1": "0f b9 c0",  # ud1 %eax,%eax
    "ud2": "0f 0b",  # ud2
    "iretq": "48 cf",  # iretq
    "iretl": "cf",  # iretl
    "iretw": "66 cf",  # iretw
    "lcalll": "ff 18",  # lcall *(%rax)
    "lcallq": "48 ff 18",  # rex.w lcall *(%rax)
    "lcallw": "66 ff 18",  # lcallw *(%rax)
    "ljmpl": "ff 28",  # ljmp *(%rax)
    "ljmpq": "48 ff 28",  # rex.w ljmp *(%rax)
    "ljmpw": "66 ff 28",  # ljmpw *(%rax)
    "xbegin": "c7 f8 00 00 00 00",  # xbegin .+6
    "swapgs": "0f 01 f8",  # swapgs
    "sysretq": "48 0f 07",  # sysretq
    "sysretl": "0f 07",  # sysretl
    "sysexitl": "0f 35",  # sysexit
    "sysexitq": "48 0f 35",  # sysexitq
    "vmlaunch": "0f 01 c2",  # vmlaunch
    "vmresume": "0f 01 c3",  # vmresume
}
# Names kept in REFUSED for other capstone versions and AT&T spellings; capstone
# 5 never prints them for 64-bit code (into is invalid there).
NEVER_PRINTED = {"popf", "iret", "into", "sysexit"}
# Far calls and jumps are refused from their bytes (ff /3, ff /5) by the portable core, which also refuses a
# table record naming one; capstone names them lcall*/ljmp*.
FAR = {"lcall": "KINST_RF_FAR_CALL", "ljmp": "KINST_RF_FAR_JMP"}


def _refusal(mnemonic: str) -> str:
    if mnemonic in T.REFUSED:
        return T.REFUSED[mnemonic]
    far = next(c for m, c in FAR.items() if mnemonic.startswith(m))
    return next(r.reason for r in T.CORE_REFUSALS if r.c_name == far)


def test_every_refusal_has_an_encoding():
    assert set(T.REFUSED) == {m for m in REFUSED_ENCODINGS if not m.startswith(tuple(FAR))} | NEVER_PRINTED


@pytest.mark.parametrize("mnemonic, hexbytes", sorted(REFUSED_ENCODINGS.items()))
def test_refused(mnemonic, hexbytes):
    b = bytes.fromhex(hexbytes)
    insns, err = amd64.decode(b, ADDR)
    assert err == ""
    assert len(insns) == 1 and insns[0][1] == len(b)
    assert insns[0][2].split()[-1] == mnemonic
    got = k(hexbytes)
    assert got.status == R.STATUS_SKIP
    assert got.kind == R.KIND_SKIP
    assert got.reason == f"{mnemonic}: {_refusal(mnemonic)}"


def test_refused_instruction_keeps_kinst_fields():
    """A refusal changes the verdict, not what kinst would have stored."""
    check("e2 fe", dict(  # loop .: no flags at all in kinst, copied verbatim
        status=R.STATUS_SKIP, reason="loop: rel8 branch", kind=R.KIND_SKIP, flags=0, tinstlen=2,
        template="e2 fe", dispoff=0, disp=0, reg1=0, reg2=0, scale=0, target=None))
    check("ff 18", dict(  # lcall *(%rax): kinst takes ff /3 for a near call
        status=R.STATUS_SKIP, reason="lcalll: far call", kind=R.KIND_SKIP, flags=CALL, tinstlen=2,
        template="", dispoff=0, disp=0, reg1=0, reg2=-1, scale=0, target=None))
    check("ff 28", dict(  # ljmp *(%rax): kinst's JMP flag, verbatim copy
        status=R.STATUS_SKIP, reason="ljmpl: far jump", kind=R.KIND_SKIP, flags=JMP, tinstlen=2,
        template="ff 28", dispoff=0, disp=0, reg1=-1, reg2=-1, scale=0, target=None))
    check("9d", dict(  # popfq
        status=R.STATUS_SKIP, reason="popfq: may set IF", kind=R.KIND_SKIP, flags=0, tinstlen=1,
        template="9d", dispoff=0, disp=0, reg1=0, reg2=0, scale=0, target=None))


@pytest.mark.parametrize("hexbytes", [
    "8e d0",  # mov %eax,%ss
    "8e 10",  # mov (%rax),%ss
    "66 8e d0",  # mov %ax,%ss
])
def test_mov_to_ss_refused(hexbytes):
    got = k(hexbytes)
    assert got.status == R.STATUS_SKIP and got.kind == R.KIND_SKIP
    assert T.SS_LOAD_REASON in got.reason
    assert got.flags == 0 and got.reg1 == got.reg2 == -1


@pytest.mark.parametrize("hexbytes, mnemonic", [
    ("66 0f 80 84 00", "jo"),  # capstone: 5 bytes (rel16); Intel: 7 (rel32)
    ("66 0f 81 84 00", "jno"),
])
def test_operand_size_prefixed_near_branch_is_refused(hexbytes, mnemonic):
    """capstone decodes a rel16 where Intel CPUs read a rel32: refused with why, not read past its end."""
    code = bytes.fromhex(hexbytes.replace(" ", ""))
    insns, _ = amd64.decode(code + b"\x90" * 8, ADDR, len(code))
    assert insns[0].length == len(code) and insns[0].mnemonic == mnemonic
    got = flat(amd64.classify(code, ADDR, insns[0].mnemonic, insns[0].operands))
    assert got.status == R.STATUS_SKIP and got.kind == R.KIND_SKIP
    assert got.reason == f"{mnemonic}: {T.REL16_BRANCH_REASON}"


@pytest.mark.parametrize("hexbytes", [
    "06",  # push %es: invalid in 64-bit mode
    "9a",  # lcall ptr16:32: invalid in 64-bit mode (kinst's "direct call" case for 9a)
    "ea",  # ljmp ptr16:32: invalid in 64-bit mode
    "d6",  # salc: invalid in 64-bit mode
])
def test_undecodable_byte_is_a_one_byte_skip(hexbytes):
    code = bytes.fromhex(hexbytes) + b"\x90" * 8
    insns, err = amd64.decode(code, ADDR, 1)
    assert err == ""
    assert insns == [(0, 1, "(bad)", "")]
    got = flat(amd64.classify(code[:1], ADDR, "(bad)", ""))
    assert got.status == R.STATUS_SKIP and got.kind == R.KIND_SKIP
    assert got.reason == T.UNDECODABLE_REASON
    assert got.instlen == got.tinstlen == 1


# --- corrections to kinst that are not refusals ---------------------------------


def test_int1_is_an_opcode_not_a_prefix():
    """kinst's prefix loop takes f0-f3, so a lone f1 leaves no opcode (KASSERT)."""
    for hexbytes in ("f1", "f2 f1"):
        got = k(hexbytes)  # must not raise ClassifierError("only prefixes")
        assert got.status == R.STATUS_SKIP and got.reason.startswith("int1: ")


def test_rex_counts_only_right_before_the_opcode():
    # 41 2e ff d3: the REX is followed by a cs prefix, so the CPU ignores it and
    # the instruction is call *%rbx.  kinst remembers the REX: reg1 = 11.
    insns, _ = amd64.decode(bytes.fromhex("41 2e ff d3"), ADDR)
    assert insns[0][2:] == ("callq", "*%rbx")
    check("41 2e ff d3", dict(
        kind="call-reg", flags=CALL | MODDIR, tinstlen=4, template="",
        dispoff=0, disp=0, reg1=3, reg2=-1, scale=0, target=None))


@pytest.mark.parametrize("hexbytes, length, mnemonic", [
    ("0f b9 c0", 3, "ud1"),  # ud1 %eax,%eax
    ("0f ff c0", 3, "ud0"),  # ud0 %eax,%eax
    ("0f b9 40 10", 4, "ud1"),  # ud1 0x10(%rax),%eax: ModR/M + disp8
    ("0f b9 04 24", 4, "ud1"),  # ud1 (%rsp),%eax: ModR/M + SIB
    ("0f b9 05 10 00 00 00", 7, "ud1"),  # ud1 0x10(%rip),%eax: ModR/M + disp32
    ("48 0f b9 c0", 4, "ud1"),  # ud1 %rax,%rax
])
def test_ud0_ud1_take_a_modrm(hexbytes, length, mnemonic):
    """capstone 5 says 2 bytes; the SDM (and the CPU) use the ModR/M byte too."""
    code = bytes.fromhex(hexbytes) + b"\x90"
    insns, err = amd64.decode(code, ADDR)
    assert err == ""
    assert [(off, ln, m) for off, ln, m, _ in insns] == [(0, length, mnemonic), (length, 1, "nop")]


def test_length_fixes_are_keyed_by_capstones_mnemonic():
    """decode() only re-measures instructions capstone names as in LENGTH_FIXES."""
    for (op0, op1), mnemonic in T.LENGTH_FIXES.items():
        insns, _ = amd64.decode(bytes((op0, op1, 0xC0)), ADDR)
        assert insns[0][1:3] == (3, mnemonic)


# --- the decode walk -------------------------------------------------------------


def test_walk_overrunning_the_symbol_end():
    # push %rbp; call .+5 -- but the symbol is only 3 bytes long.
    code = bytes.fromhex("55 e8 00 00 00 00")
    insns, err = amd64.decode(code, ADDR, 3)
    assert [(off, ln, m) for off, ln, m, _ in insns] == [(0, 1, "pushq"), (1, 5, "callq")]
    assert "+6" in err and "+3" in err and "past the symbol's end" in err


def test_walk_ending_exactly_at_the_symbol_end():
    code = bytes.fromhex("55 48 89 e5 5d c3 cc cc")  # push, mov, pop, ret; padding after the symbol
    insns, err = amd64.decode(code, ADDR, 6)
    assert err == ""
    assert [off for off, _, _, _ in insns] == [0, 1, 4, 5]


def test_walk_goes_on_after_undecodable_bytes():
    # push %rbp; (bad 06); (bad 06); pop %rbp; ret
    code = bytes.fromhex("55 06 06 5d c3")
    insns, err = amd64.decode(code, ADDR)
    assert err == ""
    assert [(off, ln, m) for off, ln, m, _ in insns] == [
        (0, 1, "pushq"), (1, 1, "(bad)"), (2, 1, "(bad)"), (3, 1, "popq"), (4, 1, "retq")]


def test_walk_resumes_after_a_length_fix():
    # ud1 %eax,%eax; push %rbp: the walk restarts at the corrected boundary.
    insns, err = amd64.decode(bytes.fromhex("0f b9 c0 55"), ADDR)
    assert err == ""
    assert [(off, ln, m) for off, ln, m, _ in insns] == [(0, 3, "ud1"), (3, 1, "pushq")]


# --- the capstone cross-check ------------------------------------------------------


def test_cross_check_rejects_a_disagreeing_decoder():
    b = bytes.fromhex("48 8b 05 10 00 00 00")  # mov 0x10(%rip),%rax
    with pytest.raises(ClassifierError, match="rip-relative"):
        amd64.classify(b, ADDR, "movq", "0x10(%rax), %rax")
    with pytest.raises(ClassifierError, match="displacement"):
        amd64.classify(b, ADDR, "movq", "0x20(%rip), %rax")
    plain = bytes.fromhex("48 8b 40 10")  # mov 0x10(%rax),%rax
    with pytest.raises(ClassifierError, match="rip-relative"):
        amd64.classify(plain, ADDR, "movq", "0x10(%rip), %rax")


# --- regions ------------------------------------------------------------------------


def _insns(hexbytes: str):
    code = bytes.fromhex(hexbytes)
    insns, err = amd64.decode(code, ADDR)
    assert err == ""
    return insns


def test_gs_region_of_load_gs():
    # FreeBSD's load_gs(): pushfq; cli; rdmsr; mov %eax,%gs; wrmsr; popfq
    insns = _insns("9c fa 0f 32 8e e8 0f 30 9d")
    assert [m for _, _, m, _ in insns] == ["pushfq", "cli", "rdmsr", "movl", "wrmsr", "popfq"]
    assert amd64.context_refusals(insns) == {6: T.GS_REGION_REASON}  # the wrmsr


def test_gs_region_without_a_restore_runs_to_the_end():
    # pop %gs; nop; ret
    insns = _insns("0f a9 90 c3")
    assert sorted(amd64.context_refusals(insns)) == [2, 3]


def test_gs_region_ends_at_wrgsbase_and_lgs_opens_one():
    # lgs (%rax),%edx; nop; wrgsbase %rax; nop
    insns = _insns("0f b5 10 90 f3 48 0f ae d8 90")
    assert sorted(amd64.context_refusals(insns)) == [3, 4]


def test_gs_reads_and_overrides_open_no_region():
    # mov %gs,%eax; mov %gs:0x0,%rax; mov %rax,%gs:0x8; nop
    insns = _insns("8c e8 65 48 8b 04 25 00 00 00 00 65 48 89 04 25 08 00 00 00 90")
    assert amd64.context_refusals(insns) == {}


class HostSummary(NamedTuple):
    """A function's counts by the host library's walk (what ``probes --all --summary`` shows)."""

    skipped: int
    kinds: dict


def host_summary(code: bytes) -> HostSummary:
    """The host library's summary of the one function ``code``: the whole-image path, not ``classify``."""
    from generator.isa import hostcore

    lib = hostcore.for_isa(amd64)
    lay = lib.summary_layout()
    cols = lib.summarise(code, 0, [0], [len(code)]).tolist()
    assert cols[lay.n] not in (lay.deferred, 0), "the walk handed the function back"
    kinds = {k.kind: cols[lay.first_kind + i] for i, k in enumerate(amd64.table_kinds) if cols[lay.first_kind + i]}
    return HostSummary(cols[lay.refused], kinds)


def test_addr32_call_through_memory_is_refused():
    """67 ff 10 (addr32 call *(%eax)): the CPU truncates the address to 32
    bits, the emulation would not (found by the harness on real execution)."""
    b = bytes.fromhex("67ff10")
    fields = amd64.classify(b, 0x1000, "callq", "*(%eax)")
    assert fields[0] == "skip" and "addr32" in fields[1]
    code = bytes.fromhex("554889e567ff105dc3")
    s = host_summary(code)
    assert s.skipped == 1 and s.kinds.get("call-mem", 0) == 0
    # A register call ignores the address-size prefix: still emulated.
    assert amd64.classify(bytes.fromhex("67ffd0"), 0x1000, "callq", "*%rax")[0] == "ok"


# Emulated calls through %fs:/%gs:-based memory: the emulation reads the
# target at the offset alone, so they are refused; a segment prefix on a
# register call, or es/cs/ss/ds (ignored in 64-bit mode), changes nothing.
SEGMENT_CALLS = {
    "64 ff 10": "call *%fs:(%rax)",
    "65 ff 14 25 10 00 00 00": "call *%gs:0x10",
    "65 ff 15 00 01 00 00": "call *%gs:0x100(%rip)",
    "64 41 ff 52 08": "call *%fs:0x8(%r10)",
    "65 48 ff 10": "rex.w call *%gs:(%rax)",
}
UNAFFECTED_CALLS = {
    "65 ff d0": ("call *%rax, %gs prefix", "call-reg"),
    "3e ff 10": ("notrack call *(%rax)", "call-mem"),
    "2e ff 15 00 01 00 00": ("cs call *0x100(%rip)", "call-riprel"),
}


@pytest.mark.parametrize("hexbytes", sorted(SEGMENT_CALLS), ids=sorted(SEGMENT_CALLS.values()))
def test_fs_gs_call_through_memory_is_refused(hexbytes):
    got = k(hexbytes)
    assert (got.status, got.kind) == (R.STATUS_SKIP, R.KIND_SKIP)
    assert got.reason.endswith(T.SEGMENT_CALL_REASON) and got.flags & CALL
    code = bytes.fromhex("55 48 89 e5" + hexbytes + "5d c3")
    s = host_summary(code)
    assert s.skipped == 1 and not {"call-mem", "call-riprel"} & set(s.kinds)


@pytest.mark.parametrize("hexbytes", sorted(UNAFFECTED_CALLS), ids=[v[0] for _, v in sorted(UNAFFECTED_CALLS.items())])
def test_other_segment_prefixes_keep_the_call_emulated(hexbytes):
    got = k(hexbytes)
    assert (got.status, got.kind) == (R.STATUS_OK, UNAFFECTED_CALLS[hexbytes][1])
    code = bytes.fromhex("55 48 89 e5" + hexbytes + "5d c3")
    s = host_summary(code)
    assert s.skipped == 0 and s.kinds.get(UNAFFECTED_CALLS[hexbytes][1]) == 1
