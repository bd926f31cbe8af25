"""What every backend is, and the records it hands the supervisor.

The supervisor (``vm.runner``) knows backends only through ``Backend``: it
runs the ``Stage`` processes in order, reads the console, and asks the
backend what an exit status meant (``VMExit``) and what it must destroy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Protocol

from ..plan import Plan


@dataclass(frozen=True)
class VMExit:
    """How the VM monitor process ended."""

    code: Optional[int]  # exit status; negative: killed by that signal; None: never started
    kind: str  # poweroff, reboot, halt, triple-fault, error, signal, exited, stopped
    ok: bool  # a clean end as far as the monitor can tell
    meaning: str


@dataclass(frozen=True)
class Stage:
    """One process of a run (bhyve has two: bhyveload, then bhyve)."""

    argv: List[str]
    name: str
    console_from_stdout: bool = True  # else the backend opens the console itself (nmdm)
    interactive: bool = False  # the terminal is the console
    is_vm: bool = True  # False for a loader stage whose end does not end the run


class Backend(Protocol):
    """One VM monitor, as the supervisor drives it: prepare, run its stages, clean up."""

    plan: Plan

    def preflight(self) -> None:
        """Refuse, with a VMError, a host that cannot run this plan (before anything is made)."""

    def overlay_command(self) -> Optional[List[str]]:
        """The command that makes the per-run system disk, or None when it is copied."""

    def make_overlay(self) -> None:
        """Make the per-run system disk (and anything else the VM needs first)."""

    def stages(self) -> List[Stage]:
        """The processes of the run, in order."""

    def console_reader(self) -> Optional[int]:
        """A descriptor to read the console from, or None when it is the stage's stdout."""

    def interpret_exit(self, code: Optional[int]) -> VMExit:
        """What the monitor's exit status means."""

    def cleanup(self) -> List[str]:
        """Destroy what the backend made outside the run directory; the problems, as text."""

    def leftovers(self) -> List[str]:
        """What of the backend's still exists after ``cleanup``."""

    def commands_for_display(self) -> List[List[str]]:
        """Every command a run would start, for --dry-run."""
