"""Engine configs out and in: specplan settings as TensorRT-LLM / vLLM files (``export``), and an
operator's own TensorRT-LLM options YAML, vLLM speculative-config JSON or serve command line as
scenario sections (``importer``), so an exported file read back gives the same sections."""

from specplan.engine_config.importer import ImportResult, engine_config_layer, import_engine_config, merge_sections

__all__ = ["ImportResult", "engine_config_layer", "import_engine_config", "merge_sections"]
