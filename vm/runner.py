"""``run()``: one VM run from config to result, torn down whatever happens.

    validate(cfg) -> make_plan(cfg) -> prepare (overlay, meta disk, seed)
      -> start the VM monitor in its own session, console to a pipe
      -> supervise: log the console, watch for the hook's markers and panics,
         enforce the boot and whole-run limits (SIGTERM, then SIGKILL
         kill_after later, as ``timeout -k`` does)
      -> teardown: stop the monitor, destroy what the backend made, read the
         results back from the meta disk, remove the overlay and meta disk
         (kept with ``keep``), then look for leftovers in the process table
      -> VMResult

Teardown runs on every path: a normal end, a limit, a panic, an exception,
Ctrl-C (SIGINT) or SIGTERM to the runner.  While it runs SIGINT and SIGTERM
are ignored, so a second Ctrl-C cannot cut it short.  The monitor also gets
PR_SET_PDEATHSIG=SIGKILL, so even a runner killed with SIGKILL takes its VM
with it; the overlay such a runner leaves is removed by the next run
(``sweep_stale``).
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import select
import signal
import subprocess
import time
from typing import List, Optional

from . import metadisk
from .backends.base import Backend, Stage, VMExit
from .backends.factory import make_backend
from .config import VMConfig, VMError, validate
from .images import freebsd
from .plan import Plan
from .planner import make_plan
from .results import Check, VMResult
from .supervise.children import spawn, stop
from .supervise.console import ConsoleWatcher
from .supervise.leftovers import leftover_processes, sweep_stale
from .supervise.signals import Interrupted, signals_ignored, signals_raise


class _Run:
    """The mutable state of one run, for the supervisor and teardown."""

    def __init__(self, plan: Plan, backend: Backend):
        self.plan = plan
        self.backend = backend
        self.t0 = time.monotonic()
        self.end = "error"
        self.error: Optional[str] = None
        self.proc: Optional[subprocess.Popen] = None
        self.groups: List[int] = []
        self.vm_exit: Optional[VMExit] = None
        self.watcher: Optional[ConsoleWatcher] = None
        self.log = None
        self.t_vm_end: Optional[float] = None
        self.limit_hit: Optional[str] = None
        self.signal: Optional[int] = None


def run(cfg: VMConfig) -> VMResult:
    """Boot, check, collect, tear down (see the module docstring)."""
    validate(cfg)
    plan = make_plan(cfg)
    backend = make_backend(plan)
    if cfg.dry_run:
        return _dry_run(plan, backend)
    runs = plan.run_dir.parent
    runs.mkdir(parents=True, exist_ok=True)
    notes = list(plan.notes)
    for stale in sweep_stale(runs):
        notes.append(f"removed a stale disk of a killed run: {stale}")
    plan.run_dir.mkdir()
    (plan.run_dir / "owner.pid").write_text(f"{os.getpid()}\n")
    st = _Run(plan, backend)
    reraise: Optional[BaseException] = None
    with signals_raise():
        try:
            backend.preflight()
            _prepare(plan, backend)
            _supervise(st)
        except Interrupted as e:
            st.end, st.error, st.signal = "interrupted", f"{e} received: stopped the VM and tore down", e.signum
        except KeyboardInterrupt:
            st.end, st.error, st.signal = "interrupted", "SIGINT received: stopped the VM and tore down", signal.SIGINT
        except VMError as e:
            st.end, st.error = "error", str(e)
        except Exception as e:  # a bug: tear down, record, then let it show
            st.end, st.error = "error", f"{type(e).__name__}: {e}"
            reraise = e
        finally:
            with signals_ignored():
                result = _teardown(st, notes)
    if reraise is not None:
        raise reraise
    return result


def _prepare(plan: Plan, backend: Backend) -> None:
    backend.make_overlay()
    info = dict(plan.info, accel=plan.accel.name, created=time.strftime("%Y-%m-%dT%H:%M:%S"))
    metadisk.build(plan.meta, metadisk.MetaContents(
        script=plan.script, expect=plan.expect, modules=plan.modules, extra=plan.extra,
        auto_shutdown=not plan.interactive, interactive=plan.interactive, info=info))
    if plan.seed is not None:
        freebsd.make_seed(plan.seed, plan.run_id)


def _responders(plan: Plan):
    if not plan.login:
        return ()
    # BASIC-CI has no nuageinit: log in as root (no password) and run the hook from the seed CD.
    hook = b"mount -t cd9660 /dev/iso9660/cidata /mnt && sh /mnt/user-data\n"
    return ((re.compile(r"login: $"), b"root\n"), (re.compile(r"# $"), hook))


def _supervise(st: _Run) -> None:
    plan = st.plan
    # vm-shell: QEMU itself writes the log (chardev logfile); the runner must not.
    st.log = None if plan.interactive else open(plan.console_log, "ab")
    st.watcher = ConsoleWatcher(st.log, _responders(plan))
    vmm_log = open(plan.vmm_log, "ab")
    try:
        for stage in st.backend.stages():
            _run_stage(st, stage, vmm_log)
            if st.end != "running":
                return
    finally:
        vmm_log.close()


def _run_stage(st: _Run, stage: Stage, vmm_log) -> None:
    plan, to, w = st.plan, st.plan.timeouts, st.watcher
    assert w is not None
    if stage.interactive:
        # vm-shell: the terminal is the console; QEMU logs it (chardev logfile).
        st.groups = []
        st.proc = spawn(stage.argv, new_session=False, stderr=vmm_log)
        st.end = "running"
        with signals_ignored():  # Ctrl-C belongs to the guest
            try:
                code = st.proc.wait(timeout=None if math.isinf(to.run) else max(0.0, to.run - (time.monotonic() - st.t0)))
            except subprocess.TimeoutExpired:
                st.end, st.limit_hit = "timeout", f"the whole-run limit ({to.run:.0f} s) passed"
                return
        st.vm_exit = st.backend.interpret_exit(code)
        st.t_vm_end = time.monotonic()
        st.end = "poweroff" if st.vm_exit.ok else "vm-exit"
        # The console went to the terminal (and QEMU's log): read the log for the markers.
        w.log = None
        try:
            w.feed(plan.console_log.read_bytes())
        except OSError:
            pass
        return

    reader = st.backend.console_reader()
    def started(proc: subprocess.Popen) -> None:
        st.proc = proc
        st.groups.append(proc.pid)

    spawn(stage.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE if stage.console_from_stdout else vmm_log,
           stderr=vmm_log, on_started=started)
    assert st.proc is not None
    st.end = "running"
    fds = [st.proc.stdout.fileno()] if stage.console_from_stdout else []
    if reader is not None:
        fds.append(reader)
    for fd in fds:
        os.set_blocking(fd, False)
    panic_at: Optional[float] = None
    open_fds = list(fds)
    while True:
        now = time.monotonic()
        elapsed = now - st.t0
        if panic_at is not None and now >= panic_at:
            st.end = "panic"
            return
        if w.first("hook-start") is None and elapsed >= to.boot:
            st.end, st.limit_hit = "boot-timeout", f"no hook-start marker within the boot limit ({to.boot:.0f} s)"
            return
        if elapsed >= to.run:
            st.end, st.limit_hit = "timeout", f"the whole-run limit ({to.run:.0f} s) passed"
            return
        wait = min(0.25, max(0.0, to.run - elapsed))
        if panic_at is not None:
            wait = min(wait, max(0.0, panic_at - now))
        if open_fds:
            ready, _, _ = select.select(open_fds, [], [], wait)
        else:
            ready = []
            time.sleep(wait)
        for fd in ready:
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                continue
            except OSError as e:
                if e.errno == errno.EIO:  # nmdm: the other side closed
                    data = b""
                else:
                    raise
            if not data:
                open_fds.remove(fd)
                continue
            events, replies = w.feed(data)
            for r in replies:
                try:
                    st.proc.stdin.write(r)
                    st.proc.stdin.flush()
                except (BrokenPipeError, OSError):
                    pass
            if panic_at is None and any(e.kind == "panic" for e in events):
                panic_at = time.monotonic() + to.panic_grace
        code = st.proc.poll()
        if code is not None and (not open_fds or reader is not None or not stage.console_from_stdout):
            _drain(fds, w)
            st.t_vm_end = time.monotonic()
            st.vm_exit = st.backend.interpret_exit(code)
            if panic_at is not None:
                st.end = "panic"
            elif not stage.is_vm:
                if code != 0:
                    st.end = "vm-exit"
                    st.error = f"{stage.name} failed with exit status {code}"
                else:
                    st.end = "running"  # the loader is done; the VM stage follows
                return
            else:
                st.end = "poweroff" if st.vm_exit.ok else "vm-exit"
            return


def _drain(fds: List[int], w: ConsoleWatcher) -> None:
    for fd in fds:
        while True:
            try:
                data = os.read(fd, 65536)
            except (BlockingIOError, OSError):
                break
            if not data:
                break
            w.feed(data)


def _teardown(st: _Run, notes: List[str]) -> VMResult:
    plan = st.plan
    t_stop = time.monotonic()
    if st.proc is not None:
        running = st.proc.poll() is None
        t_term = time.monotonic()
        stop(st.proc, plan.timeouts.kill_after, group=bool(st.groups))
        if running:
            # QEMU exits 0 on SIGTERM: what matters is that the runner ended it.
            how = "SIGKILL" if time.monotonic() - t_term >= plan.timeouts.kill_after else "SIGTERM"
            st.vm_exit = VMExit(st.proc.returncode, "stopped", False, f"stopped by the runner ({how})")
        elif st.vm_exit is None:
            st.vm_exit = st.backend.interpret_exit(st.proc.returncode)
        if st.t_vm_end is None:
            st.t_vm_end = time.monotonic()
    problems = st.backend.cleanup()
    if st.watcher is not None and st.proc is not None and st.proc.stdout is not None:
        _drain([st.proc.stdout.fileno()], st.watcher)
    if st.proc is not None:
        for pipe in (st.proc.stdin, st.proc.stdout):
            try:
                if pipe:
                    pipe.close()
            except OSError:
                pass
    if st.log is not None:
        st.log.close()
    t_collect = time.monotonic()
    results = metadisk.read_results(plan.meta, save_to=plan.run_dir / "out") if plan.meta.exists() else None
    t_collected = time.monotonic()
    kept = []
    for path in (plan.overlay, plan.meta, plan.seed):
        if path is None or not path.exists():
            continue
        if plan.keep:
            kept.append(str(path))
        else:
            path.unlink()
    leftovers = leftover_processes(plan.run_dir, st.groups) + st.backend.leftovers() + problems
    if not plan.keep:
        leftovers += [f"file {p}" for p in (plan.overlay, plan.meta, plan.seed) if p is not None and p.exists()]
    owner = plan.run_dir / "owner.pid"
    if owner.exists():
        owner.unlink()
    t_end = time.monotonic()

    w = st.watcher
    hook = w.first("hook-start") if w else None
    written = w.first("results-written") if w else None
    boot = (hook.at - st.t0) if hook else None
    run_s = ((st.t_vm_end or t_stop) - hook.at) if hook else None
    if plan.interactive:  # the markers were read from the log afterwards: only the session's length is known
        boot, run_s = None, (st.t_vm_end or t_stop) - st.t0
    timings = {
        "boot": _r(boot), "run": _r(run_s),
        "collect": _r(t_collected - t_collect),
        "teardown": _r((t_end - t_stop) - (t_collected - t_collect)),
        "total": _r(t_end - st.t0),
    }
    panic_ev = w.first("panic") if w else None
    checks = _checks(st, results, hook is not None, written is not None, panic_ev, leftovers)
    status = "error" if any(c.status == "error" for c in checks) else (
        "fail" if any(c.status == "fail" for c in checks) else "pass")
    result = VMResult(
        status=status, end=st.end, guest=plan.guest.name, backend=plan.backend, accel=plan.accel.to_json(),
        run_dir=str(plan.run_dir), console_log=str(plan.console_log), timings=timings, checks=checks,
        vm_exit=(st.vm_exit.__dict__ if st.vm_exit else None), panic=panic_ev.detail if panic_ev else None,
        leftovers=leftovers, kept=kept, notes=notes,
        commands=[s.argv for s in st.backend.stages()],
        console_tail=w.tail(40) if w else [], signal=int(st.signal) if st.signal else None,
    )
    (plan.run_dir / "result.json").write_text(json.dumps(result.to_json(), indent=1) + "\n")
    return result


def _r(v: Optional[float]) -> Optional[float]:
    return None if v is None else round(v, 3)


def _checks(st: _Run, results, hooked: bool, written: bool, panic_ev, leftovers: List[str]) -> List[Check]:
    plan = st.plan
    checks: List[Check] = []
    if st.end == "interrupted":
        checks.append(Check("run", "error", st.error or "interrupted"))
    elif st.error and not hooked:
        checks.append(Check("run", "error", st.error))
    if st.end == "boot-timeout":
        checks.append(Check("boot", "error", st.limit_hit or "boot limit passed", output="\n".join(st.watcher.tail(15))))
    elif hooked and plan.interactive:
        checks.append(Check("boot", "pass", "the hook started (read from the console log)"))
    elif hooked:
        boot = st.watcher.first("hook-start").at - st.t0
        checks.append(Check("boot", "pass", f"hook started {boot:.2f} s after start"))
    elif st.end not in ("interrupted", "error"):
        checks.append(Check("boot", "error", "the VM ended before the hook started",
                            output="\n".join(st.watcher.tail(15)) if st.watcher else ""))
    if panic_ev is not None:
        checks.append(Check("panic", "fail", f"kernel panic on the console: {panic_ev.detail}",
                            output="\n".join(st.watcher.panic_context)))
    if st.watcher is not None:
        for kind in ("no-meta-disk", "meta-unreadable", "results-not-written"):
            ev = st.watcher.first(kind)
            if ev:
                checks.append(Check("meta-disk", "error", f"the guest hook said {kind} {ev.detail}".strip()))
    if hooked and not plan.interactive and results is not None:
        specs = metadisk.parse_expect(plan.expect.read_text(), str(plan.expect)) if plan.expect else []
        seen = set()
        for line in results.checks:
            seen.add(line.name)
            status = {"pass": "pass", "fail": "fail", "skip": "skip"}.get(line.verdict, "error")
            checks.append(Check(line.name, status, line.reason, line.exit,
                                results.outputs.get(line.name, "") if status != "pass" else ""))
        for spec in specs:
            if spec.name not in seen:
                checks.append(Check(spec.name, "error", "not run: the script ended before this check"))
        if results.written:
            status = "pass" if results.script_status == 0 else "fail"
            checks.append(Check("script", status, f"{plan.script.name} exited {results.script_status}",
                                results.script_status, results.script_log if status != "pass" else ""))
        else:
            # The console tail is shown once, with the panic or the limit that ended the run.
            shown = panic_ev is not None or st.end in ("timeout", "boot-timeout")
            checks.append(Check("script", "error", "no results on the meta disk: the script did not finish",
                                output=results.script_log or ("" if shown else "\n".join(st.watcher.tail(15)))))
    if st.end in ("timeout",):
        checks.append(Check("vm-exit", "error", f"killed: {st.limit_hit}", output="\n".join(st.watcher.tail(15))))
    elif st.end == "panic":
        checks.append(Check("vm-exit", "error", "stopped after the panic"))
    elif st.vm_exit is not None and st.end in ("poweroff", "vm-exit"):
        ok = st.vm_exit.ok and (written or plan.interactive)
        detail = st.vm_exit.meaning + ("" if written or plan.interactive else "; the hook never wrote results back")
        if st.error and st.end == "vm-exit":
            detail = st.error
        checks.append(Check("vm-exit", "pass" if ok else "error", detail, st.vm_exit.code))
    checks.append(Check("teardown", "error" if leftovers else "pass",
                        "left behind: " + "; ".join(leftovers) if leftovers else
                        ("nothing left behind" + (" (overlay kept: --keep)" if plan.keep else ""))))
    return checks


def _dry_run(plan: Plan, backend: Backend) -> VMResult:
    cmds = backend.commands_for_display()
    return VMResult(
        status="pass", end="dry-run", guest=plan.guest.name, backend=plan.backend, accel=plan.accel.to_json(),
        run_dir=str(plan.run_dir), console_log=str(plan.console_log),
        timings={"boot_limit": plan.timeouts.boot, "run_limit": plan.timeouts.run},
        checks=[], notes=list(plan.notes), commands=cmds,
    )
