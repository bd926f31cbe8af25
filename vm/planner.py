"""``make_plan(cfg)``: every choice of a run made before anything starts.

The backend, the accelerator (and so the time limits), the guest's boot
inputs, the system disk's format, the guest script and the modules are all
decided here, from the request and the host, into one ``Plan``.  A dry run
stops after this and prints the commands the plan gives; nothing here
downloads or builds anything when ``cfg.dry_run`` is set.
"""

from __future__ import annotations

import math
import os
import secrets
import time
from pathlib import Path
from typing import Dict, List, Optional

from .backends import accel as accel_mod
from .backends.probe import kvm_probe
from .backends.qemu import have_qemu_img
from .config import GUESTS, RUNS, Timeouts, VMConfig, VMError, default_modules_dir, resolve_backend
from .images import freebsd, linux, standin
from .metadisk import module_files
from .plan import Plan


def new_run_id(guest: str) -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{guest}-{os.getpid()}-{secrets.token_hex(2)}"


def make_plan(cfg: VMConfig, run_id: Optional[str] = None) -> Plan:
    """Every choice of the run made: backend, accelerator, limits, inputs, paths."""
    spec = GUESTS[cfg.guest]
    backend = resolve_backend(cfg)
    run_id = run_id or new_run_id(cfg.guest)
    runs = Path(cfg.runs_dir) if cfg.runs_dir else RUNS
    run_dir = runs / run_id
    notes: List[str] = []
    kernel = initrd = None
    append = ""
    seed = None
    login = False
    info: Dict[str, object] = {"run_id": run_id, "guest": cfg.guest}

    if cfg.guest == "standin":
        try:
            assets = standin.assets(fetch=not cfg.dry_run)
        except VMError:
            if not cfg.dry_run:
                raise
            assets = standin.StandinAssets(standin.STANDIN / "<kernel>/vmlinux", "vmlinux-pvh",
                                           standin.STANDIN / "initramfs-<hash>.cpio.gz",
                                           standin.STANDIN / "system.raw", "<not downloaded yet>")
            notes.append("the stand-in kernel is not cached yet; a real run downloads and builds it")
        kernel, initrd, base, base_format = assets.kernel, assets.initramfs, assets.system_disk, "raw"
        append = " ".join(filter(None, [assets.append, cfg.extra_append]))
        info["kernel"] = f"{assets.package} ({assets.kernel_kind})"
    elif cfg.guest == "linux":
        la = linux.assets(Path(cfg.image_package or ""), build=not cfg.dry_run)
        if cfg.dry_run and not la.kernel.exists():
            notes.append("the linux guest's vmlinux and initramfs are not made yet; a real run makes them")
        kernel, initrd, base, base_format = la.kernel, la.initramfs, la.system_disk, "raw"
        append = " ".join(filter(None, [la.append, cfg.extra_append]))
        info["kernel"] = f"{la.package} ({la.kernel_kind})"
    else:
        if cfg.release:
            if cfg.dry_run:
                base = freebsd.cached_image(cfg.release, cfg.flavor) or Path(
                    freebsd.IMAGES / cfg.release / Path(freebsd.image_url(cfg.release, cfg.flavor)[0]).name[:-3])
                if not base.exists():
                    notes.append(f"{base.name} is not cached yet: a real run downloads and verifies it (vm-image)")
            else:
                base = freebsd.fetch_image(cfg.release, cfg.flavor, mirror=cfg.mirror)
            login = freebsd.FLAVORS[cfg.flavor].hook == "login"
        else:
            base = Path(cfg.image).resolve()
            login = "BASIC-CI" in base.name
        base_format = freebsd.image_format(base) if base.exists() else "raw"
        seed = run_dir / "seed.iso"
        info["image"] = str(base)

    if backend == "qemu":
        choice = accel_mod.choose(cfg.accel, None if cfg.dry_run else kvm_probe(cfg))
    else:
        choice = accel_mod.AccelChoice("vmm", "bhyve runs on the vmm hypervisor (VT-x/AMD-V)")
    timeouts = Timeouts.for_run(cfg, spec, choice.emulated)
    if cfg.interactive and cfg.timeout is None:
        # vm-shell: the person at the console decides when it ends.
        timeouts = Timeouts(boot=math.inf, run=math.inf, kill_after=cfg.kill_after, panic_grace=cfg.panic_grace)

    overlay_format = "qcow2" if backend == "qemu" and have_qemu_img() else "raw"
    if backend == "qemu" and overlay_format == "raw":
        notes.append("qemu-img not found: the system disk is a sparse copy, not a qcow2 overlay")
    overlay = run_dir / ("system.qcow2" if overlay_format == "qcow2" else "system.raw")

    script = Path(cfg.script) if cfg.script else spec.script
    expect = (Path(cfg.expect) if cfg.expect else None) if cfg.script else spec.expect
    if cfg.modules:
        modules_dir: Optional[Path] = Path(cfg.modules)
    elif spec.wants_modules:
        modules_dir = default_modules_dir()
        if modules_dir is None:
            notes.append("no built modules (build/<kernel-build-id>/*.ko): run `invoke build` or pass --modules; "
                         "the module checks are skipped")
    else:
        modules_dir = None
    modules = tuple(module_files(modules_dir))
    if modules_dir is not None:
        info["modules_dir"] = str(modules_dir)
        info["modules"] = [p.name for p in modules]

    return Plan(
        run_id=run_id, name=f"kinstkit-{run_id.rsplit('-', 2)[-2]}-{run_id.rsplit('-', 1)[-1]}",
        guest=spec, backend=backend, accel=choice, timeouts=timeouts,
        memory_mib=cfg.memory_mib or spec.memory_mib, cpus=cfg.cpus or spec.cpus,
        run_dir=run_dir, base=base, base_format=base_format, overlay=overlay, overlay_format=overlay_format,
        meta=run_dir / "meta.tar", seed=seed, kernel=kernel, initrd=initrd, append=append,
        interactive=cfg.interactive, keep=cfg.keep, console=cfg.console, loader=cfg.loader,
        network=cfg.network, login=login, script=script, expect=expect, modules_dir=modules_dir,
        modules=modules, extra=tuple((Path(s), n) for s, n in cfg.extra), qemu_args=tuple(cfg.qemu_args),
        notes=tuple(notes), info=info,
    )
