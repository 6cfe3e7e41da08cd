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


#: The largest settings file (config, profile, template, tokenizer_config.json) read whole: real ones
#: are kilobytes to a few megabytes.
MAX_SETTINGS_BYTES = 64 * 1024 * 1024


def read_checked(path, what: str = "", error: type = None, max_bytes: int = MAX_SETTINGS_BYTES) -> str:
    """A whole file as UTF-8 text, or one ``error`` line (ConfigError by default) naming ``what``
    (the option or field, e.g. ``"workload.tokenizer: "``) and the file: missing, not a file,
    unreadable, larger than ``max_bytes``, or not UTF-8."""
    from pathlib import Path

    error = error or ConfigError
    path = Path(path)
    try:
        if not path.is_file():
            raise error(f"{what}{path}: {'not a file' if path.exists() else 'no such file'}")
        size = path.stat().st_size
        if size > max_bytes:
            raise error(f"{what}{path}: {size} bytes, more than the {max_bytes} read for such a file; "
                        "is it the right file?")
        return path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{what}{path}: cannot read ({read_failure(exc)})") from None
