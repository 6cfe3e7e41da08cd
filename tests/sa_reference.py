"""Brute-force reference for the suffix-automaton drafting kernels: plain O(L^2) scans, no automaton.

Semantics (TensorRT-LLM's SA, ``../shared/design/SEMANTICS.md`` §2):

- ``longest``: the longest suffix of the text that also ends at an earlier position (occurrences may
  overlap the final one); among its occurrences, the one that ends earliest. The draft is the text after
  that occurrence, up to K tokens, cut at the end of the text.
- ``fixed(n)``: try suffix lengths n, n-1, ..., 1 and take the first that ends at an earlier position
  (earliest such end); ``match_len`` is that length.
- ``global_search``: the request's suffix (capped at 64 tokens, or at n in n-gram mode) is matched
  against every active slot's text: the longest suffix of it that occurs there with at least one token
  after it, earliest end. The winner is the candidate with the longest match, then the request's own
  slot, then the longest continuation (tokens after the match), then the lowest slot index.

A suffix that occurs earlier has every shorter suffix occurring earlier too (ending at the same place),
so ``longest`` grows the length until it fails instead of trying every length from the top: same answer,
O(L * m^2) instead of O(L^3), which keeps the real-trace test fast.
"""

from __future__ import annotations

GLOBAL_SUFFIX_CAP = 64


def _earliest_end(text: list[int], pattern: list[int], last_end: int) -> int:
    """Smallest end index e <= last_end with text[e-len+1 : e+1] == pattern, or -1."""
    m = len(pattern)
    for end in range(m - 1, last_end + 1):
        if text[end - m + 1:end + 1] == pattern:
            return end
    return -1


def _longest_earlier(text: list[int], pattern: list[int]) -> tuple[int, int]:
    """(m, end): the longest suffix of ``pattern`` ending in ``text`` at or before ``len(text) - 2``, and
    its earliest end; (0, -1) when not even one token does."""
    best = (0, -1)
    for m in range(1, len(pattern) + 1):
        end = _earliest_end(text, pattern[len(pattern) - m:], len(text) - 2)
        if end < 0:
            break
        best = (m, end)
    return best


def longest(text: list[int], k: int) -> tuple[int, list[int]]:
    """(match_len, draft) of TRT's ``lookup()``: 0 and [] when no suffix occurs earlier."""
    m, end = _longest_earlier(text, text[1:])  # the whole text cannot occur earlier
    return (m, text[end + 1:end + 1 + k]) if m else (0, [])


def fixed(text: list[int], k: int, max_ngram: int) -> tuple[int, list[int]]:
    """(match_len, draft) of TRT's n-gram mode: ``lookupFixed(n)``, n = max_ngram .. 1."""
    n = len(text)
    for m in range(max_ngram, 0, -1):
        if n < m + 1:
            continue
        end = _earliest_end(text, text[n - m:], n - 2)
        if end >= 0:
            return m, text[end + 1:end + 1 + k]
    return 0, []


def draft(text: list[int], k: int, max_ngram: int) -> tuple[int, list[int]]:
    """Per-slot drafting: longest match when ``max_ngram == -1``, else the n-gram countdown."""
    return longest(text, k) if max_ngram == -1 else fixed(text, k, max_ngram)


def global_search(
    texts: dict[int, list[int]], own_slot: int, k: int, max_ngram: int = -1
) -> tuple[int, int, list[int]]:
    """(match_len, match_slot, draft) of a global-pool search; (0, -1, []) when nothing matches.

    ``texts`` maps each active slot to its text; ``own_slot`` must be one of them.
    """
    own = texts[own_slot]
    cap = max_ngram if max_ngram > 0 else GLOBAL_SUFFIX_CAP
    suffix = own[len(own) - min(cap, len(own)):]
    best_key, best = None, (0, -1, [])
    for slot in sorted(texts):
        text = texts[slot]
        m, end = _longest_earlier(text, suffix)
        if m:
            key = (m, slot == own_slot, len(text) - end - 1, -slot)
            if best_key is None or key > best_key:
                best_key, best = key, (m, slot, text[end + 1:end + 1 + k])
    return best
