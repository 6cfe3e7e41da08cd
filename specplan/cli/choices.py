"""The fixed choices of command-line options, as enums so ``--help`` lists them and a wrong value is
one usage line (exit 2); each compares equal to its string value. Options that are config fields
(``--drafter``, ``--pld-variant``) stay strings: the config model validates them, so a command and a
scenario refuse a value with the same line. Also the checks of numeric options the commands share."""

from __future__ import annotations

import math
from enum import Enum
from typing import Optional

import typer

from specplan.errors import ConfigError


class Choice(str, Enum):
    """A string choice that prints as its value."""

    def __str__(self) -> str:
        return self.value

    __format__ = str.__format__


class TableFormat(Choice):
    table = "table"
    json = "json"


class SimulateFormat(Choice):
    table = "table"
    csv = "csv"
    json = "json"


class ConfigFormat(Choice):
    yaml = "yaml"
    json = "json"


class Backend(Choice):
    local = "local"
    ray = "ray"


class Device(Choice):
    cuda = "cuda"
    cpu = "cpu"


def positive_number(value):
    """typer callback for a float option (or a repeatable one): every value finite and > 0. ``float``
    reads ``inf`` and ``nan``, which pass ``> 0`` checks (``nan``) or mean nothing (an infinite rate or
    SLO), so they are refused here, named by click with the option."""
    for v in value if isinstance(value, (list, tuple)) else [value]:
        if v is not None and not (math.isfinite(v) and v > 0):
            raise typer.BadParameter(f"{v:g} is not a positive finite number")
    return value


def number_list(text: Optional[str], option: str, kind=float) -> Optional[list]:
    """A comma-separated option (``--rates 1,2.5``): one or more positive finite numbers of ``kind``."""
    if text is None:
        return None
    try:
        values = [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"{option}: expected comma-separated numbers, got {text!r}") from None
    if not values or not all(math.isfinite(v) and v > 0 for v in values):
        raise ConfigError(f"{option}: expected one or more positive finite numbers, got {text!r}")
    return values
