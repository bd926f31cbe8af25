"""The hand-spelled summary JSON line equals the general encoder's, byte for byte."""

from __future__ import annotations

import json

import pytest

from generator.analysis import report, summary

NAMES = ["vm_fault", "sysctl_handle@kern_sysctl.c", 'odd"name\\with\ttab', "caf\u00e9_\u2603", "\x01ctl", ""]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("reason", ["", "excluded by name (dtrace_*): may be called from probe context", "r\u00e9son \"q\""])
def test_summary_json_is_json_dumps(name, reason):
    kinds = {"call-direct": 3, "riprel": 1, "trampoline": 40}
    rec = summary.record(name, 0xFFFFFFFF80A01230, 812, reason, "walk stopped at +0x10" if reason else "", 44,
                          {} if reason else kinds)
    line = report.summary_json(rec)
    assert line == json.dumps(rec, separators=(",", ":"))
    assert json.loads(line) == rec


def test_summary_json_with_no_probes():
    rec = summary.record("f", 0, 1, "", "", 0, {})
    assert report.summary_json(rec) == json.dumps(rec, separators=(",", ":"))
