"""``python -m hotkeyd`` runs the CLI."""

from hotkeyd.cli import main

main()
