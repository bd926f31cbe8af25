"""``invoke bench``: speed and memory, each measured against a reference in the same run.

- ``analysis``: whole-image analysis against ``objdump -d`` on the same image;
- ``harness``: a probe hit against a bare SIGTRAP round trip;
- ``vm``: the stand-in guest's whole vm-test cycle;
- ``dwarf``: the source-line and inline index, built and queried, against
  llvm-dwarfdump and llvm-symbolizer (``debsrc`` builds its image from a
  Debian source package).
"""
