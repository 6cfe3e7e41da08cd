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


def strict_load(text: str):
    """Parse one YAML document like ``yaml.safe_load``, but a duplicate key raises ``yaml.YAMLError``."""
    return yaml.load(text, Loader=_StrictLoader)
