"""What a run found: one ``Check`` per verdict, and the ``VMResult`` that holds them.

``VMResult`` is the runner's only answer: ``text()`` is what ``vm-test``
prints, ``to_json()`` what ``--json`` prints and ``result.json`` in the run
directory holds (the fields are listed in docs/vm-test.md), and
``exit_status`` the command's exit status.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional


@dataclass
class Check:
    """One verdict of the run."""

    name: str
    status: str  # pass, fail, error or skip
    detail: str = ""
    exit: Optional[int] = None  # the guest command's exit status, where there was one
    output: str = ""  # the command's output (for failures: what went wrong)

    def to_json(self) -> Dict[str, object]:
        return {"name": self.name, "status": self.status, "detail": self.detail, "exit": self.exit,
                "output": self.output}


@dataclass
class VMResult:
    """What a run found: the verdict, per-check results, timings, where the logs are."""

    status: str  # pass, fail or error
    end: str  # poweroff, timeout, boot-timeout, panic, interrupted, vm-exit, error, dry-run
    guest: str
    backend: str
    accel: Dict[str, object]
    run_dir: str
    console_log: str
    timings: Dict[str, Optional[float]]
    checks: List[Check]
    vm_exit: Optional[Dict[str, object]] = None
    panic: Optional[str] = None
    leftovers: List[str] = field(default_factory=list)
    kept: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    commands: List[List[str]] = field(default_factory=list)
    console_tail: List[str] = field(default_factory=list)
    signal: Optional[int] = None  # the signal that interrupted the run

    @property
    def exit_status(self) -> int:
        if self.end == "interrupted":
            return 128 + (self.signal or signal.SIGINT)
        return 0 if self.status == "pass" else 1

    def to_json(self) -> Dict[str, object]:
        return {
            "status": self.status, "end": self.end, "guest": self.guest, "backend": self.backend,
            "accel": self.accel, "run_dir": self.run_dir, "console_log": self.console_log,
            "timings": self.timings, "vm_exit": self.vm_exit, "panic": self.panic,
            "checks": [c.to_json() for c in self.checks], "leftovers": self.leftovers, "kept": self.kept,
            "notes": self.notes, "commands": self.commands, "console_tail": self.console_tail,
            "signal": self.signal,
        }

    def text(self) -> str:
        lines = [f"vm-test {self.guest} ({self.backend}, {self.accel.get('name')}): {self.status.upper()} "
                 f"[{self.end}]"]
        lines.append(f"  accelerator: {self.accel.get('name')}: {self.accel.get('reason')}")
        t = self.timings
        lines.append("  timings: " + ", ".join(f"{k} {v:.2f} s" for k, v in t.items() if v is not None))
        for c in self.checks:
            extra = f" (exit {c.exit})" if c.exit is not None else ""
            lines.append(f"  {c.status.upper():5} {c.name}{extra}{': ' + c.detail if c.detail else ''}")
            if c.status in ("fail", "error") and c.output:
                out = c.output.rstrip("\n").splitlines()
                # a panic reads from its first line; anything else from its end
                for line in (out[:20] if c.name == "panic" else out[-20:]):
                    lines.append(f"        | {line}")
        if self.panic:
            lines.append(f"  panic: {self.panic}")
        for n in self.notes:
            lines.append(f"  note: {n}")
        if self.kept:
            lines.append("  kept: " + ", ".join(self.kept))
        lines.append(f"  console log: {self.console_log}")
        lines.append(f"  result: {Path(self.run_dir) / 'result.json'}")
        if self.status != "pass" and self.console_tail and not any(c.output for c in self.checks if c.status != "pass"):
            lines.append("  console (last lines):")
            lines += [f"        | {line}" for line in self.console_tail[-15:]]
        return "\n".join(lines) + "\n"
