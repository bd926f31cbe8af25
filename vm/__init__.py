"""kinstkit's VM runner: boot a guest, run checks in it, collect results, always tear down.

The pipeline (docs/vm-test.md):

    VMConfig -> validate() -> make_plan() -> pure *_args() builders -> run() -> VMResult

- ``vm.config``: ``VMConfig`` (documented defaults), the ``GUESTS`` table, ``validate()``;
- ``vm.metadisk``: the meta disk, a tar on a second virtio-blk disk that carries
  the guest script, its expected-output specs and the modules in, and the
  results out (FreeBSD CI's protocol);
- ``vm.supervise``: process control: starting and stopping the VM monitor, SIGINT/SIGTERM,
  the serial console watcher (hook markers, panic detection), leftovers and stale runs;
- ``vm.backends``: the two VM monitors, ``qemu`` and ``bhyve``, as argv builders plus
  a backend class each, what they share (``base``, ``tools``, ``overlay``),
  ``make_backend()``, and ``accel`` (whether ``-accel kvm`` really works here, and why);
- ``vm.images``: what guests boot from: ``standin`` (the stand-in Linux guest
  made from Debian packages) and ``freebsd`` (official FreeBSD VM images:
  download, verify, cache; and the cloud-init NoCloud seed that runs the hook);
- ``vm.planner``: ``make_plan()``, every choice of a run made into a ``vm.plan.Plan``;
- ``vm.runner``: ``run()``, the supervisor that enforces the timeouts and tears down;
- ``vm.results``: ``VMResult`` and its ``Check`` records, as printed and as JSON;
- ``vm.bench``: ``bench_vm()``, the stand-in guest's whole cycle, timed.

Guest-side files live in ``vm/guest/``.
"""

from .config import GUESTS, VMConfig, VMError, validate
from .planner import make_plan
from .results import VMResult
from .runner import run

__all__ = ["GUESTS", "VMConfig", "VMError", "VMResult", "make_plan", "run", "validate"]
