"""Whole VM runs with the stand-in guest: pass, fail, hang, panic, Ctrl-C, vm-shell.

Each test boots Debian's kernel with the busybox initramfs under QEMU (about
2-5 s under TCG) through ``vm.run`` or the command line, and then checks the
process table (/proc) itself, not the runner's word, for anything left
behind.  The accelerator is decided once, as the runner decides it, and is
part of every test's id (``test_passing_run[tcg]``) and asserted in it.

Every time budget for the guest comes from ``LIMITS``, the stand-in's limits
as the runner computes them on this machine (the ``GUESTS`` table, times its
``tcg_factor`` under TCG), never from a literal: a loaded machine that is
slower than a fixed number of seconds is still within the guest's budget.

Skips name the missing input: qemu-system-x86_64, or the linux-image package.
"""

from __future__ import annotations

import hashlib
import json
import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List

import pytest

import vm
from generator.common.paths import REPO
from vm import metadisk
from vm.backends import accel
from vm.backends.probe import kvm_probe
from vm.backends.qemu import have_qemu_img
from vm.config import GUEST_DIR, GUESTS, Timeouts, VMConfig
from vm.supervise import leftovers
from helpers.skips import require_qemu, require_standin_assets


def _accel_here() -> accel.AccelChoice:
    if shutil.which("qemu-system-x86_64") is None:
        return accel.AccelChoice("none", "qemu-system-x86_64 not installed")
    return accel.choose("auto", kvm_probe(VMConfig()))


ACCEL = _accel_here()
pytestmark = pytest.mark.parametrize("accel_name", [ACCEL.name])
# The stand-in's boot and whole-run limits under this accelerator, as vm.run() sets them.
LIMITS = Timeouts.for_run(VMConfig(), GUESTS["standin"], emulated=ACCEL.emulated)


@pytest.fixture(scope="module")
def assets():
    require_qemu()
    return require_standin_assets()


def _script(tmp_path: Path, body: str) -> str:
    p = tmp_path / "guest.sh"
    p.write_text("#!/bin/sh\n" + body)
    return str(p)


def _left_behind(run_dir: Path, pids: List[int]) -> List[str]:
    """Processes still alive that belong to the run: by pid, or naming the run directory."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state == "Z":
            continue
        if int(d.name) in pids or str(run_dir) in cmd:
            found.append(f"{d.name}: {cmd[:100]}")
    return found


def _check(result, name):
    return next(c for c in result.checks if c.name == name)


def _assert_clean(result):
    run_dir = Path(result.run_dir)
    assert result.leftovers == []
    assert _left_behind(run_dir, []) == []
    assert not any(run_dir.glob("system.*")) and not (run_dir / "meta.tar").exists()
    assert _check(result, "teardown").status == "pass"


def test_passing_run(assets, tmp_path, accel_name):
    base_before = hashlib.sha256(assets.system_disk.read_bytes()).hexdigest()
    res = vm.run(VMConfig(runs_dir=str(tmp_path)))
    print(f"accelerator: {res.accel['name']} ({res.accel['reason']}); timings {res.timings}")
    assert res.accel["name"] == accel_name
    assert res.status == "pass", res.text()
    assert res.end == "poweroff"
    names = [c.name for c in res.checks]
    assert names[:1] == ["boot"] and names[-3:] == ["script", "vm-exit", "teardown"]
    assert {"kernel", "modules", "system-disk-write", "workload"} <= set(names)
    assert all(c.status == "pass" for c in res.checks)
    # the guest wrote to its system disk: the base image did not change
    assert hashlib.sha256(assets.system_disk.read_bytes()).hexdigest() == base_before
    run_dir = Path(res.run_dir)
    assert (run_dir / "out" / "kernel.out").read_text().startswith("Linux 6.")
    assert json.loads((run_dir / "result.json").read_text())["status"] == "pass"
    assert "@@kinstkit results-written" in Path(res.console_log).read_text()
    assert res.timings["boot"] and res.timings["run"] and res.timings["teardown"] is not None
    _assert_clean(res)


def test_failing_script_reported_with_output(assets, tmp_path, accel_name):
    script = _script(tmp_path, '. "$KINSTKIT_META/lib/checks.sh"\n'
                               'check good echo fine\n'
                               'check bad sh -c "echo the probe did not fire; exit 3"\n'
                               'echo script ends badly\nexit 4\n')
    res = vm.run(VMConfig(script=script, keep=True, runs_dir=str(tmp_path / "runs")))
    assert res.accel["name"] == accel_name
    assert res.status == "fail" and res.exit_status == 1
    bad = _check(res, "bad")
    assert (bad.status, bad.exit) == ("fail", 3) and "the probe did not fire" in bad.output
    assert _check(res, "good").status == "pass"
    script_check = _check(res, "script")
    assert script_check.status == "fail" and script_check.exit == 4 and "script ends badly" in script_check.output
    assert "the probe did not fire" in res.text()
    # --keep: the overlay and the meta disk (with the results in it) stay for debugging; no process does.
    run_dir = Path(res.run_dir)
    assert sorted(Path(p).name for p in res.kept) == ["meta.tar", "system.qcow2" if have_qemu_img() else "system.raw"]
    assert "out/bad.out" in [m.lstrip("./") for m in metadisk.members(run_dir / "meta.tar")]
    assert _left_behind(run_dir, []) == [] and res.leftovers == []
    assert "kept" in _check(res, "teardown").detail


def test_hang_killed_at_timeout(assets, tmp_path, accel_name):
    script = _script(tmp_path, "echo going to sleep\nsleep 600\n")
    # The whole-run limit is the guest's boot budget: the boot fits in it (the
    # guest table says so), then the script hangs until the limit ends the run.
    limit = LIMITS.boot
    kill_after = 2.0
    teardown = 3.0  # host side: stop QEMU, read the meta disk back, remove the disks
    res = vm.run(VMConfig(script=script, timeout=limit, kill_after=kill_after, runs_dir=str(tmp_path / "runs")))
    took = res.timings["total"]  # from the runner's start, the clock its limits use
    assert res.accel["name"] == accel_name
    assert res.end == "timeout" and res.status == "error", res.text()
    assert limit <= took < limit + kill_after + teardown, took
    assert "whole-run limit" in _check(res, "vm-exit").detail
    assert _check(res, "script").status == "error"
    assert "| going to sleep" in Path(res.console_log).read_text()
    _assert_clean(res)


def test_panic_detected_and_run_ended(assets, tmp_path, accel_name):
    # panic=0 (after the runner's panic=-1) makes the guest hang after the panic
    # instead of rebooting: only the console watcher can end this run.
    script = _script(tmp_path, "echo about to panic\necho c > /proc/sysrq-trigger\nsleep 600\n")
    res = vm.run(VMConfig(script=script, extra_append="panic=0", runs_dir=str(tmp_path / "runs")))
    took = res.timings["total"]
    assert res.accel["name"] == accel_name
    assert res.end == "panic" and res.status in ("fail", "error")
    assert "Kernel panic - not syncing: sysrq triggered crash" in res.panic
    assert _check(res, "panic").status == "fail"
    # The panic follows the boot at once: the run must end within the boot budget plus
    # the panic grace and one SIGTERM->SIGKILL, far short of the whole-run limit.
    assert took < LIMITS.boot + LIMITS.panic_grace + LIMITS.kill_after < LIMITS.run, \
        f"the panic did not end the run at once ({took:.1f} s)"
    assert res.vm_exit["kind"] == "stopped"  # the runner ended it; it did not end by itself
    _assert_clean(res)


def test_panic_with_reboot_ends_qemu(assets, tmp_path, accel_name):
    """The default panic=-1 with -no-reboot: QEMU exits by itself; still reported as a panic."""
    script = _script(tmp_path, "echo c > /proc/sysrq-trigger\nsleep 600\n")
    # The grace after the panic line is the time QEMU gets to end by itself: the guest's
    # boot budget bounds what the guest does on its own, rebooting included.
    res = vm.run(VMConfig(script=script, panic_grace=LIMITS.boot, runs_dir=str(tmp_path / "runs")))
    assert res.accel["name"] == accel_name
    assert res.end == "panic" and res.vm_exit["kind"] == "exited"
    _assert_clean(res)


def _children(pid: int) -> List[int]:
    kids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(d.name))
    return kids


def _qemu_children(pid: int) -> List[int]:
    found = []
    for kid in _children(pid):
        try:
            if "qemu" in Path(f"/proc/{kid}/cmdline").read_text(errors="replace"):
                found.append(kid)
        except OSError:
            pass  # gone already
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_ctrl_c_leaves_nothing_behind(assets, tmp_path, accel_name):
    script = _script(tmp_path, "echo waiting for ctrl-c\nsleep 600\n")
    runs = tmp_path / "runs"
    proc = subprocess.Popen(
        [sys.executable, "-m", "generator", "vm-test", "--script", script, "--runs-dir", str(runs), "--json"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # Until the script runs, or the runner gives up by itself (its limits are LIMITS).
        deadline = time.monotonic() + LIMITS.run
        qemu = []
        while time.monotonic() < deadline and proc.poll() is None:
            logs = list(runs.glob("*/console.log"))
            if logs and "waiting for ctrl-c" in logs[0].read_text(errors="replace"):
                qemu = _qemu_children(proc.pid)
                break
            time.sleep(0.1)
        assert qemu, "the guest script never started"
        run_dir = logs[0].parent
        assert any(run_dir.glob("system.*")) and (run_dir / "meta.tar").exists()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err.decode()
    res = json.loads(out)
    assert res["end"] == "interrupted" and res["accel"]["name"] == accel_name
    # The process table, not the runner's word: QEMU and anything in its group are gone.
    for pid in qemu:
        assert not _alive(pid), f"QEMU {pid} survived Ctrl-C"
    assert _left_behind(run_dir, qemu) == []
    assert not any(run_dir.glob("system.*")) and not (run_dir / "meta.tar").exists()
    assert res["leftovers"] == []


def test_runner_killed_takes_qemu_with_it(assets, tmp_path, accel_name):
    """Even SIGKILL to the runner cannot leave QEMU running (PR_SET_PDEATHSIG); the next run sweeps the disks."""
    script = _script(tmp_path, "echo waiting\nsleep 600\n")
    runs = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "generator", "vm-test", "--script", script, "--runs-dir",
                             str(runs)], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # QEMU starts before the boot limit's clock could run out; the runner ends by itself at the latest.
    deadline = time.monotonic() + LIMITS.run
    qemu = []
    while time.monotonic() < deadline and not qemu and proc.poll() is None:
        qemu = _qemu_children(proc.pid)
        time.sleep(0.1)
    assert qemu
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(p) for p in qemu):
        time.sleep(0.05)
    assert not any(_alive(p) for p in qemu), "QEMU outlived a SIGKILLed runner"
    stale = next(runs.iterdir())
    assert any(stale.glob("system.*"))  # nobody could remove it...
    assert leftovers.sweep_stale(runs)  # ...until the next run sweeps it
    assert not any(stale.glob("system.*")) and not (stale / "meta.tar").exists()


def test_freebsd_guest_script_in_standin_with_fake_tools(assets, tmp_path, accel_name, dtmalloc_listing):
    """vm/guest/freebsd/kinstkit-test.sh under busybox sh in the guest, with fake kldload/kldstat/dtrace."""
    mods = tmp_path / "build-id"
    mods.mkdir()
    for m in ("kinst", "dtmalloc"):
        (mods / f"{m}.ko").write_bytes(b"\x7fELF" + b"\0" * 60)
    shutil.copy(dtmalloc_listing, mods)
    wrapper = _script(tmp_path, 'export PATH="$KINSTKIT_META/fakebsd:$PATH" FAKEBSD_STATE=/tmp/fakebsd '
                                'KINSTKIT_LOAD_SECONDS=1 FAKEBSD_DTMALLOC_LIST="$KINSTKIT_META/modules/dtmalloc.list"\n'
                                'exec sh "$KINSTKIT_META/kinstkit-test.sh"\n')
    res = vm.run(VMConfig(script=wrapper, expect=str(GUEST_DIR / "freebsd" / "expect.tsv"), modules=str(mods),
                          extra=((str(GUEST_DIR / "fakebsd"), "fakebsd"),
                                 (str(GUEST_DIR / "freebsd" / "kinstkit-test.sh"), "kinstkit-test.sh")),
                          runs_dir=str(tmp_path / "runs")))
    assert res.accel["name"] == accel_name
    want = {"dtrace-load", "stock-providers-out", "load-kinst", "load-dtmalloc", "kinst-list", "kinst-vm-fault",
            "dtmalloc-list", "dtmalloc-listing", "dtmalloc-count", "unload-kinst", "unload-dtmalloc", "modules-gone"}
    got = {c.name: c.status for c in res.checks}
    assert {n: got.get(n) for n in want} == {n: "pass" for n in want}, res.text()
    assert res.status == "pass", res.text()
    assert "vm_fault:4 0x" in (Path(res.run_dir) / "out" / "kinst-vm-fault.out").read_text()
    _assert_clean(res)


def test_vm_shell_on_a_terminal(assets, tmp_path, accel_name):
    """vm-shell: the guest's console on a pseudo-terminal; commands run; exiting the shell powers off."""
    master, slave = pty.openpty()
    runs = tmp_path / "runs"
    # vm-shell has no limit of its own; the guest's whole-run limit ends a stuck session.
    proc = subprocess.Popen([sys.executable, "-m", "generator", "vm-shell", "--runs-dir", str(runs),
                             "--timeout", str(LIMITS.run)],
                            cwd=REPO, stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    seen = b""

    def read_until(token: bytes, limit: float) -> bool:
        nonlocal seen
        end = time.monotonic() + limit
        while time.monotonic() < end:
            r, _, _ = select.select([master], [], [], 0.2)
            if r:
                try:
                    seen += os.read(master, 65536)
                except OSError:
                    return token in seen
            if token in seen:
                return True
        return False

    try:
        # read_until also returns when the session ends (the terminal closes).
        assert read_until(b"exit this shell", LIMITS.run), seen.decode(errors="replace")[-500:]
        time.sleep(0.5)
        os.write(master, b"echo shell-says-$((6*7)); ls /meta\r")
        assert read_until(b"shell-says-42", LIMITS.run), seen.decode(errors="replace")[-500:]
        os.write(master, b"exit\r")
        assert read_until(b"result.json", LIMITS.run), seen.decode(errors="replace")[-500:]  # the report's last line
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    text = seen.decode(errors="replace")
    assert "run.sh" in text and "PASS  teardown" in text, text[-800:]
    assert proc.returncode == 0, text[-800:]
    run_dir = next(runs.iterdir())
    assert "shell-says-42" in (run_dir / "console.log").read_text(errors="replace")
    assert not any(run_dir.glob("system.*")) and _left_behind(run_dir, []) == []
