"""invoke tasks: the user interface.

Every task is a thin wrapper that builds one ``python -m generator`` (or
pytest) command line and runs it; the logic lives in ``generator/``.  Run
``invoke --list`` for the tasks and ``invoke --help TASK`` for their flags.
With no ``--kernel`` the tasks work on the embedded sample kernel.
"""

from __future__ import annotations

import shlex
import sys

from invoke import Collection, task

PY = shlex.quote(sys.executable)


def _gen(c, *words: str, pty: bool = False) -> None:
    args = " ".join(shlex.quote(w) for w in words if w)
    c.run(f"{PY} -m generator {args}", pty=pty)


def _opt(flag: str, value) -> list:
    return [flag, str(value)] if value not in (None, "", False) else []


@task(
    help={
        "kernel": "ELF image: kernel, .ko or shared object (default: the embedded sample kernel)",
        "function": "function name, name@file or 0xADDRESS (default: vm_fault)",
        "offset": "only the instruction at this byte offset",
        "all": "every function of the image",
        "json": "JSON output (one object per line with --all)",
        "prologue_rule": "'any' push %rbp (default, newest kinst) or 'first' (FreeBSD 14.0)",
    }
)
def probes(c, kernel=None, function=None, offset=None, all=False, json=False, prologue_rule=None):
    """List every kinst probe site of a function, with kinst's metadata."""
    words = ["probes"] + _opt("--kernel", kernel) + _opt("--function", function) + _opt("--offset", offset)
    words += ["--all"] if all else []
    words += ["--json"] if json else []
    words += _opt("--prologue-rule", prologue_rule)
    _gen(c, *words, pty=sys.stdout.isatty())


@task(help={"kernel": "ELF image to check (default: the embedded sample kernel)", "json": "JSON result"})
def verify_decoder(c, kernel=None, json=False):
    """Compare instruction boundaries and direct branch targets with objdump -d."""
    _gen(c, "verify-decoder", *_opt("--kernel", kernel), *(["--json"] if json else []))


@task(help={"rebuild": "rebuild even when the cached image is current"})
def sample(c, rebuild=False):
    """Build the embedded sample kernel (done automatically on first use) and print its path."""
    _gen(c, "sample", *(["--rebuild"] if rebuild else []))


@task(
    help={
        "image": "image to analyse (default: the largest libLLVM on this machine)",
        "out": "results directory (default: bench/results)",
    }
)
def bench(c, image=None, out=None):
    """Benchmark whole-image analysis against objdump -d on the same bytes, same run."""
    _gen(c, "bench", *_opt("--image", image), *_opt("--out", out))


@task(help={"k": "pytest -k expression", "slow": "also run tests marked slow (whole corpora)"})
def test(c, k=None, slow=False):
    """Run the test suite."""
    words = [sys.executable, "-m", "pytest", "-q"]
    if k:
        words += ["-k", k]
    if not slow:
        words += ["-m", "not slow"]
    c.run(" ".join(shlex.quote(w) for w in words), pty=sys.stdout.isatty())


ns = Collection(probes, verify_decoder, sample, bench, test)
