"""The portable core's one walker of the live jump protocol, ``kinst_core_jump_next()``
(``sys/modules/kinst/amd64/kinst_core_jump.c``), driven through ctypes in the host library that holds the
core (``generator/isa/hostcore.py``).

The Linux guest advances every head to its next SYNC and then makes one ``stop_machine()`` for all of them;
the FreeBSD module runs ``kinst_core_jump_run()``, one site at a time, a rendezvous per SYNC.  Both walk the
same steps through the same function; what is checked here is the walker's contract with a round-based glue,
against the protocol as docs/kinst-module.md ("Jump probes") states it, written out by hand: the steps of
every site up to its SYNC, one sync per round for all sites, a busy quiescence check that ends only that
site's walk, and no sync asked for after the removal's last step.
"""

from __future__ import annotations

import ctypes
import re
from typing import List, Tuple

import pytest

from generator.common.paths import SYS_MODULES

HEADER = SYS_MODULES / "kinst" / "amd64" / "kinst_core_jump.h"
JUMP = bytes([0xE9, 0x11, 0x22, 0x33, 0x44])
ORIG = bytes([0x55, 0x48, 0x89, 0xE5, 0x41])

WRITE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint8), ctypes.c_uint32)
SYNC = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
QUIET = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
VIA = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int)


class JOps(ctypes.Structure):
    """struct kinst_jops."""

    _fields_ = [("jo_write", WRITE), ("jo_sync", SYNC), ("jo_quiet", QUIET), ("jo_via", VIA)]


def define(name: str) -> int:
    """A #define of the core's header: the values the walker returns are the header's, not a copy here."""
    m = re.search(rf"^#define\s+{name}\s+(\d+)", HEADER.read_text(), re.M)
    assert m, f"{name} is not defined in {HEADER}"
    return int(m.group(1))


class Glue:
    """A glue over numbered sites: it logs every step the walker asks for, and says busy for ``busy``."""

    def __init__(self, lib: ctypes.CDLL, busy: Tuple[int, ...] = ()) -> None:
        self.lib, self.busy, self.log = lib, busy, []  # type: ignore[var-annotated]

        def write(ctx, off, src, n):  # type: ignore[no-untyped-def]
            self.log.append(f"w{ctx or 0}@{off}={bytes(src[:n]).hex()}")

        def sync(ctx):  # type: ignore[no-untyped-def]
            self.log.append("sync")

        def quiet(ctx):  # type: ignore[no-untyped-def]
            self.log.append(f"quiet{ctx or 0}")
            return 0 if (ctx or 0) in self.busy else 1

        def via(ctx, where):  # type: ignore[no-untyped-def]
            self.log.append(f"via{ctx or 0}={where}")

        self.ops = JOps(WRITE(write), SYNC(sync), QUIET(quiet), VIA(via))

    def rounds(self, steps: str, nsites: int) -> List[int]:
        """The Linux guest's way: every walking site to its next SYNC, then one sync; the return codes."""
        table = ctypes.c_void_p.in_dll(self.lib, steps)  # the array's first bytes; its address is what counts
        addr = ctypes.addressof(table)
        at = [ctypes.c_uint32(0) for _ in range(nsites)]
        walking, codes = list(range(nsites)), []
        nxt = define("KINST_JUMP_SYNC")
        while walking:
            got = [self.lib.kinst_core_jump_next(ctypes.c_void_p(addr), ctypes.byref(at[site]), JUMP, ORIG,
                                                 ctypes.byref(self.ops), ctypes.c_void_p(site)) for site in walking]
            codes += got
            walking = [site for site, rv in zip(walking, got) if rv == nxt]
            if any(rv in (nxt, define("KINST_JUMP_SYNC_END")) for rv in got):
                self.log.append("sync")
        return codes

    def run(self, steps: str, site: int) -> int:
        """The FreeBSD module's way: kinst_core_jump_run() over one site, its glue syncing per SYNC."""
        addr = ctypes.addressof(ctypes.c_void_p.in_dll(self.lib, steps))
        return self.lib.kinst_core_jump_run(ctypes.c_void_p(addr), JUMP, ORIG, ctypes.byref(self.ops),
                                            ctypes.c_void_p(site))


@pytest.fixture(scope="module")
def lib() -> ctypes.CDLL:
    from generator.common.errors import UserError
    from generator.isa import hostcore

    try:
        return hostcore.host("amd64").lib
    except UserError as e:
        pytest.skip(f"the amd64 host library (the portable core) cannot be built: {e}")


TAIL_JUMP, TAIL_ORIG = JUMP[1:].hex(), ORIG[1:].hex()


def test_rounds_place_every_site_with_one_sync_per_step(lib: ctypes.CDLL) -> None:
    """Placing two sites in rounds: both go to their detour, one sync; both checked and their tails
    written, one sync; both opcodes, one last sync -- three syncs for two sites, not six."""
    g = Glue(lib)
    codes = g.rounds("kinst_jump_place", 2)
    assert g.log == ["via0=1", "via1=1", "sync",
                     "quiet0", f"w0@1={TAIL_JUMP}", "quiet1", f"w1@1={TAIL_JUMP}", "sync",
                     "w0@0=e9", "w1@0=e9", "sync"]
    s, end = define("KINST_JUMP_SYNC"), define("KINST_JUMP_SYNC_END")
    assert codes == [s, s, s, s, end, end]


def test_a_busy_site_stops_alone_with_its_breakpoint(lib: ctypes.CDLL) -> None:
    """Site 1's quiescence check fails: its walk ends there, KINST_E_BUSY, nothing of its jump written (its
    breakpoint stays, sent through the detour); site 0 goes on to its jump."""
    g = Glue(lib, busy=(1,))
    codes = g.rounds("kinst_jump_place", 2)
    assert g.log == ["via0=1", "via1=1", "sync",
                     "quiet0", f"w0@1={TAIL_JUMP}", "quiet1", "sync",
                     "w0@0=e9", "sync"]
    assert codes[3] == define("KINST_E_BUSY") and codes[-1] == define("KINST_JUMP_SYNC_END")


def test_rounds_remove_back_to_the_breakpoint_without_a_last_sync(lib: ctypes.CDLL) -> None:
    """Removing: int3 at both, sync; both original tails, sync; then back to the trampoline, and the walk
    is over without asking for another sync (the guest folds that step into the breakpoints' removal)."""
    g = Glue(lib)
    codes = g.rounds("kinst_jump_remove", 2)
    assert g.log == ["w0@0=cc", "w1@0=cc", "sync", f"w0@1={TAIL_ORIG}", f"w1@1={TAIL_ORIG}", "sync",
                     "via0=0", "via1=0"]
    assert codes[-2:] == [0, 0]


def test_run_is_the_same_walk_one_site_at_a_time(lib: ctypes.CDLL) -> None:
    """kinst_core_jump_run() (the FreeBSD glue's): the same steps for one site, a sync after each SYNC;
    busy stops it at the check."""
    g = Glue(lib)
    assert g.run("kinst_jump_place", 0) == 0
    assert g.log == ["via0=1", "sync", "quiet0", f"w0@1={TAIL_JUMP}", "sync", "w0@0=e9", "sync"]
    g = Glue(lib, busy=(0,))
    assert g.run("kinst_jump_place", 0) == define("KINST_E_BUSY")
    assert g.log == ["via0=1", "sync", "quiet0"]
    g = Glue(lib)
    assert g.run("kinst_jump_remove", 0) == 0
    assert g.log == ["w0@0=cc", "sync", f"w0@1={TAIL_ORIG}", "sync", "via0=0"]
