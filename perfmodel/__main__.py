"""``python -m perfmodel`` runs the command-line interface."""
import sys

from perfmodel.cli.main import main

sys.exit(main())
