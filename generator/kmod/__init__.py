"""Stage 5: generated sources into loadable ``.ko`` files.

- ``build``: the order of the steps (``BuildRequest`` -> ``build()``);
- ``sources``: the providers' generated sources and Makefiles in ``sys/modules/<m>/``;
- ``portable``: the portable cores compiled, linked and resolved without a tree;
- ``kmodflags``, ``mk``: kmod.mk's and kern.mk's flags for a ``sys/`` tree;
- ``backends``: the registry of ways to build a module, ``cross`` (clang + ld.lld) and ``native`` (make +
  bsd.kmod.mk);
- ``objdir``, ``manifest``: object directories, manifests and stamps;
- ``ciconfig``: the CI configuration files for a module;
- ``checkko``: offline checks of a finished ``.ko`` against its kernel;
- ``release``: FreeBSD release sets fetched and verified into a cache.
"""
