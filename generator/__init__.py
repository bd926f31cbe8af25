"""kinstkit: ahead-of-time analysis and code generation for FreeBSD kinst/dtmalloc.

The package is a pipeline, one stage per module, passing frozen records:

1. ``image``   -- kernel image: ELF symbols, sections, relocations (pyelftools)
2. ``isa``     -- decode and classify, one module per ISA (``isa/amd64.py``)
3. ``probes``  -- per-function probe analysis: verdicts and kinst metadata
4. later stages render templates, build modules and run them
"""

__version__ = "0.1.0"
