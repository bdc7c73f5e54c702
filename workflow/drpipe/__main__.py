"""``python -m drpipe``: the ``drpipe`` command."""

import sys

from drpipe.cli import main

sys.exit(main())
