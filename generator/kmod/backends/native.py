"""Compile and link one module on FreeBSD: ``make`` with ``bsd.kmod.mk``, as the module's Makefile says.

On a FreeBSD host the module is built exactly as FreeBSD builds it: ``make
SYSDIR=<tree>`` in ``sys/modules/<m>/``, with ``MAKEOBJDIR`` pointing the
objects outside the source tree.  Nothing is spelled out here; ``make -V``
is asked afterwards for the flags and tools it used, expanded, so the
manifest records them just as a cross build's are recorded.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Dict, List

from ...common.errors import UserError
from ...common.host import on_freebsd
from ...common.tools import Runner, checked, tool_version
from ...providers.contract import Provider
from ..objdir import Built, fresh, headers_read
from .contract import Backend, Job

# What the manifest needs from make after the build.  "-V NAME" prints the
# raw value; "-V ${NAME}" the expanded one (make(1)).
_QUERIED = ("KMOD", "CFLAGS", "LDFLAGS", "CC", "LD", "MAKE_VERSION")


def native_build(make: str, provider: Provider, srcdir: Path, objdir: Path, sysdir: Path, run: Runner) -> Built:
    """``make`` with bsd.kmod.mk in the module directory; the objects go to ``objdir`` (MAKEOBJDIR)."""
    fresh(objdir)
    env = dict(os.environ, MAKEOBJDIR=str(objdir))
    makeargs = [f"SYSDIR={sysdir}"]
    argv = [make, *makeargs]
    checked(run, argv, f"{provider.name}: make (bsd.kmod.mk)", cwd=srcdir, env=env)
    values = _make_values(make, makeargs, provider, srcdir, env, run)
    kmod = values["KMOD"].strip() or provider.name
    ko = objdir / f"{kmod}.ko"
    if not ko.is_file():
        raise UserError(f"{provider.name}: make succeeded but wrote no {ko}")
    cc = _first_word(values["CC"], "cc")
    ld = _first_word(values["LD"], "ld")
    return Built(
        ko_built=ko,
        commands=[argv],
        cflags=shlex.split(values["CFLAGS"]),
        ldflags=shlex.split(values["LDFLAGS"]),
        tools={**{t: tool_version(t) for t in (cc, ld)},
               make: f"bmake {values['MAKE_VERSION'].strip() or '(unknown)'}"},
        headers=headers_read(objdir, sorted(objdir.glob(".depend.*"))),  # bsd.dep.mk's dependency files
        profile={"sysdir": str(sysdir), "source": "make -V (bsd.kmod.mk on this host)"},
        mode="native (make with bsd.kmod.mk)",
    )


def _make_values(make: str, makeargs: List[str], provider: Provider, srcdir: Path, env: Dict[str, str],
                 run: Runner) -> Dict[str, str]:
    """The ``_QUERIED`` variables as the module's Makefile expands them ("" for a line make did not print)."""
    query = [make, *makeargs]
    for name in _QUERIED:
        query += ["-V", "${%s}" % name]
    res = checked(run, query, f"{provider.name}: make -V", cwd=srcdir, env=env)
    lines = (res.stdout.splitlines() + [""] * len(_QUERIED))[: len(_QUERIED)]
    return dict(zip(_QUERIED, lines))


def _first_word(value: str, default: str) -> str:
    """The program of a ``CC``/``LD`` value such as ``cc -target ...``."""
    words = value.split()
    return words[0] if words else default


def _build(job: Job) -> Built:
    return native_build(job.make, job.provider, job.srcdir, job.objdir, job.sysdir, job.run)


def _unusable() -> str:
    return "" if on_freebsd() else "make with bsd.kmod.mk needs a FreeBSD host; use --backend cross here"


BACKEND = Backend(
    name="native",
    summary="make with bsd.kmod.mk, as FreeBSD builds a module (the default on FreeBSD)",
    needs_profile=False,
    tools=("cc", "ld"),
    default_here=on_freebsd,
    unusable=_unusable,
    build=_build,
)
