"""The fixed choices of command-line options, as enums so ``--help`` lists them and a wrong value is
one usage line (exit 2). Each compares equal to its string value. Options that are config fields
(``--drafter``, ``--pld-variant``) stay strings: the config model validates them, so a command and a
scenario refuse a value with the same line."""

from __future__ import annotations

from enum import Enum


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
