"""``python -m specplan``: the same as the ``specplan`` console script."""

from specplan.entry import console

console()
