"""kinstkit's VM runner: boot a guest, run checks in it, collect results, always tear down.

The pipeline (docs/vm-test.md):

    VMConfig -> validate() -> make_plan() -> pure *_args() builders -> run() -> VMResult

The request, the plan and the run (modules at the top):

- ``config``: ``VMConfig`` (documented defaults), the ``GUESTS`` table, ``validate()``;
- ``plan``: the ``Plan`` record, one run with every choice made;
- ``planner``: ``make_plan()``, which makes those choices;
- ``metadisk``: the meta disk, a tar on a second virtio-blk disk that carries
  the guest script, its expected-output specs and the modules in, and the
  results out (FreeBSD CI's protocol);
- ``runner``: ``run()``, the supervisor that enforces the time limits and
  always tears down;
- ``results``: ``VMResult`` and its ``Check`` records, as printed and as JSON.

The parts they are built from (one folder each):

- ``backends/``: the VM monitors: ``qemu`` and ``bhyve`` (argv builders and a
  backend class each), what they share (``base``: the ``Backend`` interface,
  ``Stage``, ``VMExit``; ``tools``: host program names; ``overlay``: the
  sparse copy of a system disk), ``factory.make_backend()``, and ``accel``
  with its ``probe`` (whether ``-accel kvm`` really works here, and why);
- ``images/``: what a guest boots from, made or fetched on the host:
  ``standin`` (the stand-in Linux guest built from Debian packages),
  ``linux`` (the ring-0 guest: a Debian kernel package the caller unpacked) and
  ``freebsd`` (official FreeBSD VM images: download, verify, cache; and the
  cloud-init NoCloud seed that runs the hook);
- ``supervise/``: process control: starting and stopping the VM monitor
  (``children``), SIGINT/SIGTERM (``signals``), the serial console watcher
  (``console``), leftover processes and the disks of killed runs (``leftovers``);
- ``guest/``: not Python: the files that run inside the guest (the FreeBSD
  hook and check script, the stand-in's ``/init``, the check library and the
  expected-output specs), installed as package data.

Imports inside ``vm/`` form no cycle, function-local ones included:
``supervise/`` and the ``backends`` modules ``tools``, ``overlay`` and
``accel`` import nothing of ``vm``; ``config`` imports only ``backends.tools``;
and nothing but this file imports ``runner``.  Of ``generator`` only
``generator.common`` is used.  The benchmark of the whole cycle is
``generator.bench.vm``.
"""

from .config import GUESTS, VMConfig, VMError, validate
from .planner import make_plan
from .results import VMResult
from .runner import run

__all__ = ["GUESTS", "VMConfig", "VMError", "VMResult", "make_plan", "run", "validate"]
