"""``python -m pyfelix`` runs the command line."""

from pyfelix.cli import console

console()
