"""load/unload for real: kldload and kldunload of modules built for the running kernel.

Runs only on a FreeBSD host, as root, after ``invoke build`` made the
modules for its kernel; it skips, naming which of these is missing,
everywhere else.  The command lines and the error mapping, against a
stand-in for FreeBSD's tools, are tests/unit/test_load.py.
"""

from __future__ import annotations

import io

from generator.run.hostops import Target, load, unload
from helpers import skips


def test_real_load_on_freebsd() -> None:
    """kldload on this host: only on FreeBSD, as root, with a build for the running kernel."""
    skips.require_freebsd_host("the real kldload path")
    skips.require_root("the real kldload path")
    from generator.kmod.build import DEFAULT_OUT
    from generator.run.hostops import running_build_id, run_command

    bid = running_build_id(Target(), run_command)
    if not (DEFAULT_OUT / bid / "kinst.json").is_file():
        skips.missing(f"no build for the running kernel (build/{bid}/): run `invoke build` first")
    assert load(["kinst"], Target(), DEFAULT_OUT, out=io.StringIO()) == 0
    assert unload(["kinst"], Target(), out=io.StringIO()) == 0
