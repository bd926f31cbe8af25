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
    """``[flag, value]``, or nothing when the option was not given."""
    return [flag, str(value)] if value not in (None, "", False) else []


def _many(flag: str, values) -> list:
    """``flag`` once per value of a repeatable (iterable) option."""
    return [w for v in values or [] for w in (flag, str(v))]


def _flag(flag: str, on: bool) -> list:
    return [flag] if on else []


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
    words += _flag("--all", all)
    words += _flag("--json", json)
    words += _opt("--prologue-rule", prologue_rule)
    _gen(c, *words, pty=sys.stdout.isatty())


@task(help={"kernel": "ELF image to check (default: the embedded sample kernel)", "json": "JSON result"})
def verify_decoder(c, kernel=None, json=False):
    """Compare instruction boundaries and direct branch targets with objdump -d."""
    _gen(c, "verify-decoder", *_opt("--kernel", kernel), *_flag("--json", json))


@task(help={"rebuild": "rebuild even when the cached image is current"})
def sample(c, rebuild=False):
    """Build the embedded sample kernel (done automatically on first use) and print its path."""
    _gen(c, "sample", *_flag("--rebuild", rebuild))


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
    words += _flag("--json", json)
    words += _flag("--list", list)
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
    words = ["harness", "--elf", elf] + _many("--function", function)
    words += _flag("--all", all)
    words += _flag("--json", json)
    words += _flag("--verify", verify)
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
    words += _flag("--all", all)
    words += _opt("--out", out)
    for m in module or []:
        words += ["--module", m]
    _gen(c, *words)


@task(
    help={
        "guest": "standin (default) or freebsd (with --image or --release)",
        "image": "FreeBSD VM image to boot (read-only; each run gets an overlay)",
        "release": "FreeBSD release whose official image vm-image fetches, e.g. 14.3-RELEASE",
        "script": "guest script to run instead of the default checks",
        "timeout": "whole-run limit in seconds (default: the guest's, longer under TCG)",
        "keep": "keep the overlay and meta disk in the run directory",
        "json": "print the result as one JSON object",
        "modules": "directory of .ko files (default: build/<kernel-build-id>/; none for the stand-in)",
        "accel": "auto (default: kvm only when it really works), kvm or tcg",
        "dry_run": "print the commands; start nothing",
    }
)
def vm_test(c, guest=None, image=None, release=None, script=None, timeout=None, keep=False, json=False,
            modules=None, accel=None, dry_run=False):
    """Boot a VM, load the built modules, run the dtrace checks, collect results, always tear down."""
    words = ["vm-test"] + _opt("--guest", guest) + _opt("--image", image) + _opt("--release", release)
    words += _opt("--script", script) + _opt("--timeout", timeout) + _opt("--modules", modules) + _opt("--accel", accel)
    words += _flag("--keep", keep)
    words += _flag("--json", json)
    words += _flag("--dry-run", dry_run)
    _gen(c, *words)


@task(
    help={
        "guest": "standin (default) or freebsd (with --image or --release)",
        "image": "FreeBSD VM image to boot",
        "release": "FreeBSD release, e.g. 14.3-RELEASE",
        "modules": "directory of .ko files to put on the meta disk",
        "accel": "auto, kvm or tcg",
    }
)
def vm_shell(c, guest=None, image=None, release=None, modules=None, accel=None):
    """Boot the vm-test VM with its serial console on this terminal (Ctrl-A X quits)."""
    words = ["vm-shell"] + _opt("--guest", guest) + _opt("--image", image) + _opt("--release", release)
    words += _opt("--modules", modules) + _opt("--accel", accel)
    _gen(c, *words, pty=True)


@task(help={"release": "e.g. 14.3-RELEASE", "flavor": "BASIC-CLOUDINIT (default) or BASIC-CI"})
def vm_image(c, release, flavor=None):
    """Download, verify (CHECKSUM.SHA256) and cache an official FreeBSD VM image."""
    _gen(c, "vm-image", "--release", release, *_opt("--flavor", flavor))



@task(
    iterable=["function", "malloc_module", "dep_module", "module_path"],
    help={
        "kernel": "target kernel (default: /boot/kernel/kernel on FreeBSD, else the sample kernel)",
        "sysdir": "the target's FreeBSD sys/ tree (default: /usr/src/sys on FreeBSD, $SYSDIR)",
        "release": "use the sys/ tree and kernel that fetch-release cached, e.g. 14.3-RELEASE",
        "modules": "comma-separated: kinst,dtmalloc (default: both)",
        "target": "target architecture (amd64)",
        "function": "kinst: a function to table (repeatable; default: vm_fault)",
        "all": "kinst: every eligible function",
        "malloc_module": "dtmalloc: a .ko whose malloc types to include (repeatable)",
        "dep_module": "check-ko: a dependency .ko (repeatable)",
        "module_path": "check-ko: a directory of dependency .ko files (repeatable)",
        "out": "build root (default: build/)",
        "src": "where to generate the sources (default: sys/modules/)",
        "cross": "cross-build with clang + ld.lld even on FreeBSD",
    },
)
def build(c, kernel=None, sysdir=None, release=None, modules=None, target=None, function=None, all=False,
          malloc_module=None, dep_module=None, module_path=None, out=None, src=None, cross=False):
    """Generate, compile and link the provider modules into build/<kernel-build-id>/*.ko, then check them."""
    words = ["build"] + _opt("--kernel", kernel) + _opt("--sysdir", sysdir) + _opt("--release", release)
    words += _opt("--modules", modules) + _opt("--target", target) + _opt("--out", out) + _opt("--src", src)
    words += _many("--function", function) + _flag("--all", all)
    words += _many("--malloc-module", malloc_module)
    words += _many("--dep-module", dep_module)
    words += _many("--module-path", module_path)
    words += _flag("--cross", cross)
    _gen(c, *words)


@task(
    help={
        "release": "e.g. 14.3-RELEASE",
        "mirror": "mirror base URL (default: $KINSTKIT_FREEBSD_MIRROR or https://download.freebsd.org)",
        "cache": "cache directory (default: ~/.cache/kinstkit)",
        "dists": "comma-separated sets (default: src.txz,kernel.txz,kernel-dbg.txz)",
        "force": "download again even when the cache is complete",
    }
)
def fetch_release(c, release, mirror=None, cache=None, dists=None, force=False):
    """Download src.txz, kernel.txz, kernel-dbg.txz, verify them against the MANIFEST, unpack into a cache."""
    words = ["fetch-release", "--release", release] + _opt("--mirror", mirror) + _opt("--cache", cache)
    words += _opt("--dists", dists) + _flag("--force", force)
    _gen(c, *words)


@task(
    positional=["file"],
    iterable=["dep_module", "module_path"],
    help={
        "file": "the .ko to check",
        "kernel": "target kernel (default: /boot/kernel/kernel on FreeBSD, else the sample kernel)",
        "dep_module": "a dependency .ko such as dtrace.ko (repeatable)",
        "module_path": "a directory of dependency .ko files (repeatable; default: the kernel's directory)",
        "target": "target architecture (amd64)",
        "json": "one JSON array of reports",
    },
)
def check_ko(c, file, kernel=None, dep_module=None, module_path=None, target=None, json=False):
    """Offline checks of a .ko: ELF type and machine, module metadata, sysinit, undefined symbols."""
    words = ["check-ko", file] + _opt("--kernel", kernel) + _opt("--target", target)
    words += _many("--dep-module", dep_module)
    words += _many("--module-path", module_path)
    words += _flag("--json", json)
    _gen(c, *words)


@task(
    help={
        "host": "ssh destination (user@host); default: this FreeBSD host",
        "vm": "a VM reachable as ssh host NAME",
        "modules": "comma-separated: kinst,dtmalloc (default: both)",
        "build": "the build/<kernel-build-id>/ directory (default: the running kernel's)",
    }
)
def load(c, host=None, vm=None, modules=None, build=None):
    """kldload the built modules after checking the running kernel's build-id against the tables'."""
    _gen(c, "load", *_opt("--host", host), *_opt("--vm", vm), *_opt("--modules", modules), *_opt("--build", build))


@task(help={"host": "ssh destination (user@host)", "vm": "a VM reachable as ssh host NAME",
            "modules": "comma-separated: kinst,dtmalloc (default: both)"})
def unload(c, host=None, vm=None, modules=None):
    """kldunload the modules."""
    _gen(c, "unload", *_opt("--host", host), *_opt("--vm", vm), *_opt("--modules", modules))


@task(
    iterable=["release"],
    help={
        "release": "a FreeBSD release for the matrix (repeatable; default: 14.2-RELEASE, 14.3-RELEASE)",
        "modules": "comma-separated: kinst,dtmalloc (default: both)",
        "out": "output directory (default: .ci/generated/)",
    },
)
def ci_config(c, release=None, modules=None, out=None):
    """Write a GitHub Actions workflow and a Cirrus CI file that build the modules for FreeBSD releases."""
    words = ["ci-config"] + _many("--release", release)
    _gen(c, *words, *_opt("--modules", modules), *_opt("--out", out))


ns = Collection(probes, verify_decoder, sample, bench, test, malloc_types, dscript, harness, generate,
                vm_test, vm_shell, vm_image, build, fetch_release, check_ko, load, unload, ci_config)
