"""``python -m generator``: see ``generator/cli.py``."""

import sys

from generator.cli import main

sys.exit(main())
