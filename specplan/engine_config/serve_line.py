"""A serve command as operators paste it, reduced to the engine and its arguments.

What is taken off before the engine's own arguments: comment lines and backslash line
continuations; environment assignments (``VLLM_USE_V2_MODEL_RUNNER=0 vllm serve ...``, ``env``,
``exec``); launchers (``mpirun``/``mpiexec``/``srun`` with their options, ``trtllm-llmapi-launch``,
``bash -c "..."``); a binary given by path, quoted or not (``"/opt/venv/bin/vllm" serve``); the
module forms ``python -m vllm.entrypoints.openai.api_server`` and ``python -m
tensorrt_llm.commands.serve``; ``trtllm-serve serve``; and whatever follows a shell operator
(``> log 2>&1``, ``| tee``, ``&``). Tokens are split as the shell would (``shlex``); variables are
not expanded, so an option whose value is ``$TP`` is refused where the value is read.

Options: ``--flag value``, ``--flag=value``, bare switches, and vLLM's dotted JSON-argument form
(``--speculative-config.method ngram``), which vLLM's ``FlexibleArgumentParser`` folds into the
``--speculative-config`` object. An option given twice is refused with both values named (argparse
and click would keep the last one silently).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any, Optional

from specplan.errors import ConfigError

_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_SHELL_STOPS = {"|", "||", "&&", ";", "&", "|&"}
_LAUNCHERS = {"mpirun", "mpiexec", "srun"}
#: ``python -m`` modules that are the engines' servers.
_MODULES = {"vllm.entrypoints.openai.api_server": "vllm", "vllm.entrypoints.cli.main": "vllm",
            "tensorrt_llm.commands.serve": "trtllm"}
#: Switches that take no value, in the engines' spellings (dashes; underscores are read as dashes).
#: vLLM's boolean options are ``BooleanOptionalAction`` (``--x`` / ``--no-x``), trtllm-serve's click flags.
_SWITCHES = {"trust-remote-code", "enforce-eager", "async-scheduling", "disable-log-requests", "disable-log-stats",
             "enable-auto-tool-choice", "enable-expert-parallel", "enable-chunked-prefill", "enable-prefix-caching",
             "enable-lora", "enable-log-requests", "disable-custom-all-reduce", "no-telemetry", "headless",
             "disable-fastapi-docs", "enable-prompt-tokens-details", "enable-force-include-usage",
             "enable-flashinfer-autotune", "enable-attention-dp", "enable-hiprune", "skip-tokenizer-init",
             "disable-overlap-scheduler", "enable-sleep-mode", "allow-run-as-root", "enable-server-load-tracking"}


@dataclass
class Command:
    """An engine's serve command: which engine, the environment it set, positional words and options."""

    engine: str  # vllm | trtllm
    env: dict = field(default_factory=dict)
    positional: list[str] = field(default_factory=list)
    options: dict[str, Optional[str]] = field(default_factory=dict)  # name (dashes) -> value, in order
    spelled: dict[str, str] = field(default_factory=dict)  # name -> as written (for messages)
    dotted: dict[str, dict[str, Any]] = field(default_factory=dict)  # json option -> {key: value}


def statements(text: str) -> list[str]:
    """The shell statements of ``text``: backslash-continued lines joined, a quoted value that spans
    lines (a JSON object over several lines) kept whole, comment and blank lines dropped."""
    out, buf = [], ""
    for line in text.replace("\\\r\n", " ").replace("\\\n", " ").splitlines():
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        buf = f"{buf}\n{line}" if buf else line
        try:
            shlex.split(buf)
        except ValueError:  # a quote still open: the statement goes on
            continue
        out.append(buf.strip())
        buf = ""
    return out + ([buf.strip()] if buf else [])


def join_lines(text: str) -> str:
    """The statements of ``text`` on one line (empty when it holds nothing but comments)."""
    return " ".join(statements(text))


_ASSIGN = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(\S*)$")


def _expand(line: str, variables: dict) -> str:
    """``$NAME`` / ``${NAME}`` replaced where an earlier statement of the file assigned NAME."""
    def value(m: re.Match) -> str:
        name = m.group(1) or m.group(2)
        return variables.get(name, m.group(0))
    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)", value, line)


def _engine_at(words: list[str], i: int) -> tuple[Optional[str], int]:
    """The engine whose server starts at ``words[i]`` and the index of its first argument, or (None, i)."""
    name = PurePosixPath(words[i]).name
    if name == "vllm" and i + 1 < len(words) and words[i + 1] == "serve":
        return "vllm", i + 2
    if name == "trtllm-serve":
        return "trtllm", i + 2 if i + 1 < len(words) and words[i + 1] == "serve" else i + 1
    if re.fullmatch(r"python[0-9.]*", name) and i + 2 < len(words) and words[i + 1] == "-m":
        module = words[i + 2]
        if module in _MODULES:
            first = i + 3
            if module == "vllm.entrypoints.cli.main" and first < len(words) and words[first] == "serve":
                first += 1
            return _MODULES[module], first
    return None, i


def split_command(text: str, source: str) -> Optional[tuple[str, dict, list[str]]]:
    """``(engine, environment, the engine's arguments)`` of the serve command in ``text`` (the first
    statement that is one; ``NAME=value`` statements before it are expanded into it, as the shell
    would), or None when there is none (then the file is read as a config file)."""
    variables: dict = {}
    for line in statements(text):
        assign = _ASSIGN.match(line)
        if assign:
            variables[assign.group(1)] = assign.group(2).strip("'\"")
            continue
        found = _split_statement(_expand(line, variables), source)
        if found is not None:
            return found
    return None


def _split_statement(line: str, source: str) -> Optional[tuple[str, dict, list[str]]]:
    try:
        words = shlex.split(line)
    except ValueError as exc:
        if re.search(r"\b(vllm|trtllm-serve)\b", line):
            raise ConfigError(f"{source}: the command line cannot be split ({exc}); check its quotes") from None
        return None
    env: dict = {}
    launcher = False  # after mpirun/srun every word up to the engine is the launcher's
    i = 0
    while i < len(words):
        word = words[i]
        engine, first = _engine_at(words, i)
        if engine is not None:
            args = words[first:]
            for j, arg in enumerate(args):  # the rest of the line belongs to the shell
                if arg in _SHELL_STOPS or re.match(r"^[0-9&]?>", arg):
                    args = args[:j]
                    break
            return engine, env, args
        if _ENV.match(word):
            key, value = word.split("=", 1)
            env[key] = value
        elif word in ("bash", "sh") and i + 2 < len(words) and words[i + 1] == "-c":
            inner = _split_statement(words[i + 2], source)
            if inner is not None:
                return inner[0], {**env, **inner[1]}, inner[2]
            return None
        elif PurePosixPath(word).name in _LAUNCHERS:
            launcher = True
        elif not (launcher or word in ("env", "exec", "nohup", "trtllm-llmapi-launch")):
            return None
        i += 1
    return None


def _is_value(word: str) -> bool:
    return not word.startswith("-") or re.fullmatch(r"-[0-9.]+", word) is not None


def parse_options(engine: str, env: dict, args: list[str]) -> Command:
    """Positional words and options of an engine's arguments; an option given twice is refused."""
    cmd = Command(engine, env)
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("-") or arg == "-":
            cmd.positional.append(arg)
            i += 1
            continue
        raw, value = (arg.split("=", 1) + [None])[:2] if "=" in arg else (arg, None)
        name = raw.lstrip("-").replace("_", "-")
        if value is None and name not in _SWITCHES and not name.startswith("no-") \
                and i + 1 < len(args) and _is_value(args[i + 1]):
            value, i = args[i + 1], i + 1
        i += 1
        if "." in name:  # --speculative-config.method ngram
            base, key = name.split(".", 1)
            keys = cmd.dotted.setdefault(base, {})
            key = key.replace("-", "_")
            if key in keys:
                raise ConfigError(f"{raw}: given twice ({keys[key]!r} and {value!r}); give it once")
            keys[key] = _json_value(value)
            continue
        if name in cmd.options:
            raise ConfigError(f"{raw}: given twice ({cmd.options[name]!r} and {value!r}); give it once")
        cmd.options[name] = value
        cmd.spelled[name] = raw
    return cmd


def _json_value(value: Optional[str]) -> Any:
    """A dotted option's value as vLLM reads it: JSON where it parses (``4``, ``true``), else the text."""
    if value is None:
        return True
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def json_option(cmd: Command, name: str) -> Optional[dict]:
    """A JSON-object option (``--speculative-config``) merged with its dotted keys; a key given both
    ways is refused."""
    raw = cmd.options.get(name)
    obj: Optional[dict] = None
    if raw is not None:
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"--{name}: invalid JSON ({exc.msg}); quote the object in single quotes") from None
        if not isinstance(obj, dict):
            raise ConfigError(f"--{name}: expected a JSON object, got {raw!r}")
    dotted = cmd.dotted.get(name, {})
    if obj is None and not dotted:
        return None
    obj = dict(obj or {})
    for key, value in dotted.items():
        if key in obj:
            raise ConfigError(f"--{name}.{key}: given twice (in --{name} as {obj[key]!r} and as {value!r}); give it once")
        obj[key] = value
    return obj


def parse_human_int(value: Optional[str], flag: str) -> int:
    """An integer option as vLLM reads it (``human_readable_int``): ``2048``, ``16k`` (x1000) or
    ``16K`` (x1024), ``1m``/``1M``, ``1g``/``1G``; at least 1."""
    text = (value or "").strip()
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([kKmMgG]?)", text)
    if not m:
        hint = "; shell variables are not expanded, write the value" if text.startswith("$") else ""
        raise ConfigError(f"--{flag}: expected an integer, got {value!r}{hint}")
    number, unit = float(m.group(1)), m.group(2)
    scale = {"": 1, "k": 10 ** 3, "m": 10 ** 6, "g": 10 ** 9, "K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30}[unit]
    out = number * scale
    if out != int(out) or out < 1:
        raise ConfigError(f"--{flag}: must be an integer >= 1, got {value!r}")
    return int(out)
