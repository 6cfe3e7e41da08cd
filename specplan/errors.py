"""User-facing errors: one clear line that names the file, field or line and how to fix it."""


class SpecplanError(Exception):
    """An error caused by user input (config, trace, profile), reported without a traceback."""


class ConfigError(SpecplanError):
    """A configuration value is invalid; the message names the field."""


class TraceError(SpecplanError):
    """A trace file is malformed; the message names the file, line and field."""


def one_line(text) -> str:
    """Collapse a message onto one line: every user error is reported as exactly one line."""
    return " ".join(str(text).split())
