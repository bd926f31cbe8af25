"""What a guest boots from, made or fetched on the host and cached under ``.cache/vm/``.

- ``standin``: the stand-in Linux guest: Debian's kernel, a busybox
  initramfs whose ``/init`` follows the FreeBSD hook's contract, and a small
  read-only system disk;
- ``freebsd``: official FreeBSD VM images (download, verify, cache) and the
  cloud-init NoCloud seed ISO that runs the hook in them.

The guest-side files these carry into the guest (``/init``, the hook, the
guest scripts) live in ``vm/guest/``, which is data, not Python.
"""
