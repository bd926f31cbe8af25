"""The independent counter: a QEMU TCG plugin (``plugin_c/kinst_oracle.c``) and what it reports.

The plugin is told the probes' addresses and the two marker encodings and
counts, per probe, the int3 executions at that address between the module's
arm and disarm markers (``inside``), anything else executed there inside
them (``other``), int3 executions there outside them (``stray``), and the
executions of a ``jmp rel32`` there inside and outside them (``jumps``,
``jumps_out``: a jump probe's jump, or an original jmp rel32).  It
shares no code with the module; the marker values are owned here and
rendered into the module's ``kinst_linux_target.h``.  The target module's
probes are given relative to a third marker, the anchor, which that module
runs when it loads at the start of its probed code (``target.py``; the
kernel decides where a module lands, and not the same way in every boot).

Its one input from QEMU is the plugin API header, ``qemu-plugin.h``, from
Debian's qemu source package (``packages.QEMU_SOURCE``, the version of the
installed QEMU).  The library is built with gcc, cached by content
(``generator.common.ccache``).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, NamedTuple, Sequence

from ...common.ccache import compile_cached, content_key
from ...common.errors import UserError
from ...common.paths import CACHE
from ...common.tools import checked, run_tool, tool_version
from . import packages

SOURCE = Path(__file__).resolve().parent / "plugin_c" / "kinst_oracle.c"
LIB_NAME = "libkinst_oracle.so"
BUILD_DIR = CACHE / "ring0" / "oracle"
CFLAGS = ("-std=gnu11", "-O2", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror")

# The disp32 of the module's marker instructions ("nopl DISP(%rax)"): "kArm" and "kDis" in ASCII, values no
# compiler writes as a displacement of a long nop (their padding uses disp 0).
MARK_ARM = 0x6d72416b
MARK_DISARM = 0x7369446b
MARK_ANCHOR = 0x7467546b  # "kTgt"


class Site(NamedTuple):
    """Where the plugin counts one probe."""

    address: int  # absolute, or from the anchor
    relative: bool  # True: ``address`` is an offset from the anchor marker


def build() -> Path:
    """The plugin library, built once per content of its source, the header and the compiler."""
    cc = shutil.which("gcc")
    if cc is None:
        raise UserError("gcc not found: the QEMU plugin is built with it (apt-get install gcc)")
    header = packages.fetch_source_member(packages.QEMU_SOURCE)
    parts = [SOURCE.read_bytes(), header.read_bytes(), " ".join(CFLAGS), tool_version("gcc")]

    def make(out: Path) -> None:
        shutil.copyfile(header, out / header.name)
        shutil.copyfile(SOURCE, out / SOURCE.name)
        checked(run_tool, [cc, *CFLAGS, "-I.", "-o", LIB_NAME, SOURCE.name], "building the QEMU plugin", out)

    return compile_cached(BUILD_DIR, content_key(parts), make, marker=LIB_NAME) / LIB_NAME


def qemu_args(lib: Path, probes_file: Path, out_file: Path) -> List[str]:
    """QEMU's switches that load the plugin (QEMU 7.2's -plugin syntax: file=,name=value...)."""
    return ["-plugin", f"{lib},probes={probes_file},out={out_file},arm={MARK_ARM},disarm={MARK_DISARM},"
                       f"anchor={MARK_ANCHOR}"]


def write_probes(path: Path, sites: Sequence[Site]) -> None:
    """The plugin's probes file: one address per line ("+offset" from the anchor), in table order (the plugin
    reports in that order)."""
    path.write_text("".join(f"{'+' if s.relative else ''}{s.address:x}\n" for s in sites))


@dataclass(frozen=True)
class Counts:
    """What the plugin counted, per probe in table order."""

    windows: int  # arm markers executed
    unpaired: int  # a marker out of turn (arm while armed, disarm while disarmed)
    open: bool  # the run ended inside a window (never disarmed)
    anchors: int  # places the anchor marker was seen at (the target module's loads)
    inside: List[int]  # int3 executions inside a window
    other: List[int]  # other executions inside a window
    stray: List[int]  # int3 executions outside every window
    jumps: List[int]  # jmp rel32 (0xe9) executions inside a window
    jumps_out: List[int]  # jmp rel32 executions outside every window
    last: Dict[int, int]  # vCPU -> the probe whose breakpoint it ran last (names the probe before a crash)


def read_counts(path: Path, entries: int) -> Counts:
    """The plugin's report; a UserError when it is missing or does not have ``entries`` probes."""
    if not path.is_file():
        raise UserError(f"{path}: the QEMU plugin wrote no counts (QEMU did not exit normally)")
    head, rows, last = {}, [], {}
    for line in path.read_text().splitlines():
        words = line.split()
        if len(words) == 3 and words[0] == "last":
            last[int(words[1])] = int(words[2])
        elif len(words) == 2:
            head[words[0]] = int(words[1])
        elif len(words) == 6:
            rows.append([int(w) for w in words])
    if len(rows) != entries or any(r[0] != i for i, r in enumerate(rows)):
        raise UserError(f"{path}: {len(rows)} probe lines, expected {entries} in order")
    return Counts(head.get("windows", 0), head.get("unpaired", 0), bool(head.get("open", 0)), head.get("anchors", 0),
                  [r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows], [r[4] for r in rows],
                  [r[5] for r in rows],
                  {c: i for c, i in last.items() if 0 <= i < entries})
