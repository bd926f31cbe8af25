"""Ready-to-run D scripts for stock dtrace(1): stage 4's other output, beside the provider modules.

- ``scripts``: each script's template context, from the analysis (kinst probes, source lines, inlined
  copies) and the dtmalloc discovery;
- ``syntax``: a checker for the D the templates emit (no dtrace(1) exists off FreeBSD).
"""
