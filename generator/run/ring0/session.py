"""One ring-0 run: fetch, capture, plan, build, boot with probes, compare -- the VM runner handed in.

    kernel.assets()                       the pinned packages, in the cache
    target.build()                        the target module: the call forms the kernel never runs
    capture boot (cached)                 the module with an empty table reads the live text back and the
                                          workload runs unprobed: the live image and the reference output
    plan.plan_guest()                     the table: the chosen functions, kinst's rules, the kernel's
                                          (and the target module's, from its .ko, with the loader's)
    jumps.choose()                        --jump: the jump probes, from the proof over the vmlinux
    kbuild.build_module()                 the same core and table as kinst.ko, with the Linux glue
    probe boot (QEMU plugin loaded)       arm, workload (re-armed meanwhile), disarm, hits, unload
    report.compare()                      module hits against the plugin's counts, the workload's output
                                          against the unprobed one, the console for oopses

``generator.run`` may not import ``vm/`` (the pipeline's layering), so the
boots go through a ``Booter`` the caller supplies (the command line's,
``generator/cli/linuxguest.py``, over ``vm.run``): ``Boot`` in, ``Booted``
out.  Each boot is a whole vm-test cycle, torn down whatever happens.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import tempfile
import time

from pathlib import Path
from typing import Callable, Optional, Tuple

from ...analysis.plan import ProbePlan
from ...common.errors import UserError
from ...common.paths import CACHE
from ...image.elf import KernelImage
from . import jumps, kbuild, kernel, live, oracle, records, target
from . import plan as guest_plan
from .records import Boot, Booted, Booter, Request, Session
from .report import Report, compare
from .rules import KernelRules, describe, read_rules
from ...image import open_image

__all__ = ["Boot", "Booted", "Booter", "Request", "Session", "WORKLOAD", "capture", "default_functions", "run", "unprobed_boot"]

WORKLOAD = records.WORKLOAD
REFERENCE_DIR = CACHE / "ring0" / "reference"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _files(tmp: Path, mode: str, workload: Path, cycles: int) -> Tuple[Tuple[Path, str], ...]:
    (tmp / "mode").write_text(mode + "\n")
    (tmp / "cycles").write_text(f"{cycles}\n")
    return ((tmp / "mode", "mode"), (tmp / "cycles", "cycles"), (workload, "workload.sh"))


def _module_dir(tmp: Path, ko: Path, target_ko: KernelImage, name: str) -> Path:
    """The guest's modules: kinst.ko, and the target module, which the guest loads first."""
    d = tmp / name
    d.mkdir()
    shutil.copyfile(ko, d / "kinst.ko")
    shutil.copyfile(target_ko.path, d / target.MODULE)
    return d


def _text_base(b: Booted) -> int:
    """The target module's live .text address, as the guest saved it (0 when it did not: then the report
    says the target's probes were not placed)."""
    f = b.out / "target-text"
    try:
        return int(f.read_text().strip(), 16) if f.is_file() else 0
    except ValueError:
        return 0


def _check_boot(b: Booted, what: str) -> None:
    if b.status != "pass":
        raise UserError(f"the {what} boot did not pass ({b.end}): {'; '.join(b.failed[:3]) or b.status}; "
                        f"console: {b.console_log}")


def unprobed_boot(r: Request, booter: Booter, a: kernel.KernelAssets, vmlinux: KernelImage, target_ko: KernelImage,
                  tmp: Path) -> Booted:
    """The guest with the module on an empty table: the live text read back, the workload run unprobed."""
    ko = kbuild.build_module(a, vmlinux, guest_plan.empty_plan(vmlinux), kbuild.command_line([]), target_ko,
                             target.probed_range(target_ko)[0])
    return booter.boot(Boot("capture", _module_dir(tmp, ko, target_ko, "capture"),
                            _files(tmp, "capture", r.workload, 0), (), r.cpus, r.memory_mib, max(r.timeout, 300.0),
                            a.image_root, r.keep, r.runs_dir))


def capture(s: Session, booter: Booter, vmlinux: KernelImage, target_ko: KernelImage,
            tmp: Path) -> Tuple[Path, Path]:
    """The live image and the unprobed workload output: from the cache, or from a capture boot.  The
    workload reads the target module's file, so its output is keyed by the module too."""
    r, a = s.request, s.assets
    assert a is not None
    key = live.key(vmlinux.build_id or "", booter.identity(r.cpus))
    image = live.path_for(key)
    reference = REFERENCE_DIR / f"{key}-{target_ko.sha256()[:16]}-{_sha(r.workload)}.out"
    if image.is_file() and reference.is_file():
        return image, reference
    t = time.monotonic()
    b = unprobed_boot(r, booter, a, vmlinux, target_ko, tmp)
    s.capture = b
    s.seconds["capture boot"] = time.monotonic() - t
    _check_boot(b, "capture")
    notes = (b.out / "notes.bin").read_bytes() if (b.out / "notes.bin").is_file() else b""
    if bytes.fromhex(vmlinux.build_id or "00") not in notes:
        raise UserError(f"the guest's kernel does not carry the build-id {vmlinux.build_id} of {vmlinux.path}")
    text = b.out / "text.bin"
    if not text.is_file():
        raise UserError(f"the capture boot wrote no text.bin (see {b.run_dir})")
    live.write_live_image(vmlinux, text.read_bytes(), image)
    REFERENCE_DIR.mkdir(parents=True, exist_ok=True)
    out = b.out / "workload.out"
    tmpref = reference.with_name(f".{reference.name}.{os.getpid()}")
    shutil.copyfile(out, tmpref)
    os.replace(tmpref, reference)
    return image, reference


def run(request: Request, booter: Booter, progress: Callable[[str], None] = lambda _: None,
        tamper: Optional[Callable[[ProbePlan], ProbePlan]] = None) -> Report:
    """One whole ring-0 run (see the module docstring); a UserError for what stops it early.

    ``tamper`` changes the table before the module is built: the tests break the core's input on purpose
    (a record that hides a displacement or a call), which the core's record check must catch.  The
    request's ``breakage`` builds the glue broken on purpose (``kbuild.BREAKS``); the run must then fail.
    The request's ``jump`` places jump probes where ``jumps.choose()`` proves them."""
    s = Session(request)
    t0 = time.monotonic()
    progress("fetching the pinned Debian kernel packages")
    s.assets = kernel.assets()
    vmlinux = open_image(str(s.assets.vmlinux))
    rules: KernelRules = read_rules(vmlinux)
    s.rules_line = describe(rules)
    lib = oracle.build()
    target_ko = target.build(s.assets)
    s.seconds["fetch and build tools"] = time.monotonic() - t0
    with tempfile.TemporaryDirectory(prefix="kinstkit-ring0-") as tmpname:
        tmp = Path(tmpname)
        progress("capturing the live kernel text (cached after the first run)")
        image_path, reference = capture(s, booter, vmlinux, target_ko, tmp)
        t = time.monotonic()
        progress("planning the table")
        img = open_image(str(image_path))
        s.guest = guest_plan.plan_guest(img, rules, request.functions, request.rule, target_ko)
        if tamper is not None:
            s.guest = dataclasses.replace(s.guest, plan=tamper(s.guest.plan))
            s.notes.append("the table was changed on purpose before the build (a test breaking the core)")
        if s.guest.plan.nprobes == 0:
            raise UserError("no probe left to arm: every chosen function was refused (see the refusals)")
        if request.jump:
            progress("proving jump probes (the vmlinux's image-wide scan)")
            s.jumps = jumps.choose(s.guest.plan, s.guest.target_tabled, s.guest.rule, vmlinux, img)
        s.seconds["plan"] = time.monotonic() - t
        t = time.monotonic()
        progress(f"building the module ({s.guest.plan.nprobes} probes)")
        s.module = kbuild.build_module(s.assets, vmlinux, s.guest.plan, kbuild.command_line(list(request.functions)),
                                       target_ko, target.probed_range(target_ko)[0], request.breakage, s.jumps)
        if request.breakage:
            s.notes.append(f"the glue was built broken on purpose: {kbuild.BREAKS[request.breakage]}")
        s.seconds["build"] = time.monotonic() - t
        probes = list(s.guest.plan.probes())
        theirs = s.guest.target_tabled
        oracle.write_probes(tmp / "probes.txt", [
            oracle.Site(target.range_offset(target_ko, a), True) if p.func < theirs else oracle.Site(a, False)
            for p in probes for a in [s.guest.plan.link_address(p)]])
        counts_file = tmp / "oracle.txt"
        t = time.monotonic()
        progress("booting with every probe armed")
        b = booter.boot(Boot("probe", _module_dir(tmp, s.module, target_ko, "probe"),
                             _files(tmp, "probe", request.workload, request.cycles),
                             tuple(oracle.qemu_args(lib, tmp / "probes.txt", counts_file)), request.cpus,
                             request.memory_mib, request.timeout, s.assets.image_root, request.keep,
                             request.runs_dir))
        s.probe = b
        s.seconds["probe boot"] = time.monotonic() - t
        if counts_file.is_file() and b.run_dir.is_dir():
            shutil.copyfile(counts_file, b.run_dir / "oracle.txt")
        base = _text_base(b)
        addrs = [target.live_address(target_ko, base, a) if p.func < theirs else a
                 for p in probes for a in [s.guest.plan.link_address(p)]]
        firsts = [(target_ko if p.func < theirs else img).read(s.guest.plan.link_address(p), 1)[0] for p in probes]
        rep = compare(s, probes, addrs, counts_file, reference, firsts)
    s.seconds["total"] = time.monotonic() - t0
    return rep


def default_functions(path: Path) -> Tuple[str, ...]:
    """The names in a functions file: one per line, # comments."""
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise UserError(f"{path}: cannot read: {e.strerror}") from None
    return tuple(w for line in lines for w in [line.split("#", 1)[0].strip()] if w)
