"""The VM runner's host side, without a guest or its inputs.

Config defaults and validation, the argv builders of both backends, bhyve's
exit statuses, the meta disk, the console watcher's panic rules, the
accelerator decision, FreeBSD image download and verification against a
loopback HTTP server (good, bad checksum, truncated, missing), the FreeBSD
hook (user-data) run by the host's sh with a tar file for a disk, the
FreeBSD guest script against fake FreeBSD tools, and dry runs.

What needs QEMU, a guest's inputs (the stand-in's kernel, the seed ISO, cpio)
or a whole simulated bhyve run is tests/vm/test_vm_guests.py; the guest
script against the sample kernel's dtmalloc listing is
tests/toolchain/test_vm_guest_script.py.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import pytest

from generator.common.paths import REPO
from vm import metadisk
from vm.backends import accel, bhyve, overlay, qemu
from vm.config import DEFAULTS, GUEST_DIR, GUESTS, VMConfig, VMError, validate
from vm.images import freebsd
from vm.supervise import console, leftovers
from helpers.guest import FAKEBSD, FREEBSD_SCRIPT, USER_DATA, run_freebsd_script


# --- config ------------------------------------------------------------------------


def test_default_vmconfig():
    """The defaults are part of the interface (docs/vm-test.md lists them)."""
    assert DEFAULTS == {
        "guest": "standin", "image": None, "release": None, "flavor": "BASIC-CLOUDINIT", "backend": "auto",
        "accel": "auto", "script": None, "expect": None, "modules": None, "extra": (), "memory_mib": None,
        "cpus": None, "boot_timeout": None, "timeout": None, "kill_after": 5.0, "panic_grace": 0.5,
        "keep": False, "interactive": False, "runs_dir": None, "console": "stdio", "loader": "bhyveload",
        "network": False, "mirror": None, "dry_run": False, "extra_append": "", "image_package": None,
        "qemu_args": (),
    }
    assert GUESTS["standin"].backends == ("qemu",) and GUESTS["linux"].backends == ("qemu",)
    assert GUESTS["linux"].cpus == 2
    assert GUESTS["freebsd"].backends == ("bhyve", "qemu")
    assert GUESTS["freebsd"].tcg_factor > 1 and GUESTS["standin"].tcg_factor > 1


@pytest.mark.parametrize(
    "cfg, message",
    [
        (VMConfig(guest="openbsd"), "unknown guest"),
        (VMConfig(guest="freebsd"), "exactly one of --image PATH and --release R"),
        (VMConfig(guest="freebsd", release="14.3", dry_run=True), "like 14.3-RELEASE"),
        (VMConfig(guest="freebsd", image="/nonexistent.raw"), "no such file"),
        (VMConfig(image="x.raw"), "select a FreeBSD guest"),
        (VMConfig(backend="bhyve", dry_run=True), "cannot run under bhyve"),
        (VMConfig(accel="hvf"), "--accel hvf"),
        (VMConfig(script="/nonexistent.sh"), "--script /nonexistent.sh: no such file"),
        (VMConfig(expect=__file__), "--expect goes with --script"),
        (VMConfig(timeout=10, boot_timeout=20, dry_run=True), "longer than the whole-run"),
        (VMConfig(timeout=-1), "must be positive"),
        (VMConfig(extra=((__file__, "../escape"),)), "must be relative"),
        (VMConfig(extra=((__file__, "run.sh"),)), "reserved"),
    ],
)
def test_validate_rejects(cfg, message):
    with pytest.raises(VMError, match=re.escape(message)):
        validate(cfg)


def test_default_modules_dir_picks_newest_build_with_ko(tmp_path):
    from vm.config import default_modules_dir

    assert default_modules_dir(tmp_path) is None
    (tmp_path / "sample").mkdir()
    (tmp_path / "sample" / "kernel").write_bytes(b"x")
    old, new = tmp_path / "aaaa1111", tmp_path / "bbbb2222"
    for d, t in ((old, 1000), (new, 2000)):
        d.mkdir()
        (d / "kinst.ko").write_bytes(b"\x7fELF")
        os.utime(d / "kinst.ko", (t, t))
    assert default_modules_dir(tmp_path) == new


# --- argv builders -------------------------------------------------------------------


def _plan(tmp_path, **kw):
    from vm.config import Timeouts
    from vm.plan import Plan

    base = dict(
        run_id="20260101-000000-standin-42-beef", name="kinstkit-42-beef", guest=GUESTS["standin"],
        backend="qemu", accel=accel.AccelChoice("tcg", "test"), timeouts=Timeouts(60, 300, 5, 0.5),
        memory_mib=256, cpus=1, run_dir=tmp_path, base=tmp_path / "base.raw", base_format="raw",
        overlay=tmp_path / "system.qcow2", overlay_format="qcow2", meta=tmp_path / "meta.tar",
    )
    base.update(kw)
    return Plan(**base)


def test_qemu_args_standin(tmp_path):
    plan = _plan(tmp_path, kernel=Path("/k/vmlinux"), initrd=Path("/k/initrd.gz"), append="console=ttyS0 panic=-1")
    argv = qemu.qemu_args(plan)
    assert argv[0] == "qemu-system-x86_64"
    assert "-no-reboot" in argv and "-nodefaults" in argv
    assert argv[argv.index("-accel") + 1] == "tcg" and "-cpu" not in argv
    assert argv[argv.index("-kernel") + 1] == "/k/vmlinux"
    assert argv[argv.index("-append") + 1] == "console=ttyS0 panic=-1"
    drives = [argv[i + 1] for i, a in enumerate(argv) if a == "-drive"]
    assert drives == [f"if=none,id=system,format=qcow2,file={tmp_path}/system.qcow2",
                      f"if=none,id=meta,format=raw,file={tmp_path}/meta.tar"]
    assert argv.count("-device") == 2 and "virtio-blk-pci,drive=meta" in argv
    assert argv[argv.index("-serial") + 1] == "stdio" and argv[argv.index("-monitor") + 1] == "none"
    assert qemu.overlay_args(plan) == ["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b",
                                       f"{tmp_path}/base.raw", f"{tmp_path}/system.qcow2"]


def test_qemu_args_freebsd_kvm_and_shell(tmp_path):
    plan = _plan(tmp_path, guest=GUESTS["freebsd"], accel=accel.AccelChoice("kvm", "test"),
                 seed=tmp_path / "seed.iso", interactive=True, memory_mib=2048, cpus=2)
    argv = qemu.qemu_args(plan)
    assert "-kernel" not in argv  # SeaBIOS boots the image
    assert argv[argv.index("-accel") + 1] == "kvm" and argv[argv.index("-cpu") + 1] == "host"
    assert f"if=ide,index=2,media=cdrom,readonly=on,format=raw,file={tmp_path}/seed.iso" in argv
    assert argv[argv.index("-m") + 1] == "2048" and argv[argv.index("-smp") + 1] == "2"
    chardev = argv[argv.index("-chardev") + 1]
    assert chardev.startswith("stdio,") and f"logfile={tmp_path}/console.log" in chardev


def test_bhyve_args(tmp_path):
    plan = _plan(tmp_path, guest=GUESTS["freebsd"], backend="bhyve", accel=accel.AccelChoice("vmm", "test"),
                 overlay=tmp_path / "system.raw", overlay_format="raw", seed=tmp_path / "seed.iso",
                 memory_mib=2048, cpus=2)
    assert bhyve.destroy_args(plan) == ["bhyvectl", "--vm=kinstkit-42-beef", "--destroy"]
    assert bhyve.bhyveload_args(plan) == ["bhyveload", "-c", "stdio", "-m", "2048M", "-d",
                                          f"{tmp_path}/system.raw", "kinstkit-42-beef"]
    argv = bhyve.bhyve_args(plan, tap="tap3")
    assert argv[:5] == ["bhyve", "-c", "2", "-m", "2048M"]
    for flag in ("-A", "-H", "-P"):
        assert flag in argv
    slots = [argv[i + 1] for i, a in enumerate(argv) if a == "-s"]
    assert slots == ["0:0,hostbridge", "1:0,lpc", f"2:0,virtio-blk,{tmp_path}/system.raw",
                     f"3:0,virtio-blk,{tmp_path}/meta.tar", f"4:0,ahci-cd,{tmp_path}/seed.iso,ro",
                     "5:0,virtio-net,tap3"]
    assert argv[-3:] == ["-l", "com1,stdio", "kinstkit-42-beef"]
    uefi = _plan(tmp_path, guest=GUESTS["freebsd"], backend="bhyve", loader="uefi", console="nmdm",
                 overlay=tmp_path / "system.raw", overlay_format="raw")
    uargv = bhyve.bhyve_args(uefi)
    assert f"bootrom,{bhyve.UEFI_FIRMWARE}" in uargv
    unit = bhyve.nmdm_unit(uefi)
    assert f"com1,/dev/nmdm{unit}A" in uargv and bhyve.host_console(uefi) == Path(f"/dev/nmdm{unit}B")
    assert [s.name for s in bhyve.BhyveBackend(uefi).stages()] == ["bhyve"]  # UEFI: no bhyveload
    assert bhyve.tap_create_args() == ["ifconfig", "tap", "create"]
    assert bhyve.tap_destroy_args("tap3") == ["ifconfig", "tap3", "destroy"]


@pytest.mark.parametrize(
    "code, kind, ok",
    [(0, "reboot", False), (1, "poweroff", True), (2, "halt", True), (3, "triple-fault", False),
     (4, "error", False), (7, "error", False), (-9, "signal", False), (None, "error", False)],
)
def test_bhyve_exit_codes(code, kind, ok):
    e = bhyve.interpret_exit(code)
    assert (e.kind, e.ok) == (kind, ok)


def test_qemu_exit_codes():
    assert qemu.interpret_exit(0).ok and not qemu.interpret_exit(1).ok
    assert qemu.interpret_exit(-15).kind == "signal"


# --- meta disk -----------------------------------------------------------------------


def test_meta_disk_roundtrip(tmp_path):
    ko = tmp_path / "mods" / "kinst.ko"
    ko.parent.mkdir()
    ko.write_bytes(b"\x7fELF" + b"\0" * 100)
    (ko.parent / "manifest.json").write_text("{}")
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    meta = tmp_path / "meta.tar"
    names = metadisk.build(meta, metadisk.MetaContents(
        script=script, expect=GUESTS["standin"].expect, modules=tuple(metadisk.module_files(ko.parent)),
        info={"run_id": "x"}))
    assert names[0] == "run.sh"  # the hooks find the disk by the first header
    assert {"lib/checks.sh", "expect.tsv", "modules/kinst.ko", "modules/manifest.json", "auto-shutdown",
            "kinstkit.json"} <= set(names)
    data = meta.read_bytes()
    assert data[257:262] == b"ustar"
    assert len(data) % (1024 * 1024) == 0 and len(data) >= metadisk.MIN_SIZE
    # Nothing came back yet.
    res = metadisk.read_results(meta)
    assert not res.written and res.checks == ()
    # What the guest hook writes back: the tree plus out/, over the same disk.
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, body in (("./out/checks.tsv", "a\tpass\t0\t\nb\tfail\t3\texit status 3, expected 0\n"),
                           ("./out/b.out", "broken\n"), ("./out/script.status", "1\n"), ("./out/script.log", "log\n")):
            ti = tarfile.TarInfo(name)
            ti.size = len(body)
            tar.addfile(ti, io.BytesIO(body.encode()))
    with open(meta, "r+b") as f:
        f.write(buf.getvalue())
    res = metadisk.read_results(meta, save_to=tmp_path / "out")
    assert res.written and res.script_status == 1 and res.script_log == "log\n"
    assert [(c.name, c.verdict, c.exit) for c in res.checks] == [("a", "pass", 0), ("b", "fail", 3)]
    assert res.outputs["b"] == "broken\n" and (tmp_path / "out" / "b.out").read_text() == "broken\n"


@pytest.mark.parametrize(
    "text, message",
    [("a\t0\t-\t-\n", "5 tab-separated"), ("a\tx\t-\t-\t-\n", "not a number"), ("a\t0\t1.5\t-\t-\n", "whole seconds"),
     ("a b\t0\t-\t-\t-\n", "may hold only"), ("a\t0\t-\t(\t-\n", "match pattern"), ("a\t0\t-\t-\t-\na\t0\t-\t-\t-\n", "twice")],
)
def test_expect_specs_rejected(text, message):
    with pytest.raises(VMError, match=re.escape(message)):
        metadisk.parse_expect(text)


def test_shipped_specs_parse():
    for guest in GUESTS.values():
        assert metadisk.parse_expect(guest.expect.read_text(), str(guest.expect))


# --- console -------------------------------------------------------------------------


def test_console_panic_rules():
    assert console.panic_kind("panic: page fault") == "freebsd-panic"
    assert console.panic_kind("[    2.36] Kernel panic - not syncing: sysrq triggered crash") == "linux-panic"
    assert console.panic_kind("KDB: enter: panic") == "freebsd-kdb"
    assert console.panic_kind("KDB: stack backtrace:") == "freebsd-kdb"
    # Every FreeBSD GENERIC boot prints these: not a panic.
    assert console.panic_kind("KDB: debugger backends: ddb") is None
    assert console.panic_kind("KDB: current backend: ddb") is None
    # Guest script output is prefixed by the hooks and never ends a run.
    assert console.panic_kind("| panic: this is what my check printed") is None
    assert console.panic_kind("no panic: here") is None


def test_console_watcher_markers_and_log(tmp_path):
    log = open(tmp_path / "console.log", "wb")
    times = iter(range(100))
    w = console.ConsoleWatcher(log, clock=lambda: float(next(times)))
    transcript = (b"\x1b[2JSeaBIOS\r\nKDB: debugger backends: ddb\r\n@@kinstkit hook-start uptime=2.1\r\n"
                  b"| check a: pass\r\n@@kinstkit script-exit 0\r\n@@kinstkit results-")
    events, _ = w.feed(transcript)
    assert [e.kind for e in events] == ["hook-start", "script-exit"]
    assert events[1].detail == "0"
    events, _ = w.feed(b"written\r\npanic: vm_fault: bad\r\ncpuid = 0\r\n")
    assert [e.kind for e in events] == ["results-written", "panic"]
    assert w.panic_context == ["panic: vm_fault: bad", "cpuid = 0"]
    log.close()
    assert (tmp_path / "console.log").read_bytes().startswith(b"\x1b[2JSeaBIOS")


def test_console_responders_answer_prompts_once():
    w = console.ConsoleWatcher(responders=((re.compile(r"login: $"), b"root\n"), (re.compile(r"# $"), b"sh hook\n")))
    _, replies = w.feed(b"FreeBSD/amd64 (freebsd) (ttyu0)\r\n\r\nlogin: ")
    assert replies == [b"root\n"]
    _, replies = w.feed(b"root\r\nroot@freebsd:~ # ")
    assert replies == [b"sh hook\n"]
    _, replies = w.feed(b"\r\nlogin: ")
    assert replies == []


# --- accelerator ---------------------------------------------------------------------


def _cpuinfo(tmp_path, flags):
    p = tmp_path / "cpuinfo"
    p.write_text(f"processor\t: 0\nflags\t\t: fpu sse2 {flags}\n")
    return p


def test_accel_decisions(tmp_path, monkeypatch):
    monkeypatch.delenv(accel.ENV, raising=False)
    dev = tmp_path / "kvm"
    c = accel.choose("auto", dev=dev, cpuinfo=_cpuinfo(tmp_path, "vmx"), use_cache=False)
    assert c.name == "tcg" and "no " in c.reason
    dev.write_text("")
    c = accel.choose("auto", dev=dev, cpuinfo=_cpuinfo(tmp_path, "lm"), use_cache=False)
    assert c.name == "tcg" and "neither vmx nor svm" in c.reason
    # vmx present but the device is no KVM (a plain file answers no ioctl)
    c = accel.choose("auto", dev=dev, cpuinfo=_cpuinfo(tmp_path, "vmx"), use_cache=False)
    assert c.name == "tcg" and "KVM_GET_API_VERSION" in c.reason
    monkeypatch.setattr(accel, "kvm_api_version", lambda dev=None: 12)
    slow = accel.choose("auto", lambda limit: (False, limit, "no console output"), dev=dev,
                        cpuinfo=_cpuinfo(tmp_path, "svm"), use_cache=False)
    assert slow.name == "tcg" and slow.probed and "did not boot" in slow.reason
    fast = accel.choose("auto", lambda limit: (True, 0.7, "ok"), dev=dev, cpuinfo=_cpuinfo(tmp_path, "vmx"),
                        use_cache=False)
    assert fast.name == "kvm" and fast.probed and fast.probe_seconds == 0.7
    unprobed = accel.choose("auto", lambda limit: None, dev=dev, cpuinfo=_cpuinfo(tmp_path, "vmx"), use_cache=False)
    assert unprobed.name == "kvm" and "not probed" in unprobed.reason
    assert accel.choose("tcg").name == "tcg"
    monkeypatch.setenv(accel.ENV, "tcg")
    assert accel.choose("auto").reason.startswith("forced by")


def test_accel_on_this_machine():
    """/proc/cpuinfo and /dev/kvm of this host: the reason always names the evidence."""
    c = accel.choose("auto", use_cache=False)
    flags = accel.cpu_flags()
    if not flags & {"vmx", "svm"}:
        assert c.name == "tcg", c.reason
    assert c.reason
    print(f"accelerator here: {c.name}: {c.reason}")


# --- FreeBSD images: download and verify against a loopback server ----------------------


class _Mirror:
    """A loopback HTTP server with a FreeBSD-like release tree."""

    def __init__(self, root: Path):
        self.root = root
        self.requests = []
        self.truncate = set()
        mirror = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                mirror.requests.append(self.path)
                path = mirror.root / self.path.lstrip("/")
                if not path.is_file():
                    self.send_error(404)
                    return
                body = path.read_bytes()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.path in mirror.truncate:
                    self.wfile.write(body[: len(body) // 2])  # then hang up: fewer bytes than announced
                    self.close_connection = True
                    return
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def publish(self, release, raw: bytes, flavor="BASIC-CLOUDINIT", checksum=None, listed=True):
        url, directory = freebsd.image_url(release, flavor, self.url)
        rel = Path(url[len(self.url) + 1:])
        (self.root / rel).parent.mkdir(parents=True, exist_ok=True)
        xz = lzma.compress(raw)
        (self.root / rel).write_bytes(xz)
        digest = checksum or hashlib.sha256(xz).hexdigest()
        lines = [f"SHA256 (FreeBSD-other.raw.xz) = {'0' * 64}"]
        if listed:
            lines.append(f"SHA256 ({rel.name}) = {digest}")
        (self.root / rel.parent / "CHECKSUM.SHA256").write_text("\n".join(lines) + "\n")
        return "/" + rel.as_posix()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def mirror(tmp_path):
    m = _Mirror(tmp_path / "www")
    yield m
    m.close()


def test_fetch_image_good_then_cached(mirror, tmp_path):
    raw = b"FreeBSD disk image" + bytes(range(256)) * 64
    mirror.publish("14.3-RELEASE", raw)
    cache = tmp_path / "cache"
    path = freebsd.fetch_image("14.3-RELEASE", mirror=mirror.url, cache=cache)
    assert path.name == "FreeBSD-14.3-RELEASE-amd64-BASIC-CLOUDINIT-ufs.raw"
    assert path.read_bytes() == raw
    assert not os.access(path, os.W_OK) or os.geteuid() == 0  # stored read-only (root may write anyway)
    assert oct(path.stat().st_mode & 0o777) == "0o444"
    record = json.loads(path.with_suffix(".verified.json").read_text())
    assert record["algorithm"] == "sha256" and record["url"].endswith(".raw.xz")
    n = len(mirror.requests)
    assert freebsd.fetch_image("14.3-RELEASE", mirror=mirror.url, cache=cache) == path
    assert len(mirror.requests) == n  # served from the cache


def test_fetch_image_bad_checksum(mirror, tmp_path):
    mirror.publish("14.3-RELEASE", b"image", checksum="ab" * 32)
    with pytest.raises(freebsd.DownloadError, match="bad checksum"):
        freebsd.fetch_image("14.3-RELEASE", mirror=mirror.url, cache=tmp_path / "cache")
    assert not any(p.is_file() for p in (tmp_path / "cache").rglob("*"))


def test_fetch_image_truncated(mirror, tmp_path):
    path = mirror.publish("14.3-RELEASE", os.urandom(200_000))
    mirror.truncate.add(path)
    with pytest.raises(freebsd.DownloadError, match="truncated"):
        freebsd.fetch_image("14.3-RELEASE", mirror=mirror.url, cache=tmp_path / "cache")
    assert not any(p.is_file() for p in (tmp_path / "cache").rglob("*"))


def test_fetch_image_missing(mirror, tmp_path):
    with pytest.raises(freebsd.DownloadError, match="not found"):
        freebsd.fetch_image("13.9-RELEASE", mirror=mirror.url, cache=tmp_path / "cache")
    mirror.publish("14.3-RELEASE", b"image", listed=False)
    with pytest.raises(freebsd.DownloadError, match="lists no checksum"):
        freebsd.fetch_image("14.3-RELEASE", mirror=mirror.url, cache=tmp_path / "cache")


def test_fetch_image_ci_flavor_and_sha512(mirror, tmp_path):
    raw = b"ci image"
    url, directory = freebsd.image_url("14.3-RELEASE", "BASIC-CI", mirror.url)
    assert "/releases/CI-IMAGES/14.3-RELEASE/amd64/Latest/FreeBSD-14.3-RELEASE-amd64-BASIC-CI.raw.xz" in url
    rel = Path(url[len(mirror.url) + 1:])
    (mirror.root / rel).parent.mkdir(parents=True)
    xz = lzma.compress(raw)
    (mirror.root / rel).write_bytes(xz)
    (mirror.root / rel.parent / "CHECKSUM.SHA512").write_text(f"SHA512 ({rel.name}) = {hashlib.sha512(xz).hexdigest()}\n")
    path = freebsd.fetch_image("14.3-RELEASE", "BASIC-CI", mirror=mirror.url, cache=tmp_path / "cache")
    assert path.read_bytes() == raw


def test_vm_image_command(mirror, tmp_path, monkeypatch):
    mirror.publish("14.2-RELEASE", b"cli image")
    monkeypatch.setattr(freebsd, "IMAGES", tmp_path / "cache")
    from generator.cli import main

    assert main(["vm-image", "--release", "14.2-RELEASE", "--mirror", mirror.url]) == 0
    assert (tmp_path / "cache" / "14.2-RELEASE").is_dir()
    assert main(["vm-image", "--release", "14.2"]) == 2


# --- the FreeBSD hook and guest script, run by the host's sh ---------------------------


def _fake_bin(tmp_path, names):
    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    for name, body in names.items():
        (d / name).write_text("#!/bin/sh\n" + body)
        (d / name).chmod(0o755)
    return d


def test_user_data_hook_contract(tmp_path):
    """user-data finds the tar disk among others, runs run.sh, writes results back, powers off."""
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\n. \"$KINSTKIT_META/lib/checks.sh\"\ncheck hello echo hello from the guest\n"
                      "echo panic: not really\nexit 0\n")
    other = tmp_path / "disk0"
    other.write_bytes(b"\0" * 4096)
    meta = tmp_path / "disk1"
    metadisk.build(meta, metadisk.MetaContents(script=script, expect=None))
    bindir = _fake_bin(tmp_path, {"shutdown": f'echo "shutdown $*" >> {tmp_path}/shutdown.log\n',
                                  "sysctl": "exit 1\n"})
    cons = tmp_path / "console"
    # KINSTKIT_PATH: the stand-in shutdown and sysctl come first; the host's must never run.
    env = dict(os.environ, KINSTKIT_PATH=f"{bindir}:/usr/bin:/bin", KINSTKIT_DEVICES=f"{other} {meta}",
               KINSTKIT_META_DIR=str(tmp_path / "meta"), KINSTKIT_CONSOLE=str(cons))
    subprocess.run(["sh", str(USER_DATA)], env=env, check=True, timeout=60)
    text = cons.read_text()
    assert "@@kinstkit hook-start" in text and f"@@kinstkit meta-disk {meta}" in text
    assert "@@kinstkit script-exit 0" in text and "@@kinstkit results-written" in text
    assert "| panic: not really" in text  # script output is prefixed on the console
    assert not any(console.panic_kind(line) for line in text.splitlines())
    assert (tmp_path / "shutdown.log").read_text() == "shutdown -p now\n"
    res = metadisk.read_results(meta)
    assert res.written and res.script_status == 0
    assert [(c.name, c.verdict) for c in res.checks] == [("hello", "pass")]
    assert res.outputs["hello"] == "hello from the guest\n"


def test_user_data_without_meta_disk(tmp_path):
    bindir = _fake_bin(tmp_path, {"shutdown": f'echo "shutdown $*" >> {tmp_path}/shutdown.log\n', "sysctl": "exit 1\n"})
    (tmp_path / "disk0").write_bytes(b"\0" * 1024)
    cons = tmp_path / "console"
    # KINSTKIT_PATH: the stand-in shutdown and sysctl come first; the host's must never run.
    env = dict(os.environ, KINSTKIT_PATH=f"{bindir}:/usr/bin:/bin", KINSTKIT_DEVICES=str(tmp_path / "disk0"),
               KINSTKIT_META_DIR=str(tmp_path / "meta"), KINSTKIT_CONSOLE=str(cons))
    assert subprocess.run(["sh", str(USER_DATA)], env=env, timeout=30).returncode == 1
    assert "@@kinstkit no-meta-disk" in cons.read_text()
    assert (tmp_path / "shutdown.log").read_text() == "shutdown -p now\n"


def test_guest_scripts_parse():
    for script in (USER_DATA, FREEBSD_SCRIPT, GUEST_DIR / "standin-init", GUEST_DIR / "standin" / "checks.sh",
                   GUEST_DIR / "lib" / "checks.sh", *sorted(p for p in FAKEBSD.iterdir() if p.name != "README")):
        proc = subprocess.run(["sh", "-n", str(script)], capture_output=True, text=True)
        assert proc.returncode == 0, f"{script}: {proc.stderr}"
    if shutil.which("busybox"):
        for script in (GUEST_DIR / "standin-init", GUEST_DIR / "standin" / "checks.sh", FREEBSD_SCRIPT):
            proc = subprocess.run(["busybox", "sh", "-n", str(script)], capture_output=True, text=True)
            assert proc.returncode == 0, f"busybox sh -n {script}: {proc.stderr}"


@pytest.mark.parametrize(
    "fail, check, reason",
    [("kinst-shape", "kinst-vm-fault", "no output line matches"),
     ("dtmalloc-shape", "dtmalloc-count", "no output line matches"),
     ("load-kinst", "load-kinst", "exit status 1"),
     ("unload-dtmalloc", "unload-dtmalloc", "exit status 1")],
)
def test_freebsd_guest_script_catches_faults(tmp_path, fail, check, reason):
    checks, _ = run_freebsd_script(tmp_path, fail)
    assert checks[check][0] == "fail" and reason in checks[check][2]


def test_freebsd_guest_script_without_modules(tmp_path):
    checks, _ = run_freebsd_script(tmp_path, modules=())
    assert checks["kinst-list"][0] == "skip" and checks["load-dtmalloc"][0] == "skip"
    assert checks["dtrace-load"][0] == "pass" and checks["modules-gone"][0] == "pass"


# --- the stand-in's inputs ---------------------------------------------------------------


def test_sparse_copy(tmp_path):
    src = tmp_path / "src"
    with open(src, "wb") as f:
        f.write(b"head")
        f.seek(64 << 20)
        f.write(b"tail")
    dst = tmp_path / "dst"
    overlay.sparse_copy(src, dst)
    assert dst.stat().st_size == src.stat().st_size
    with open(dst, "rb") as f:
        assert f.read(4) == b"head"
        f.seek(64 << 20)
        assert f.read(4) == b"tail"
    assert dst.stat().st_blocks * 512 < (8 << 20)  # the hole stayed a hole


def test_sweep_stale(tmp_path):
    dead = tmp_path / "run-dead"
    dead.mkdir()
    (dead / "owner.pid").write_text("999999999\n")
    (dead / "system.qcow2").write_bytes(b"x")
    (dead / "console.log").write_text("log")
    alive = tmp_path / "run-alive"
    alive.mkdir()
    (alive / "owner.pid").write_text(f"{os.getpid()}\n")
    (alive / "meta.tar").write_bytes(b"x")
    removed = leftovers.sweep_stale(tmp_path)
    assert removed == [str(dead / "system.qcow2")]
    assert (dead / "console.log").exists() and (alive / "meta.tar").exists()


# --- dry runs and the command line ------------------------------------------------------


def _cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "generator", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def test_dry_run_standin():
    proc = _cli("vm-test", "--dry-run", "--accel", "tcg")
    assert proc.returncode == 0, proc.stderr
    qemu_line = next(line for line in proc.stdout.splitlines() if line.startswith("qemu-system-x86_64"))
    for word in ("-no-reboot", "-accel tcg", "panic=-1", "-serial stdio", "virtio-blk-pci,drive=meta"):
        assert word in qemu_line
    assert "requested with --accel tcg" in proc.stdout


def test_dry_run_freebsd_image_qemu_and_bhyve(tmp_path):
    img = tmp_path / "FreeBSD-14.3-RELEASE-amd64-BASIC-CLOUDINIT-ufs.raw"
    img.write_bytes(b"\0" * 4096)
    proc = _cli("vm-test", "--image", str(img), "--dry-run", "--accel", "tcg", "--modules", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    qemu_line = next(line for line in proc.stdout.splitlines() if line.startswith("qemu-system-x86_64"))
    assert "-kernel" not in qemu_line and "media=cdrom" in qemu_line and "seed.iso" in qemu_line
    proc = _cli("vm-test", "--image", str(img), "--dry-run", "--backend", "bhyve")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    cmds = [line.split()[0] for line in lines if not line.startswith("#")]
    assert cmds == ["bhyvectl", "bhyveload", "bhyve", "bhyvectl"]
    assert "--destroy" in lines[-1]


def test_cli_errors_are_one_line():
    proc = _cli("vm-test", "--guest", "freebsd")
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "exactly one of" in proc.stderr


def test_invoke_tasks_registered():
    # tasks.py is not part of the installed package: import it where it lives, in a fresh interpreter.
    proc = subprocess.run([sys.executable, "-c", "import json, tasks; print(json.dumps(sorted(tasks.ns.task_names)))"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    names = set(json.loads(proc.stdout))
    assert {"vm-test", "vm-shell", "vm-image"} <= names
