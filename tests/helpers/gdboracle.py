"""gdb as the oracle: where ``break FILE:LINE`` stops, and what ``print VAR`` shows at an address.

gdb reads DWARF with its own reader (and has its own rules for which
line-table rows a breakpoint goes on), so it is independent of kinstkit's
reader and of LLVM's.  Every call runs ``gdb -nx -batch`` once: for
breakpoints, one ``break`` per spec between ``echo`` markers, each followed
by ``info breakpoints`` (every location of a breakpoint with several) and
``delete``; the output is split at the markers, so a spec gdb rejects
cannot shift the numbering of the others.

``set osabi none``: Debian's gdb takes an x86-64 ELF marked FreeBSD (the
sample kernel) for a 32-bit target and prints its addresses cut to 32 bits.
"""

from __future__ import annotations

import re
import subprocess
from typing import Dict, List, NamedTuple, Sequence

from helpers.skips import require_tool

WHY = "the independent oracle for breakpoint locations and variable values"
_MARK = "@@kinstkit-spec "
_ONE = re.compile(r"^\d+\s+breakpoint\s+keep\s+y\s+(0x[0-9a-f]+)\s+(.*)$")
_MANY = re.compile(r"^\d+\.\d+\s+y\s+(0x[0-9a-f]+)\s+(.*)$")
_WHERE = re.compile(r"(?:in (\S+) )?at (\S+):(\d+)$")


class Location(NamedTuple):
    """One location of a gdb breakpoint."""

    address: int
    function: str  # "" when gdb names none
    file: str  # as gdb prints it (the line table's name)
    line: int


def gdb_command(image: str, commands: Sequence[str], timeout: int = 600) -> str:
    gdb = require_tool("gdb", "gdb", WHY)
    argv = [gdb, "-nx", "-batch", "-ex", "set osabi none", "-ex", "set breakpoint pending off",
            "-ex", "set width 0", "-ex", "set height 0", "-ex", f"file {image}"]
    for c in commands:
        argv += ["-ex", c]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    return proc.stdout


def breakpoints(image: str, specs: Sequence[str]) -> Dict[str, List[Location]]:
    """Every location gdb's ``break SPEC`` gives, per spec ([] when gdb rejects the spec)."""
    commands = []
    for i, spec in enumerate(specs):
        commands += [f"echo {_MARK}{i}\\n", f"break {spec}", "info breakpoints", "delete"]
    out = gdb_command(image, commands)
    found: Dict[str, List[Location]] = {s: [] for s in specs}
    current = None
    for line in out.splitlines():
        if line.startswith(_MARK):
            current = specs[int(line[len(_MARK):])]
            continue
        m = _ONE.match(line) or _MANY.match(line)
        if current is None or not m:
            continue
        where = _WHERE.search(m.group(2))
        if where:
            found[current].append(Location(int(m.group(1), 16), where.group(1) or "", where.group(2),
                                           int(where.group(3))))
    return found
