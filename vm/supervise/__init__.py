"""Process control: the parts the supervisor (``vm.runner.run``) is built from.

- ``children``: starting the VM monitor so that it can never outlive the
  runner or escape unrecorded, and stopping it as ``timeout -k`` does;
- ``signals``: SIGINT/SIGTERM raise while a VM runs and are ignored while
  teardown runs;
- ``console``: the serial console watcher (the hook's markers, panics, prompts);
- ``leftovers``: the process table searched for survivors, and the disks of
  killed runs swept away.

Nothing here knows about backends, guests or plans, so every other part of
``vm/`` may use it.
"""
