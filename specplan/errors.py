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


def read_failure(exc: Exception) -> str:
    """Why a file could not be read as text, for a one-line message (an OS error or bad encoding)."""
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8"
    return one_line(getattr(exc, "strerror", None) or exc)
