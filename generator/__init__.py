"""kinstkit: ahead-of-time analysis and code generation for FreeBSD kinst/dtmalloc.

The package is a pipeline, one stage per subpackage, passing plain records
(docs/architecture.md):

1. ``image``     -- the kernel image: ELF symbols, sections, relocations (pyelftools)
2. ``isa``       -- decode and classify, one package per ISA behind ``isa.contract``
3. ``analysis``  -- per-function probe verdicts, summaries and the probe plan
4. ``render``    -- templates into sources; ``providers`` say what each provider needs
5. ``build``     -- sources into ``.ko`` files, and their offline checks
6. ``run``       -- the user-space harness and host load/unload (``vm/`` for VMs)

``verify`` holds the decoder's objdump oracle, ``bench`` the benchmarks,
``cli`` the command line (the only code that parses argv) and ``common``
what every stage shares.
"""

__version__ = "0.1.0"
