"""What a build backend is: the record ``kmod.build`` picks one of and hands each module to.

A backend turns one module directory into a ``.ko`` in a fresh object
directory and says how (the ``Built`` record the manifest keeps).  Which one
runs is the user's ``--backend`` or the first of the registry that is this
host's default; one that cannot run here says why in one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NamedTuple, Optional, Tuple

from ...common.tools import Runner
from ...providers.contract import Provider
from ..kmodflags import KmodProfile
from ..objdir import Built


class Job(NamedTuple):
    """One module to compile and link."""

    provider: Provider  # the module
    srcdir: Path  # its directory: generated sources beside the hand-written C and Makefile
    objdir: Path  # where the objects and the .ko go; emptied first
    sysdir: Path  # the target's FreeBSD sys/ tree
    profile: Optional[KmodProfile]  # kmod.mk's and kern.mk's flags for the tree (backends with needs_profile)
    make: str  # the make program (backends that run the tree's own make)
    run: Runner  # how commands run (tests pass a recorder)


@dataclass(frozen=True)
class Backend:
    """One way to build a module: ``BACKENDS`` in ``kmod/backends/__init__.py`` lists them."""

    name: str  # --backend NAME, and the manifest's "mode"
    summary: str  # one line for --help
    needs_profile: bool  # True: it needs KmodProfile (it spells out kmod.mk); False: it runs the tree's make
    tools: Tuple[str, ...]  # the programs whose versions the manifest's stamp covers
    default_here: Callable[[], bool]  # whether it is this host's default
    unusable: Callable[[], str]  # "" when it can run on this host, else one line saying why not and what to do
    build: Callable[[Job], Built]  # compile and link one module
