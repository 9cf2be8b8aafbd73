"""``python -m pyfelix`` runs the command line."""

import sys

from pyfelix.cli import main

sys.exit(main())
