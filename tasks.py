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


@task(
    iterable=["module"],
    help={
        "kernel": "FreeBSD kernel image (default: the embedded sample kernel)",
        "module": "a .ko to include, in load order (repeatable)",
        "json": "one JSON object per type, one per line",
        "list": "the probes as `dtrace -l -P dtmalloc` would list them",
    },
)
def malloc_types(c, kernel=None, module=None, json=False, list=False):
    """List the malloc(9) types, and so the dtmalloc::<type>: probes, of a kernel and its modules."""
    words = ["malloc-types"] + _opt("--kernel", kernel)
    for m in module or []:
        words += ["--module", m]
    words += ["--json"] if json else []
    words += ["--list"] if list else []
    _gen(c, *words)


@task(
    positional=["script"],
    iterable=["module"],
    help={
        "script": "dtmalloc-count, dtmalloc-sizes or kinst-trace",
        "type": "dtmalloc: one malloc type, by short description or probe name (default: all)",
        "function": "kinst-trace: the function to trace",
        "offset": "kinst-trace: one instruction offset (default: every instruction)",
        "kernel": "kinst-trace: image to check against (default: sample kernel); dtmalloc: check --type",
        "module": "dtmalloc: a .ko for the --type check (repeatable)",
        "out": "write the script here (mode 0755) instead of to stdout",
    },
)
def dscript(c, script, type=None, function=None, offset=None, kernel=None, module=None, out=None):
    """Write a ready-to-run D script: dtmalloc counts or sizes, or a kinst trace."""
    words = ["dscript", script] + _opt("--type", type) + _opt("--function", function) + _opt("--offset", offset)
    words += _opt("--kernel", kernel)
    for m in module or []:
        words += ["--module", m]
    words += _opt("--out", out)
    _gen(c, *words)


@task(
    iterable=["function"],
    help={
        "elf": "the program or shared library to probe",
        "function": "a function to probe (repeatable)",
        "all": "every eligible instruction of every function",
        "json": "one JSON object: probes placed, hits, hits per emulation class, refusals, identical runs",
        "verify": "also count with valgrind's callgrind and require equal per-instruction counts",
        "command": "the command as one shell-quoted string (or give it after --: invoke harness ... -- CMD ARGS)",
    },
)
def harness(c, elf, command=None, function=None, all=False, json=False, verify=False):
    """Run a command plain and with every table probe of ELF placed; fail unless the runs are identical."""
    words = ["harness", "--elf", elf] + [w for f in function or [] for w in ("--function", f)]
    words += ["--all"] if all else []
    words += ["--json"] if json else []
    words += ["--verify"] if verify else []
    # invoke hands over the text after -- joined by spaces, so quote inside it as in a shell.
    _gen(c, *words, "--", *shlex.split(command or c.remainder))


@task(
    iterable=["function", "module"],
    help={
        "provider": "kinst (default) or dtmalloc",
        "kernel": "ELF image the table is made from (default: the embedded sample kernel)",
        "function": "kinst: a function to table (repeatable; default: vm_fault)",
        "all": "kinst: every eligible function",
        "out": "output directory (default: sys/modules/<provider>/)",
        "module": "dtmalloc: a .ko whose contents to include (repeatable)",
    },
)
def generate(c, provider=None, kernel=None, function=None, all=False, out=None, module=None):
    """Render a provider module's C sources from templates/ (python -m generator generate)."""
    words = ["generate"] + _opt("--provider", provider) + _opt("--kernel", kernel)
    for f in function or []:
        words += ["--function", f]
    words += ["--all"] if all else []
    words += _opt("--out", out)
    for m in module or []:
        words += ["--module", m]
    _gen(c, *words)


ns = Collection(probes, verify_decoder, sample, bench, test, malloc_types, dscript, harness, generate)
