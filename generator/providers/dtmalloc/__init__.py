"""The dtmalloc provider: the kernel's malloc(9) types, and the module that probes them.

- ``layouts``: ``struct malloc_type`` and ``struct sysinit`` per FreeBSD release, as data;
- ``mallocs``: discovery of every MALLOC_DEFINE in a kernel and its ``.ko`` files;
- ``report``: what ``malloc-types`` prints;
- ``generate``: the template context and rendering of ``templates/dtmalloc/``.
"""
