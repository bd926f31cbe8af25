"""Text and JSON views of a ``FunctionReport``.

Text is for people: one line per instruction, starting with the probe name a
D script would use (``kinst::vm_fault:4``).  JSON is for programs: one object
per function, each instruction with the ISA's ``struct kinst_probe_md``
fields between its verdict and its branch target.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Iterable, Mapping, Optional

from .records import STATUS_OK, FunctionReport, Probe


def probe_dict(p: Probe) -> Dict[str, Any]:
    return {
        "offset": p.offset,
        "address": p.address,
        "length": p.length,
        "bytes": p.bytes.hex(),
        "mnemonic": p.mnemonic,
        "operands": p.operands,
        "status": p.status,
        "reason": p.reason,
        "kind": p.kind,
        **p.md.to_json(),
        "target": p.target,
        "target_symbol": p.target_symbol,
    }


def function_dict(r: FunctionReport, offset: Optional[int] = None,
                  jumps: Optional[Mapping[int, str]] = None) -> Dict[str, Any]:
    """One function's JSON object; with ``jumps`` (offset -> "" for a proven jump probe, else why it falls
    back to the breakpoint: ``probes --jump``), each probe's ``jump`` and ``jump_reason``."""
    probes: Iterable[Probe] = r.probes
    if offset is not None:
        probes = [p for p in r.probes if p.offset == offset]
    out = []
    for p in probes:
        d = probe_dict(p)
        if jumps is not None and p.offset in jumps:
            d["jump"], d["jump_reason"] = not jumps[p.offset], jumps[p.offset]
        out.append(d)
    return {
        "function": r.qualified,
        "address": r.address,
        "size": r.size,
        "eligible": r.eligible,
        "reason": r.reason,
        "walk_error": r.walk_error,
        "probes": out,
    }


def function_json(r: FunctionReport, offset: Optional[int] = None, jumps: Optional[Mapping[int, str]] = None) -> str:
    return json.dumps(function_dict(r, offset, jumps), separators=(",", ":"))


def _verdict(p: Probe) -> str:
    if p.status == STATUS_OK:
        return p.kind
    return f"SKIP: {p.reason}"


def probe_line(r: FunctionReport, p: Probe) -> str:
    name = f"kinst::{r.name}:{p.offset}"
    asm = f"{p.mnemonic} {p.operands}".strip()
    extra = ""
    if p.target_symbol:
        extra = f" -> {p.target_symbol}"
    return f"{name:<28} {p.bytes.hex(' '):<24} {asm:<40} {_verdict(p)}{extra}"


def function_text(r: FunctionReport, offset: Optional[int] = None, jumps: Optional[Mapping[int, str]] = None) -> str:
    """One line per instruction; with ``jumps`` (as ``function_dict``), each probe's ``jump`` or the reason
    it stays a breakpoint (``trap: ...``)."""
    ok = sum(1 for p in r.probes if p.status == STATUS_OK)
    head = f"{r.qualified} @ {r.address:#x}, {r.size} bytes, {len(r.probes)} instructions, {ok} probes"
    if not r.eligible:
        head += f"\n  function refused: {r.reason}"
    if r.walk_error:
        head += f"\n  WARNING: {r.walk_error}"
    lines = [head]
    for p in r.probes:
        if offset is None or p.offset == offset:
            line = probe_line(r, p)
            if jumps is not None and p.offset in jumps:
                line += "  jump" if not jumps[p.offset] else f"  trap: {jumps[p.offset]}"
            lines.append(line)
    return "\n".join(lines)


def summary_json(rec: Dict[str, Any]) -> str:
    """``json.dumps(rec, separators=(",", ":"))`` of a summary record (``summary.record``)."""
    return summary_json_fields(rec["function"], rec["address"], rec["size"], rec["reason"], rec["walk_error"],
                               rec["instructions"], rec["kinds"])


def summary_json_fields(name: str, address: int, size: int, reason: str, walk_error: str, instructions: int,
                        kinds: Dict[str, int]) -> str:
    """The JSON line of the summary record ``summary.record`` makes of the same arguments, made directly.

    Spelled out: a kernel has 50,000 of these lines, and the general encoder
    cost a sixth of ``probes --all --summary``, the record dicts another
    tenth.  tests/unit/test_report.py holds it equal to ``json.dumps``.
    """
    q = quote
    ok = sum(kinds.values())
    kv = ",".join([f"{q(k)}:{v}" for k, v in kinds.items()])
    return (
        f'{summary_json_head(name, address, size)}'
        f'"eligible":{"false" if reason else "true"},"reason":{q(reason)},'
        f'"walk_error":{q(walk_error)},"instructions":{instructions},"probes":{ok},'
        f'"skipped":{instructions - ok},"kinds":{{{kv}}}}}'
    )


def summary_json_head(name: str, address: int, size: int) -> str:
    """A summary JSON line up to ``"eligible"``: what the host library's line ends (``kk_summary_json()``) lack."""
    return f'{{"function":{quote(name)},"address":{address},"size":{size},'


# json's own string escaper (C), as json.dumps uses it with ensure_ascii.
quote = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]


def summary_text(rec: Dict[str, Any]) -> str:
    kinds = " ".join(f"{k}={v}" for k, v in rec["kinds"].items())
    verdict = "eligible" if rec["eligible"] else f"refused: {rec['reason']}"
    line = (
        f"{rec['function']:<32} {rec['address']:#x} {rec['size']:>6}B "
        f"{rec['instructions']:>5} insns {rec['probes']:>5} probes  {verdict}"
    )
    if kinds:
        line += f"  [{kinds}]"
    if rec["walk_error"]:
        line += f"  WARNING: {rec['walk_error']}"
    return line
