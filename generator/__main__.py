"""``python -m generator``: see ``generator/cli.py``."""

import sys

from .cli import main

sys.exit(main())
