"""``python -m meshtune`` runs the CLI."""

from meshtune.cli import main

main()
