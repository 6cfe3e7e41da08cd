"""``python -m specplan``: the same as the ``specplan`` console script."""

from specplan.cli import console

console()
