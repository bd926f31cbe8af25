"""The VM monitors a run can use, each as pure argv builders plus a backend class.

- ``base``: what every backend is (``Backend``) and what it hands the
  supervisor (``Stage``: one process to run; ``VMExit``: what its exit status meant);
- ``tools``: the host programs each backend starts, by name (``validate()``
  reads the same table);
- ``qemu``: QEMU on Linux hosts (qcow2 overlay, PVH or SeaBIOS boot);
- ``bhyve``: bhyve on FreeBSD hosts (bhyvectl, bhyveload or UEFI, nmdm, tap);
- ``overlay``: the sparse copy of a raw base image, the system disk where no
  qcow2 overlay can be had;
- ``factory``: ``make_backend(plan)``, the backend a plan names;
- ``accel``: whether QEMU's ``-accel kvm`` really works here, and why (else TCG);
- ``probe``: the quick probe ``accel`` may ask for: the stand-in kernel booted
  under KVM to its hook marker.
"""
