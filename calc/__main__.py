"""`python -m calc`: the command line (calc.cli)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
