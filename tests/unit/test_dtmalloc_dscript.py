"""D scripts: generated for dtmalloc, and parsed.

``generator.dscript.syntax.check`` is a parser for the D subset the templates use;
the tests first show it rejects broken D (so that its passing means
something), then run the dtmalloc script kinds, which need no kernel,
through it.  The scripts checked against a kernel (a dtmalloc type, kinst's
probes) and dtrace -e, the real judge, are
tests/toolchain/test_dscript_kernels.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from generator.dscript.scripts import d_function_part
from generator.dscript.syntax import DSyntaxError, check
from helpers.dtmalloc_fixtures import dscript, run_cli

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


def test_checker_accepts_good_d() -> None:
    assert check(GOOD) == 2


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_checker_rejects_broken_d(name: str) -> None:
    with pytest.raises(DSyntaxError, match=r"^(line \d+|end of input)"):
        check(BROKEN[name])


def test_dtmalloc_count_all_types() -> None:
    text = dscript("dtmalloc-count")
    assert check(text) == 3
    assert text.startswith("#!/usr/sbin/dtrace -s\n/*-\n * SPDX-License-Identifier: BSD-2-Clause\n")
    assert "\ndtmalloc:::malloc\n" in text and "\ndtmalloc:::free\n" in text
    assert "@mallocs[probefunc] = count();" in text


def test_dtmalloc_sizes_one_type_by_description() -> None:
    text = dscript("dtmalloc-sizes", "--type", "BIO buffer")
    assert check(text) == 2
    assert "\ndtmalloc::BIO_buffer:malloc\n" in text and "quantize(arg3)" in text


def test_type_names_become_safe_globs() -> None:
    assert d_function_part(b"IpFw/IpAcct") == "IpFw?IpAcct"
    assert d_function_part(b"proc-args") == "proc-args"
    text = dscript("dtmalloc-count", "--type", "IpFw/IpAcct")
    assert "dtmalloc::IpFw?IpAcct:malloc" in text and check(text) == 3


def test_out_writes_an_executable_script(tmp_path: Path) -> None:
    out = tmp_path / "count.d"
    res = run_cli("dscript", "dtmalloc-count", "--out", str(out))
    assert res.returncode == 0 and res.stdout == ""
    assert os.access(out, os.X_OK) and check(out.read_text()) == 3
