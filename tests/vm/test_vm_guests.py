"""The VM runner's host side where it needs a guest's inputs or plays a whole guest run.

What test_vm_host.py in the unit tier cannot do without VM tooling: the KVM
probe (QEMU and the stand-in's kernel), the stand-in guest's assets (Debian's
linux-image package, busybox-static), the FreeBSD guest's cloud-init seed ISO
(xorriso), the stand-in initramfs's newc format read back by cpio, and whole
bhyve runs through the real runner with stand-in bhyve tools (root, and the
seed ISO).  Each input that can be missing skips with a reason that names it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import vm
from vm.backends import accel, bhyve
from vm.backends.probe import kvm_probe
from vm.config import VMConfig
from vm.images import freebsd, standin
from helpers.guest import USER_DATA
from helpers.skips import missing, require_qemu, require_root, require_seed_tool, require_standin_assets, require_tool


# --- accelerator ---------------------------------------------------------------------


def test_kvm_probe_catches_an_emulated_kvm():
    """Where /dev/kvm exists without vmx/svm (kvm_pvm), the probe itself must see the guest crawl."""
    if not os.path.exists("/dev/kvm") or accel.cpu_flags() & {"vmx", "svm"}:
        missing("needs a /dev/kvm without vmx/svm in the CPU flags (an emulated, nested KVM)")
    require_qemu()
    require_standin_assets()  # the probe boots the stand-in's kernel
    ok, seconds, detail = kvm_probe(VMConfig())(accel.PROBE_SECONDS)  # as long as the runner's own probe waits
    assert not ok, f"the stand-in booted under this KVM in {seconds:.1f} s"
    print(f"probe under kvm: no marker in {seconds:.1f} s ({detail})")


# --- the cloud-init seed --------------------------------------------------------------


def test_seed_iso(tmp_path):
    require_seed_tool()
    iso = freebsd.make_seed(tmp_path / "seed.iso", "run-1")
    data = iso.read_bytes()
    # ISO 9660 primary volume descriptor at 32 KiB: type 1, "CD001", volume id at +40.
    pvd = data[0x8000:0x8800]
    assert pvd[0] == 1 and pvd[1:6] == b"CD001"
    assert pvd[40:72].decode().strip() == "cidata"
    if shutil.which("xorriso"):
        out = tmp_path / "x"
        subprocess.run(["xorriso", "-osirrox", "on", "-indev", str(iso), "-extract", "/", str(out)],
                       check=True, capture_output=True)
        assert (out / "user-data").read_bytes() == USER_DATA.read_bytes()
        assert "instance-id: kinstkit-run-1" in (out / "meta-data").read_text()


# --- the stand-in's inputs ---------------------------------------------------------------


def test_newc_archive_read_by_cpio(tmp_path):
    entries = [("bin", 0o040755, b""), ("bin/tool", 0o100755, b"#!/bin/sh\necho x\n"), ("odd", 0o100644, b"abc")]
    data = standin.newc(entries)
    assert standin.newc(entries) == data  # deterministic
    assert [(n, m, b) for n, m, b in standin.read_newc(data)] == entries
    require_tool("cpio", "cpio", "cpio is the independent reader of the archive")
    listing = subprocess.run(["cpio", "-it", "--quiet"], input=data, capture_output=True, check=True).stdout.decode()
    assert listing.split() == ["bin", "bin/tool", "odd"]
    subprocess.run(["cpio", "-idm", "--quiet"], input=data, cwd=tmp_path, check=True, capture_output=True)
    assert (tmp_path / "bin" / "tool").read_text() == "#!/bin/sh\necho x\n"
    assert os.access(tmp_path / "bin" / "tool", os.X_OK)


def test_standin_assets():
    """The kernel package's bzImage holds a PVH vmlinux; the modules come in dependency order."""
    a = require_standin_assets()
    assert a.kernel_kind == "vmlinux-pvh" and a.kernel.read_bytes()[:4] == b"\x7fELF"
    order = [line for line in (a.kernel.parent / "modules" / "load-order").read_text().split()]
    assert order.index("virtio_ring.ko") < order.index("virtio.ko") < order.index("virtio_pci.ko")
    assert order[-1] in ("virtio_blk.ko", "virtio_pci.ko")
    import gzip

    names = [n for n, _, _ in standin.read_newc(gzip.decompress(a.initramfs.read_bytes()))]
    assert {"init", "bin/busybox", "lib/modules/load-order", "lib/modules/virtio_blk.ko"} <= set(names)
    assert a.system_disk.read_bytes().startswith(standin.SYSTEM_DISK_MAGIC)
    assert not os.access(a.system_disk, os.W_OK) or os.geteuid() == 0


# --- a whole bhyve run, through the real runner, with stand-in bhyve tools ----------------

_FAKE_BHYVE = textwrap.dedent(
    """\
    #!{python}
    # Stand-in bhyve: plays a FreeBSD guest that finds the meta disk (slot 3), runs
    # nothing, writes the results back into it and exits with $FAKE_BHYVE_EXIT.
    import io, os, sys, tarfile
    log = os.environ["FAKE_BHYVE_LOG"]
    open(log, "a").write("bhyve " + " ".join(sys.argv[1:]) + "\\n")
    meta = next(a.split(",", 2)[2] for a in sys.argv if a.startswith("3:0,virtio-blk,"))
    print("Consoles: serial port\\nKDB: debugger backends: ddb\\nKDB: current backend: ddb", flush=True)
    if os.environ.get("FAKE_BHYVE_PANIC"):
        print("panic: page fault\\ncpuid = 1\\nKDB: stack backtrace:", flush=True)
        sys.exit(0)
    print("@@kinstkit hook-start uptime=9", flush=True)
    buf = io.BytesIO()
    with tarfile.open(meta) as src, tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as dst:
        for m in src:
            dst.addfile(m, src.extractfile(m) if m.isfile() else None)
        for name, body in (("out/checks.tsv", "dtrace-load\\tpass\\t0\\t\\n"), ("out/script.status", "0\\n"),
                           ("out/script.log", "ok\\n"), ("out/dtrace-load.out", "")):
            ti = tarfile.TarInfo(name); ti.size = len(body); dst.addfile(ti, io.BytesIO(body.encode()))
    with open(meta, "r+b") as f:
        f.write(buf.getvalue())
    print("@@kinstkit script-exit 0\\n@@kinstkit results-written", flush=True)
    sys.exit(int(os.environ.get("FAKE_BHYVE_EXIT", "1")))
    """
)


@pytest.fixture
def fake_bhyve(tmp_path, monkeypatch):
    require_seed_tool()  # the FreeBSD run needs its seed ISO
    require_root("the bhyve backend")
    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    log = tmp_path / "tools.log"
    (bindir / "bhyve").write_text(_FAKE_BHYVE.replace("{python}", sys.executable))
    (bindir / "bhyvectl").write_text(f'#!/bin/sh\necho "bhyvectl $*" >> {log}\n')
    (bindir / "bhyveload").write_text(f'#!/bin/sh\necho "bhyveload $*" >> {log}\necho "Booting..."\n')
    for p in bindir.iterdir():
        p.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_BHYVE_LOG", str(log))
    monkeypatch.setattr(bhyve.BhyveBackend, "preflight", lambda self: None)  # kldstat -m vmm
    img = tmp_path / "FreeBSD-14.3-RELEASE-amd64-BASIC-CLOUDINIT-ufs.raw"
    with open(img, "wb") as f:
        f.write(b"pmbr")
        f.truncate(32 << 20)
    img.chmod(0o444)
    mods = tmp_path / "build-id"
    mods.mkdir()
    (mods / "kinst.ko").write_bytes(b"\x7fELF")
    script = tmp_path / "dtrace-load.sh"  # one check, as the stand-in bhyve reports
    script.write_text("#!/bin/sh\n. \"$KINSTKIT_META/lib/checks.sh\"\ncheck dtrace-load kldload dtrace\n")
    return img, mods, log, script


def test_bhyve_run_with_stand_in_tools(fake_bhyve, tmp_path):
    img, mods, log, script = fake_bhyve
    before = hashlib.sha256(img.read_bytes()).hexdigest()
    res = vm.run(VMConfig(guest="freebsd", image=str(img), backend="bhyve", modules=str(mods), script=str(script),
                          runs_dir=str(tmp_path / "runs")))
    assert res.status == "pass", res.text()
    assert res.backend == "bhyve" and res.accel["name"] == "vmm"
    assert res.vm_exit["kind"] == "poweroff"
    calls = log.read_text().splitlines()
    assert [c.split()[0] for c in calls] == ["bhyvectl", "bhyveload", "bhyve", "bhyvectl"]
    assert calls[0].endswith("--destroy") and calls[-1].endswith("--destroy")
    assert "4:0,ahci-cd," in calls[2]
    run_dir = Path(res.run_dir)
    assert sorted(p.name for p in run_dir.iterdir()) == ["bhyve.log", "console.log", "out", "result.json"]
    assert hashlib.sha256(img.read_bytes()).hexdigest() == before


@pytest.mark.parametrize("code, kind", [(3, "triple-fault"), (4, "error"), (0, "reboot")])
def test_bhyve_run_bad_exit(fake_bhyve, tmp_path, monkeypatch, code, kind):
    img, mods, log, script = fake_bhyve
    monkeypatch.setenv("FAKE_BHYVE_EXIT", str(code))
    res = vm.run(VMConfig(guest="freebsd", image=str(img), backend="bhyve", modules=str(mods), script=str(script),
                          runs_dir=str(tmp_path / "runs")))
    assert res.status == "error" and res.vm_exit["kind"] == kind
    assert next(c for c in res.checks if c.name == "vm-exit").status == "error"
    assert log.read_text().splitlines()[-1].endswith("--destroy")


def test_bhyve_run_panic(fake_bhyve, tmp_path, monkeypatch):
    img, mods, log, script = fake_bhyve
    monkeypatch.setenv("FAKE_BHYVE_PANIC", "1")
    res = vm.run(VMConfig(guest="freebsd", image=str(img), backend="bhyve", modules=str(mods), script=str(script),
                          runs_dir=str(tmp_path / "runs")))
    assert res.end == "panic" and res.panic == "panic: page fault"
    assert next(c for c in res.checks if c.name == "panic").status == "fail"
    assert not any(c.name == "panic" and "debugger backends" in c.detail for c in res.checks)
