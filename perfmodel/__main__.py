"""``python -m perfmodel`` runs the command-line interface."""
import sys

from perfmodel.cli import main

sys.exit(main())
