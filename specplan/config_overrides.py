"""``--set section.key=value`` overrides: parsed as YAML values, each setting given once, applied to
a scenario mapping before it is validated."""

from __future__ import annotations

import yaml

from specplan.errors import ConfigError


def set_dotted(data: dict, dotted: str, value) -> None:
    """Set ``a.b.c = value`` inside nested dicts, creating sections as needed."""
    parts = dotted.split(".")
    node = data
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{dotted}: '{part}' is not a section")
        node = child
    node[parts[-1]] = value


def parse_overrides(items: list[str]) -> list[tuple[str, object]]:
    """``section.key=value`` strings; values are parsed as YAML (``4``, ``true``, ``{4: 4, 8: 2}``)."""
    out = []
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--set {item}: expected section.key=value")
        key, raw = item.split("=", 1)
        try:
            out.append((key.strip(), yaml.safe_load(raw)))
        except yaml.YAMLError as exc:
            raise ConfigError(f"--set {key}: value is not valid YAML ({exc.problem})") from None
        _refuse_repeat(out)
    return out


def _refuse_repeat(overrides: list[tuple[str, object]]) -> None:
    """The last ``--set`` may not set again what an earlier one did (the same key, or a section and a
    key inside it): applied in order, one would silently win."""
    key, value = overrides[-1]
    for earlier, first in overrides[:-1]:
        if key == earlier:
            raise ConfigError(f"--set {key}: given twice ({first!r}, then {value!r}); give each setting once")
        inner, outer = sorted((key, earlier), key=len, reverse=True)
        if inner.startswith(outer + "."):
            raise ConfigError(f"--set {inner}: also set by --set {outer}=...; give it in one place")
