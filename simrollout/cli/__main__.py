"""``python -m simrollout.cli``: the ``simrollout`` command."""

from .entry import main

main()
