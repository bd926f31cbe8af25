"""Stage 3: probe analysis and the probe plan.

- ``exclusions``: kinst's machine-independent function exclusion list;
- ``probes``: one function's verdict and a ``Probe`` per instruction (image + ISA);
- ``whole``: every function of an image, in forked workers, in address order;
- ``summary``: per-function counts, through the ISA's accelerator when it has one;
- ``report``: text and JSON views of a ``FunctionReport``;
- ``plan``: what goes into a generated kinst table, and what is refused with why.

Records handed on: ``Probe`` and ``FunctionReport`` (``records``), ``ProbePlan`` (``plan``).
"""
