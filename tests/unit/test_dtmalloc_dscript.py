"""D scripts: generated for dtmalloc and kinst, parsed, and checked by dtrace -e where dtrace exists.

``generator.providers.dsyntax.check`` is a parser for the D subset the templates use;
the tests first show it rejects broken D (so that its passing means
something), then run every script kind through it.  dtrace(1) is the real
judge; it is not installed here, so that test skips and names it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from generator.providers.dscript import d_function_part
from generator.providers.dsyntax import DSyntaxError, check
from helpers.dtmalloc_fixtures import RELEASE_14, Fixtures, assert_one_line_error, run_cli, shared
from helpers.skips import require_tool

GOOD = """#!/usr/sbin/dtrace -s
#pragma D option quiet
dtmalloc::temp:malloc, dtmalloc::temp:free
/arg3 > 64/
{
	@n[probefunc, probename] = count();
	printf("%s %d\\n", probefunc, arg3);
}
END { printa("%s %s %@d\\n", @n); }
"""

BROKEN = {
    "missing semicolon": GOOD.replace("count();", "count()"),
    "unbalanced brace": GOOD.replace("END {", "END "),
    "three-part description": GOOD.replace("dtmalloc::temp:free", "dtmalloc:temp:free"),
    "unknown aggregation": GOOD.replace("count()", "tally()"),
    "printf argument count": GOOD.replace("probefunc, arg3);", "probefunc);"),
    "printa without %@": GOOD.replace("%@d", "%d"),
    "bad pragma": GOOD.replace("#pragma D option quiet", "#pragma quiet"),
    "unknown action": GOOD.replace("printf(", "prinft("),
    "no clause": "#pragma D option quiet\n",
}


@pytest.fixture(scope="module")
def fx(tmp_path_factory: pytest.TempPathFactory) -> Fixtures:
    return shared(tmp_path_factory)


def test_checker_accepts_good_d() -> None:
    assert check(GOOD) == 2


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_checker_rejects_broken_d(name: str) -> None:
    with pytest.raises(DSyntaxError, match=r"^(line \d+|end of input)"):
        check(BROKEN[name])


def _script(*args: str) -> str:
    res = run_cli("dscript", *args)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_dtmalloc_count_all_types() -> None:
    text = _script("dtmalloc-count")
    assert check(text) == 3
    assert text.startswith("#!/usr/sbin/dtrace -s\n")
    assert "\ndtmalloc:::malloc\n" in text and "\ndtmalloc:::free\n" in text
    assert "@mallocs[probefunc] = count();" in text


def test_dtmalloc_sizes_one_type_by_description() -> None:
    text = _script("dtmalloc-sizes", "--type", "BIO buffer")
    assert check(text) == 2
    assert "\ndtmalloc::BIO_buffer:malloc\n" in text and "quantize(arg3)" in text


def test_type_names_become_safe_globs() -> None:
    assert d_function_part(b"IpFw/IpAcct") == "IpFw?IpAcct"
    assert d_function_part(b"proc-args") == "proc-args"
    text = _script("dtmalloc-count", "--type", "IpFw/IpAcct")
    assert "dtmalloc::IpFw?IpAcct:malloc" in text and check(text) == 3


def test_type_checked_against_a_kernel(fx: Fixtures) -> None:
    kernel = str(fx.kernel(*RELEASE_14))
    assert check(_script("dtmalloc-count", "--type", "foo bar", "--kernel", kernel)) == 3
    assert_one_line_error(run_cli("dscript", "dtmalloc-count", "--type", "nosuch", "--kernel", kernel),
                          "no malloc type has the probe name 'nosuch'")


def test_kinst_trace_one_offset(sample_kernel) -> None:
    text = _script("kinst-trace", "--function", "vm_fault", "--offset", "4")
    assert check(text) == 2
    assert "\nkinst::vm_fault:4\n" in text and "regs[R_RSI]" in text


def test_kinst_trace_whole_function(sample_kernel) -> None:
    text = _script("kinst-trace", "--function", "amd64_syscall")
    assert check(text) == 2 and "\nkinst::amd64_syscall:\n" in text


def test_kinst_trace_refuses_what_kinst_cannot_trace(sample_kernel) -> None:
    assert_one_line_error(run_cli("dscript", "kinst-trace", "--function", "vm_fault", "--offset", "3"),
                          "not on an instruction boundary")
    assert_one_line_error(run_cli("dscript", "kinst-trace", "--function", "dtrace_probe"),
                          "kinst refuses the whole function")
    assert_one_line_error(run_cli("dscript", "kinst-trace"), "needs --function")


def test_out_writes_an_executable_script(tmp_path: Path) -> None:
    out = tmp_path / "count.d"
    res = run_cli("dscript", "dtmalloc-count", "--out", str(out))
    assert res.returncode == 0 and res.stdout == ""
    assert os.access(out, os.X_OK) and check(out.read_text()) == 3


@pytest.mark.parametrize("args", [["dtmalloc-count"], ["dtmalloc-sizes", "--type", "temp"],
                                  ["kinst-trace", "--function", "vm_fault", "--offset", "4"]],
                         ids=["count", "sizes", "kinst"])
def test_dtrace_compiles_the_scripts(args, tmp_path: Path) -> None:
    dtrace = require_tool("dtrace", None, "`dtrace -e` validation needs a FreeBSD host's dtrace(1)")
    script = tmp_path / "s.d"
    script.write_text(_script(*args))
    res = subprocess.run([dtrace, "-Z", "-e", "-s", str(script)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
