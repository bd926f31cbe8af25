"""Stage 6: running generated code.

- ``harness``: the kinst core and table compiled into an LD_AUDIT library
  that probes every table entry of a real program or library;
- ``audit``: the protocol between the runner and that library;
- ``callgrind``: the independent hit counter (valgrind);
- ``process``: supervised command runs;
- ``hostops``: kldload/kldunload on a FreeBSD host or over ssh.

Running in a VM is ``vm/``, a package of its own.
"""
