"""The accelerators must give exactly the capstone path's summaries.

``summary.fast`` through the C walk (``native``) or iced-x86 (``fast``) and
``summary.from_report`` (capstone, the decoder of record) are compared
function by function on real code nobody here wrote.
"""

from __future__ import annotations

import pytest

from generator.analysis import summary
from generator.image.elf import KernelImage
from generator.isa.amd64 import fast as amd64_fast
from generator.isa.amd64 import native as amd64_native
from generator.analysis.probes import analyse
from helpers.skips import require_system_library


ACCELERATORS = [pytest.param(amd64_native, id="native"), pytest.param(amd64_fast, id="iced")]


def test_native_walk_is_the_amd64_accelerator(sample_kernel):
    assert summary.accelerator(KernelImage.open(str(sample_kernel)).isa) is amd64_native


def _mismatches(path: str, rule: str = "any", limit: int = 0, accel=amd64_fast):
    img = KernelImage.open(path)
    isa = img.isa
    funcs = img.functions()
    if limit:
        funcs = funcs[:limit]
    bad = []
    for f in funcs:
        fast = summary.fast(img, f, rule, isa, accel)
        slow = summary.from_report(analyse(img, f, rule, isa))
        if fast != slow:
            bad.append((f.name, fast, slow))
    return len(funcs), bad


def _lib(name: str) -> str:
    return str(require_system_library(name))


@pytest.mark.parametrize("accel", ACCELERATORS)
@pytest.mark.parametrize("lib", ["libz.so.1", "libcrypto.so.3"])
def test_accelerator_agrees_on_system_libraries(lib, accel):
    n, bad = _mismatches(_lib(lib), accel=accel)
    assert n > 50
    assert not bad, bad[:3]


@pytest.mark.parametrize("accel", ACCELERATORS)
def test_accelerator_agrees_with_first_byte_rule(accel):
    n, bad = _mismatches(_lib("libz.so.1"), rule="first", accel=accel)
    assert not bad, bad[:3]


@pytest.mark.parametrize("accel", ACCELERATORS)
def test_accelerator_agrees_on_sample_kernel(sample_kernel, accel):
    n, bad = _mismatches(str(sample_kernel), accel=accel)
    assert n > 20
    assert not bad, bad[:3]


def test_accelerator_agrees_on_debian_kernel_modules(debian_modules):
    """Summaries and table records both, from one capstone analysis per function (modules are many)."""
    from generator.analysis.plan import plan_function

    total = masked = 0
    for ko in debian_modules:
        img = KernelImage.open(str(ko))
        isa = img.isa
        for f in img.functions():
            rep = analyse(img, f, "any", isa)
            slow = summary.from_report(rep)
            assert summary.fast(img, f, "any", isa, amd64_fast) == slow, (ko.name, f.name)
            assert summary.fast(img, f, "any", isa, amd64_native) == slow, (ko.name, f.name)
            fast = plan_function(img, f, "any", amd64_fast)
            assert fast == plan_function(img, f, "any", None, rep), (ko.name, f.name)
            masked += any(b >> 4 == 15 for b in fast.records)
            total += 1
    assert total > 500 and masked > 100


def test_summary_counts_every_kind_and_refusal(sample_kernel):
    """The summary is not vacuous: the sample's zoo shows refusals and emulation kinds."""
    img = KernelImage.open(str(sample_kernel))
    isa = img.isa
    kinds, skipped = set(), 0
    for f in img.functions():
        rec = summary.fast(img, f, "any", isa, amd64_fast)
        kinds.update(rec["kinds"])
        skipped += rec["skipped"]
    assert skipped > 0
    assert {"trampoline", "riprel", "call-direct", "call-reg", "call-mem", "jcc-widen", "jmp-rel32"} <= kinds


# -- the table records of generate --all ----------------------------------------


def _plan_mismatches(path: str, rule: str = "any"):
    """Functions whose plan (records, digest, refusals) differs between the accelerator and capstone."""
    from generator.analysis.plan import plan_function

    img = KernelImage.open(path)
    bad = []
    funcs = img.functions()
    for f in funcs:
        fast = plan_function(img, f, rule, amd64_fast)
        slow = plan_function(img, f, rule, None)
        if fast != slow:
            bad.append((f.name, fast, slow))
    return len(funcs), bad


@pytest.mark.parametrize("lib", ["libz.so.1", "libcrypto.so.3"])
def test_table_records_agree_on_system_libraries(lib):
    n, bad = _plan_mismatches(_lib(lib))
    assert n > 50 and not bad, bad[:2]


def test_table_records_agree_on_sample_kernel(sample_kernel):
    n, bad = _plan_mismatches(str(sample_kernel))
    assert n > 20 and not bad, bad[:2]
