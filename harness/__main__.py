"""``python -m harness`` is the ``crucible`` command without installing the package."""

import sys

from harness.cli import main

sys.exit(main())
