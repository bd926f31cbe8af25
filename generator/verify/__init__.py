"""Proofs of the decoder against tools written by other people.

- ``objdump``: instruction boundaries and direct branch targets of every
  function, against binutils' objdump for the image's ISA.
"""
