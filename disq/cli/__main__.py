"""``python -m disq.cli``: the same as the ``disq`` command."""

import sys

from disq.cli import main

if __name__ == "__main__":
    sys.exit(main())
