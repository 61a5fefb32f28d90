"""API keys are asked for by the jobs a run will start, not by the whole config.

The config below calls a synthetic judge and two hosted ones. Rerunning only the
synthetic judge's shard needs no key; a run that also answers the hosted shards
stops before any job starts, naming exactly the key that is missing and the model
that needs it; a dry run of that run only warns.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import REPO, snakemake_cmd
from context_effects.config import validate_config
from context_effects.llm.factory import model_ref
from context_effects.llm.shards import write_request_shard
from context_effects.llm.types import LLMRequest, Sampling

CONFIG = {
    "run": {"label": "keys", "kind": "paper"},
    "datasets": {"truthfulqa": {"source": "local", "local_path": "data/demo/truthfulqa.jsonl", "n_items": 4}},
    "models": {
        "sim": {"backend": "synthetic", "model_id": "sim"},
        "gpt": {"backend": "openai", "model_id": "gpt-4o"},
        "claude": {"backend": "anthropic", "model_id": "claude-sonnet-4-5"},
    },
    "conformity": {"enabled": False},
    "amel": {"enabled": False},
    "anchoring": {"judges": ["sim", "gpt", "claude"], "benchmark_datasets": ["truthfulqa"], "tasks_per_dataset": 4},
}
MODELS = ("sim", "gpt", "claude")
KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")


def _response(model: str) -> str:
    return f"results/responses/smoke/judge/{model}/0000.parquet"


@pytest.fixture
def keys_workdir(workdir: Path) -> tuple[Path, Path]:
    cfg_path = workdir / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(CONFIG))
    cfg = validate_config(CONFIG)
    for model in MODELS:
        ref = model_ref(model, cfg["models"][model])
        prompt = 'Question: Q?. Answer to grade: [synthetic q=+0.5000] An answer.. Respond ONLY with JSON: "rating": <integer 1--5>.'
        request = LLMRequest(
            model=ref,
            messages=(("user", prompt),),
            sampling=Sampling(temperature=0.0, max_tokens=16, seed=42),
            meta={"study": "conformity", "role": "judge", "judge": model, "pass": "blind"},
        )
        write_request_shard(workdir / f"results/requests/smoke/judge/{model}/0000.parquet", [request])
    return workdir, cfg_path


def _run(workdir: Path, cfg_path: Path, *args: str, **env: str):
    """Snakemake with both provider keys unset except those given in ``env``."""
    full = {k: v for k, v in os.environ.items() if k not in KEYS}
    full.update(env)
    return subprocess.run(
        snakemake_cmd("--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir), f"--configfile={cfg_path}", *args),
        cwd=REPO, env=full, capture_output=True, text=True, timeout=300,
    )


def test_a_run_of_local_jobs_needs_no_key(keys_workdir):
    workdir, cfg_path = keys_workdir
    res = _run(workdir, cfg_path, "--cores", "1", _response("sim"))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert (workdir / _response("sim")).exists()
    assert "Missing API key" not in res.stdout + res.stderr


def test_a_run_of_hosted_jobs_names_exactly_the_missing_key_before_any_job(keys_workdir):
    workdir, cfg_path = keys_workdir
    targets = [_response(m) for m in MODELS]
    res = _run(workdir, cfg_path, "--cores", "1", *targets, OPENAI_API_KEY="sk-test-not-used")
    out = res.stdout + res.stderr
    assert res.returncode != 0, out[-3000:]
    assert "ANTHROPIC_API_KEY  (needed by: claude)" in out, out[-3000:]
    assert "OPENAI_API_KEY  (needed by" not in out
    # Stopped before any job: not even the free synthetic shard was answered.
    assert not (workdir / "results" / "responses").exists()
    assert not (workdir / "logs").exists()


def test_a_dry_run_warns_about_missing_keys_and_does_not_fail(keys_workdir):
    workdir, cfg_path = keys_workdir
    targets = [_response(m) for m in MODELS]
    res = _run(workdir, cfg_path, "-n", *targets)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    assert "Dry run" in out and "ANTHROPIC_API_KEY  (needed by: claude)" in out, out[-3000:]
    assert "OPENAI_API_KEY  (needed by: gpt)" in out
    # A dry run of local jobs alone has nothing to warn about.
    res = _run(workdir, cfg_path, "-n", _response("sim"))
    assert res.returncode == 0 and "API key" not in res.stdout + res.stderr
