"""What every stage shares: errors, paths, defaults, files, downloads, host tools.

Nothing here knows about a stage.  Every other package may import from
``generator.common``, and ``vm/`` imports nothing else of ``generator``.
"""
