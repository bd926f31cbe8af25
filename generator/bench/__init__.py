"""``invoke bench``: speed and memory, each measured against a reference in the same run.

- ``analysis``: whole-image analysis against ``objdump -d`` on the same image;
- ``harness``: a probe hit against a bare SIGTRAP round trip;
- ``vm``: the stand-in guest's whole vm-test cycle.
"""
