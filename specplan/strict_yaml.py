"""YAML loading that refuses a duplicate mapping key: PyYAML's ``safe_load`` keeps the last one
silently, so a config with ``max_draft_len`` given twice would run with whichever came second."""

from __future__ import annotations

import yaml


class _StrictLoader(yaml.SafeLoader):
    """``SafeLoader`` whose mappings reject a key given twice, naming the key and where it came first."""


def _mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    first_line: dict = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # ``<<: *defaults`` keys may be overridden
            continue
        key = loader.construct_object(key_node, deep=deep)
        try:
            if key in first_line:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first on line {first_line[key]}); give each key once",
                    key_node.start_mark)
            first_line[key] = key_node.start_mark.line + 1
        except TypeError:  # an unhashable key: construct_mapping below reports it
            continue
    return loader.construct_mapping(node, deep=deep)  # merges (<<) are flattened in there


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


#: Limits on what a config may expand to: aliases let a few lines stand for billions of nodes
#: ("billion laughs"), which every later walk over the data (validation, hashing, JSON) would visit.
MAX_TEXT_CHARS = 16 * 2 ** 20
MAX_EXPANDED_NODES = 1_000_000


class YAMLLimitError(yaml.YAMLError):
    """A document over :data:`MAX_TEXT_CHARS` or expanding (aliases followed) to more than
    :data:`MAX_EXPANDED_NODES` nodes."""

    def __init__(self, problem: str):
        super().__init__(problem)
        self.problem, self.problem_mark = problem, None


def _expanded_size(node: yaml.Node, memo: dict) -> int:
    """Nodes in ``node`` with every alias expanded (memoised per node: linear in the document)."""
    key = id(node)
    if key not in memo:
        memo[key] = 0  # a recursive alias counts once, so the walk ends
        children = [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else \
            node.value if isinstance(node, yaml.SequenceNode) else []
        memo[key] = min(1 + sum(_expanded_size(c, memo) for c in children), MAX_EXPANDED_NODES + 1)
    return memo[key]


def strict_load(text: str):
    """Parse one YAML document like ``yaml.safe_load``, but a duplicate key raises ``yaml.YAMLError``,
    and so does a document over the size limits (:class:`YAMLLimitError`)."""
    if len(text) > MAX_TEXT_CHARS:
        raise YAMLLimitError(f"{len(text)} characters, over the {MAX_TEXT_CHARS} a config may hold")
    loader = _StrictLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_size(node, {}) > MAX_EXPANDED_NODES:
            raise YAMLLimitError(f"aliases expand it to over {MAX_EXPANDED_NODES} values; write the data out "
                                 "without nested aliases")
        return loader.construct_document(node)
    finally:
        loader.dispose()
