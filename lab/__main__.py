"""``python -m lab``: the lab's command line."""

from lab.cli import main

main()
