"""D scripts checked against kernels built here, and by dtrace -e where dtrace exists.

``dscript --kernel`` refuses a type the kernel does not have, and
``kinst-trace`` one kinst cannot trace; both need a kernel built here (the
dtmalloc fixtures with clang, the embedded sample kernel).  dtrace(1) is
the real judge of the D; it is not installed here, so that test skips and
names it.  The D checker itself, and the scripts that need no kernel, are
tests/unit/test_dtmalloc_dscript.py.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from generator.dscript.syntax import check
from helpers.dtmalloc_fixtures import RELEASE_14, Fixtures, assert_one_line_error, dscript, run_cli, shared
from helpers.skips import require_tool


@pytest.fixture(scope="module")
def fx(tmp_path_factory: pytest.TempPathFactory) -> Fixtures:
    return shared(tmp_path_factory)


def test_type_checked_against_a_kernel(fx: Fixtures) -> None:
    kernel = str(fx.kernel(*RELEASE_14))
    assert check(dscript("dtmalloc-count", "--type", "foo bar", "--kernel", kernel)) == 3
    assert_one_line_error(run_cli("dscript", "dtmalloc-count", "--type", "nosuch", "--kernel", kernel),
                          "no malloc type has the probe name 'nosuch'")


def test_kinst_trace_one_offset(sample_kernel) -> None:
    text = dscript("kinst-trace", "--function", "vm_fault", "--offset", "4")
    assert check(text) == 2
    assert "\nkinst::vm_fault:4\n" in text and "regs[R_RSI]" in text


def test_kinst_trace_whole_function(sample_kernel) -> None:
    text = dscript("kinst-trace", "--function", "amd64_syscall")
    assert check(text) == 2 and "\nkinst::amd64_syscall:\n" in text


def test_kinst_trace_refuses_what_kinst_cannot_trace(sample_kernel) -> None:
    assert_one_line_error(run_cli("dscript", "kinst-trace", "--function", "vm_fault", "--offset", "3"),
                          "not on an instruction boundary")
    assert_one_line_error(run_cli("dscript", "kinst-trace", "--function", "dtrace_probe"),
                          "kinst refuses the whole function")
    assert_one_line_error(run_cli("dscript", "kinst-trace"), "needs --function")


@pytest.mark.parametrize("args", [["dtmalloc-count"], ["dtmalloc-sizes", "--type", "temp"],
                                  ["kinst-trace", "--function", "vm_fault", "--offset", "4"],
                                  ["kinst-line", "vm_fault.c:186"], ["kinst-inline", "__curthread"]],
                         ids=["count", "sizes", "kinst", "kinst-line", "kinst-inline"])
def test_dtrace_compiles_the_scripts(args, tmp_path: Path) -> None:
    dtrace = require_tool("dtrace", None, "`dtrace -e` validation needs a FreeBSD host's dtrace(1)")
    script = tmp_path / "s.d"
    script.write_text(dscript(*args))
    res = subprocess.run([dtrace, "-Z", "-e", "-s", str(script)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
