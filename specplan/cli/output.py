"""Terminal output shared by the commands: a console that never truncates or wraps when piped, and the
``--out`` folder a run claims (refusing another run's unless ``--overwrite``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, Iterable, Optional

from rich.console import Console

# Wide enough for any table; rich sizes a table to its content, so this only lifts the 80-column cap.
PIPE_WIDTH = 10_000


def console(stderr: bool = False) -> Console:
    """A rich console: the terminal's width on a TTY; piped, no width limit and no wrapping, so
    headers and cells reach a file or ``grep`` whole."""
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr)
    return Console(stderr=stderr, width=PIPE_WIDTH, soft_wrap=True)


#: What marks a folder as one run's output: the command and a fingerprint of its inputs.
RUN_MARKER = ".specplan-run.json"


def _fingerprint(command: str, inputs) -> str:
    import hashlib
    import json

    text = json.dumps({"command": command, "inputs": inputs}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def claim_output_dir(out: Path, command: str, inputs, overwrite: bool, outputs: Iterable[str],
                     same_run: Optional[Callable[[Path], bool]] = None) -> Path:
    """``--out`` for a run of ``command`` on ``inputs`` (anything JSON-able that identifies the run):
    made if missing; the same run's folder is taken as is (to resume or rewrite it); a folder holding
    another run is refused in one line unless ``overwrite``, which clears it first. Only a folder
    that is a specplan run (its marker, or nothing but ``outputs`` names) is ever cleared.

    A folder of an older specplan (no marker, only ``outputs`` names) counts as the same run when
    ``same_run(folder)`` says so (default: yes, as before markers)."""
    import json
    import shutil

    from specplan.atomic import atomic_write_text
    from specplan.errors import ConfigError
    from specplan.outputs import check_output_dir

    out = Path(out)
    fingerprint = _fingerprint(command, inputs)
    try:
        entries = list(out.iterdir()) if out.is_dir() else []
    except OSError as exc:
        raise ConfigError(f"--out {out}: cannot read the folder ({exc.strerror or exc}); choose another") from None
    if entries:
        marker = out / RUN_MARKER
        held = _read_marker(marker)
        ours = held is not None or all(p.name in set(outputs) for p in entries)
        same = (held.get("fingerprint") == fingerprint) if held is not None else (
            ours and (same_run is None or same_run(out)))
        if not ours:
            raise ConfigError(f"--out {out}: holds files that are not a specplan run's; choose an empty or new folder")
        if overwrite:
            for p in entries:
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        elif not same:
            what = f"a {held['command']} run" if held else "another run"
            raise ConfigError(f"--out {out}: holds {what} of other inputs; choose another folder, or add "
                              "--overwrite to clear it")
    check_output_dir(out)
    atomic_write_text(out / RUN_MARKER, json.dumps({"command": command, "fingerprint": fingerprint}) + "\n")
    return out


def _read_marker(path: Path) -> Optional[dict]:
    import json

    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "fingerprint" in data else None
