"""The FreeBSD guest's test script against the dtmalloc listing kinstkit predicts for the sample kernel.

The script runs on the host with fake FreeBSD tools (helpers/guest.py); the
fake dtrace lists the dtmalloc probes of the listing ``generate`` writes for
the embedded sample kernel, so every check of the script's expectations must
pass.  The script's fault handling, which needs no kernel, is in
tests/unit/test_vm_host.py.
"""

from __future__ import annotations

from vm import metadisk
from helpers.guest import FREEBSD_EXPECT, run_freebsd_script


def test_freebsd_guest_script_with_fake_tools(tmp_path, dtmalloc_listing):
    checks, meta = run_freebsd_script(tmp_path, listing=dtmalloc_listing)
    want = [s.name for s in metadisk.parse_expect(FREEBSD_EXPECT.read_text())]
    assert {n: v[0] for n, v in checks.items() if n in want} == {n: "pass" for n in want}
    assert "vm_fault:4 0x" in (meta / "out" / "kinst-vm-fault.out").read_text()
    # dtrace was loaded by itself, never dtraceall
    assert "dtraceall" not in (tmp_path / "state" / "loaded").read_text()
