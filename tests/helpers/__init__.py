"""What the tests share: real inputs, fixture builders, skip helpers and paths.

``tests/`` is on pytest's ``pythonpath`` (pyproject.toml), so a test imports
these as ``from helpers import corpus``.  Nothing here is a test.
"""
