"""Tokenizer adapters: one small interface over SentencePiece, HuggingFace ``tokenizer.json``,
tiktoken-style BPE files and Llama-3 (PyPI ``llama-models``), chosen by name or by path.

Every adapter offers two encodings, because engines tokenize the two sides of a request differently:

- :meth:`Tokenizer.encode` for response text: plain text, no BOS, special-token strings are ordinary
  text. This is how a generated answer re-encodes (``sp.encode(answer)``).
- :meth:`Tokenizer.encode_prompt` for a templated prompt: special-token strings written in the text
  (``<s>``, ``</s>``, ``<|eot_id|>``, ...) become their ids; nothing is added. Chat templates write
  the BOS string themselves, so the prompt tokens are exactly what the engine saw.

The tokenizer libraries are imported only when an adapter is built (extra ``specplan[tokenizers]``);
the bundled traces are pre-tokenized and need none of them.
"""

from __future__ import annotations

import gzip
import re
import zlib
from abc import ABC, abstractmethod
from functools import lru_cache
from importlib import resources
from pathlib import Path

from specplan.errors import ConfigError, one_line, read_failure

#: Names accepted by :func:`get_tokenizer` besides paths.
TOKENIZER_NAMES = ("llama2", "llama3")


def _require(module: str):
    try:
        return __import__(module, fromlist=["_"])
    except ImportError:
        raise ConfigError(f"tokenizer: the Python package '{module}' is not installed (pip install 'specplan[tokenizers]')") from None


class Tokenizer(ABC):
    """A tokenizer as the loaders need it."""

    name: str

    @abstractmethod
    def encode(self, text: str) -> list[int]:
        """Plain text to ids: no BOS, special-token strings treated as text."""

    @abstractmethod
    def encode_prompt(self, text: str) -> list[int]:
        """A rendered prompt to ids: special-token strings in ``text`` become their ids; nothing added."""

    @abstractmethod
    def special_id(self, token: str) -> int | None:
        """The id of a special token string (``</s>``, ``<|eot_id|>``), or None if it has none."""

    def token_id(self, token: str) -> int:
        """Like :meth:`special_id` but a missing token is a ConfigError naming the tokenizer."""
        tid = self.special_id(token)
        if tid is None:
            raise ConfigError(f"tokenizer '{self.name}' has no special token {token!r} (does the chat template fit this tokenizer?)")
        return tid

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class SentencePieceTokenizer(Tokenizer):
    """A SentencePiece model with HuggingFace's legacy ``LlamaTokenizer`` behaviour.

    Prompts are split on the special-token strings (``<s>``, ``</s>``, ``<unk>``); each special
    becomes its id and every piece in between is SentencePiece-encoded on its own, dummy prefix
    included (so ``USER`` after ``</s>`` is ``▁US ER``). ``AutoTokenizer`` gives exactly this for
    vicuna-style folders in transformers 4.37-4.48. ``path`` may be gzip-compressed (``.gz``).
    """

    def __init__(self, path: str | Path, name: str | None = None) -> None:
        spm = _require("sentencepiece")
        path = Path(path)
        self.name = name or str(path)
        try:
            if path.suffix == ".gz":
                self.sp = spm.SentencePieceProcessor(model_proto=gzip.decompress(path.read_bytes()))
            else:
                self.sp = spm.SentencePieceProcessor(model_file=str(path))
        except (OSError, RuntimeError, EOFError, zlib.error) as exc:  # a .gz cut short or not gzip too
            raise ConfigError(f"tokenizer: {path}: not a readable SentencePiece model ({one_line(exc)})") from None
        ids = [self.sp.unk_id(), self.sp.bos_id(), self.sp.eos_id()]
        self._specials = {self.sp.id_to_piece(i): i for i in ids if i >= 0}
        self._split = re.compile("(" + "|".join(re.escape(s) for s in sorted(self._specials, key=len, reverse=True)) + ")")

    @property
    def vocab_size(self) -> int:
        return self.sp.vocab_size()

    def encode(self, text: str) -> list[int]:
        return self.sp.encode(text) if text else []

    def encode_prompt(self, text: str) -> list[int]:
        ids: list[int] = []
        for piece in self._split.split(text):
            if piece in self._specials:
                ids.append(self._specials[piece])
            elif piece:
                ids.extend(self.sp.encode(piece))
        return ids

    def special_id(self, token: str) -> int | None:
        return self._specials.get(token)


class HFTokenizer(Tokenizer):
    """A HuggingFace ``tokenizer.json`` through the ``tokenizers`` library.

    The library splits added tokens out of the text itself, so both encodings are the library's
    ``encode(text, add_special_tokens=False)``; the template supplies BOS.
    """

    def __init__(self, path: str | Path, name: str | None = None) -> None:
        lib = _require("tokenizers")
        self.name = name or str(path)
        try:
            self.tok = lib.Tokenizer.from_file(str(path))
        except Exception as exc:  # the library raises a bare Exception on bad files
            raise ConfigError(f"tokenizer: {path}: not a readable tokenizer.json ({exc})") from None

    @property
    def vocab_size(self) -> int:
        return self.tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids

    encode_prompt = encode

    def special_id(self, token: str) -> int | None:
        return self.tok.token_to_id(token)


class TiktokenTokenizer(Tokenizer):
    """A tiktoken ``Encoding``: a BPE rank file (``base64-token rank`` per line), a split pattern and
    special tokens numbered after the ranks (the Llama-3 convention when built by :meth:`from_file`)."""

    def __init__(self, encoding, name: str) -> None:
        self.enc = encoding
        self.name = name

    @classmethod
    def from_file(cls, path: str | Path, pat_str: str | None = None, special_tokens: list[str] = ()) -> "TiktokenTokenizer":
        """Read a tiktoken-style rank file; ``pat_str`` defaults to Llama-3's split pattern, and the
        special tokens (none by default) get the ids after the last rank."""
        tiktoken = _require("tiktoken")
        llama3 = _require("llama_models.llama3.tokenizer")
        from llama_models.tokenizer_utils import load_bpe_file

        try:
            ranks = load_bpe_file(Path(path))
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"tokenizer: {path}: not a readable tiktoken BPE file ({exc})") from None
        if not ranks:
            raise ConfigError(f"tokenizer: {path}: no BPE ranks in the file")
        specials = {tok: len(ranks) + i for i, tok in enumerate(special_tokens)}
        enc = tiktoken.Encoding(name=Path(path).name, pat_str=pat_str or llama3.Tokenizer.pat_str, mergeable_ranks=ranks, special_tokens=specials)
        return cls(enc, name=str(path))

    @property
    def vocab_size(self) -> int:
        return self.enc.n_vocab

    def encode(self, text: str) -> list[int]:
        return self.enc.encode(text, disallowed_special=())

    def encode_prompt(self, text: str) -> list[int]:
        return self.enc.encode(text, allowed_special="all")

    def special_id(self, token: str) -> int | None:
        return self.enc.encode_single_token(token) if token in self.enc.special_tokens_set else None


class Llama3Tokenizer(TiktokenTokenizer):
    """Llama-3 / 3.1 through ``llama_models.llama3.tokenizer.Tokenizer`` (exact for Meta-Llama-3
    models), whose ``encode`` also splits very long texts the way Meta's reference code does."""

    def __init__(self, path: str | Path | None = None) -> None:
        llama3 = _require("llama_models.llama3.tokenizer")
        self.tok = llama3.Tokenizer.get_instance() if path is None else llama3.Tokenizer(Path(path))
        super().__init__(self.tok.model, name="llama3" if path is None else str(path))

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, bos=False, eos=False)

    def encode_prompt(self, text: str) -> list[int]:
        return self.tok.encode(text, bos=False, eos=False, allowed_special="all")


def bundled_llama2_path() -> Path:
    """The Llama-1/2 SentencePiece model shipped as package data (gzip; Llama 2 Community License)."""
    return Path(str(resources.files("specplan") / "data" / "tokenizers" / "llama2" / "tokenizer.model.gz"))


def _is_tiktoken_file(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            head = fh.read(256)
    except OSError as exc:
        raise ConfigError(f"tokenizer: {path}: cannot read ({read_failure(exc)})") from None
    first = head.split(b"\n", 1)[0]
    return re.fullmatch(rb"[A-Za-z0-9+/=]+ \d+\r?", first) is not None


@lru_cache(maxsize=8)
def _cached(spec: str) -> Tokenizer:
    if spec == "llama2":
        return SentencePieceTokenizer(bundled_llama2_path(), name="llama2")
    if spec == "llama3":
        return Llama3Tokenizer()
    path = Path(spec)
    if path.is_dir():
        for candidate in ("tokenizer.json", "tokenizer.model"):
            if (path / candidate).is_file():
                return _cached(str(path / candidate))
        raise ConfigError(f"tokenizer: {path}: folder holds neither tokenizer.json nor tokenizer.model")
    if not path.is_file():
        raise ConfigError(
            f"tokenizer: unknown tokenizer {spec!r}: give one of {', '.join(TOKENIZER_NAMES)} or a path to "
            "a SentencePiece .model, a tokenizer.json or a tiktoken BPE file"
        )
    if path.name.endswith(".json"):
        return HFTokenizer(path)
    if path.name.endswith(".gz"):
        return SentencePieceTokenizer(path)
    if _is_tiktoken_file(path):
        # A Llama-3 checkpoint's tokenizer.model is a tiktoken rank file: read it the Llama-3 way.
        return Llama3Tokenizer(path) if path.name.endswith(".model") else TiktokenTokenizer.from_file(path)
    return SentencePieceTokenizer(path)


def get_tokenizer(spec: "str | Path | Tokenizer") -> Tokenizer:
    """A tokenizer by name (``llama2``, ``llama3``), by path, or passed through if already built.

    Paths: a ``tokenizer.json`` (HuggingFace), a SentencePiece ``.model`` (optionally ``.gz``), a
    tiktoken-style rank file (``.tiktoken``, or a Llama-3 ``tokenizer.model``, recognised by content),
    or a folder holding one of them. Anything else is a ConfigError naming the field.
    """
    if isinstance(spec, Tokenizer):
        return spec
    return _cached(str(spec))
