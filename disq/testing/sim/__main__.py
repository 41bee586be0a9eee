"""``python -m disq.testing.sim``: see :mod:`disq.testing.sim.cli`."""

import sys

from disq.testing.sim.cli import main

sys.exit(main())
