"""A pydantic ValidationError as the one line a user reads: the dotted field and what to change."""

from __future__ import annotations

from specplan.config_cross import CrossSectionError


def _union_tag(part) -> bool:
    """pydantic's name for one member of a field that takes several types (``float``, ``dict[int,float]``)."""
    return isinstance(part, str) and (part in ("float", "int", "str", "bool") or "[" in part)


def _first_error(errors: list[dict]) -> dict:
    """The first error; for a field taking several types (``t_base_s``: a number or a table over B),
    pydantic reports each member's complaint: the one that went deepest is about the value's own type."""
    first = errors[0]
    tag = next((i for i, part in enumerate(first["loc"]) if _union_tag(part)), None)
    if tag is None:
        return first
    same = [e for e in errors if e["loc"][:tag] == first["loc"][:tag]]
    return max(same, key=lambda e: len(e["loc"]))  # max keeps the first of equals


def _shown(part) -> str:
    """A field name as typed, quoted where it holds what a line cannot show (a newline, a blank)."""
    text = str(part)
    return text if text.isprintable() and text.strip() == text and text else repr(text)


def format_validation_error(exc, source: str = "config") -> str:
    """Turn a pydantic ValidationError into one line naming the dotted field."""
    err = _first_error(exc.errors())
    loc = ".".join(_shown(p) for p in err["loc"] if not _union_tag(p))
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = "unknown field (check the spelling against the documented fields)"
    elif err["type"] == "finite_number":
        msg = "must be a finite number (NaN or infinity has no meaning here; leave the field out for its default)"
    rule = err.get("ctx", {}).get("error")
    if isinstance(rule, CrossSectionError):
        loc = rule.field
    return f"{source}: {loc or '<root>'}: {msg}"
