"""Reply policies: one registry, resolved by one function, checked when a shard is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from context_effects.llm.replies import POLICIES, ReplyPolicy, resolve_policy
from context_effects.llm.shards import META_KEY, read_request_shard, write_request_shard
from context_effects.llm.types import LLMRequest, ModelRef, Sampling

REPO = Path(__file__).resolve().parents[1]
RETRY = {"retry_temperature_step": 0.4, "retry_temperature_cap": 1.0}


def request(**sampling) -> LLMRequest:
    return LLMRequest(
        model=ModelRef("vllm", "m"),
        messages=(("system", "s"), ("user", "Rate this.")),
        sampling=Sampling(**{"max_tokens": 16, **sampling}),
        meta={"item": 7},
    )


def test_unknown_policy_names_the_allowed_ones():
    with pytest.raises(ValueError) as exc:
        resolve_policy("rating")
    message = str(exc.value)
    assert "unknown reply policy 'rating'" in message
    for name in POLICIES:
        assert name in message


def test_wrong_parameters_name_what_the_policy_takes():
    with pytest.raises(ValueError, match=r"'conformity\.generation' takes retry_temperature_step, retry_temperature_cap"):
        resolve_policy("conformity.generation", {"step": 0.1})
    with pytest.raises(ValueError, match=r"'conformity\.generation' takes"):
        resolve_policy("conformity.generation")  # both parameters are required
    with pytest.raises(ValueError, match=r"'conformity\.rating' takes reask, retry_temperature_step, "
                                         r"retry_temperature_cap; got \['reminder'\]"):
        resolve_policy("conformity.rating", {"reminder": "x"})


def test_every_registered_policy_resolves_to_itself():
    params = {"conformity.generation": RETRY}
    for name in POLICIES:
        policy = resolve_policy(name, params.get(name))
        assert isinstance(policy, ReplyPolicy) and policy.name == name


def test_study_policies_validate_and_reask():
    generation = resolve_policy("conformity.generation", RETRY)
    assert generation.validate("  An answer. ") == ("An answer.", None)
    assert generation.validate("  ") == (None, "empty_completion")
    req = request(temperature=0.0, seed=5)
    again = generation.reask(req, 1, "empty_completion")
    third = generation.reask(again, 2, "empty_completion")
    # seed 002 App. A.6: temperature +step per re-ask, capped; seed +1; a new key each time.
    assert (again.sampling.temperature, again.sampling.seed, again.attempt) == (0.4, 6, 1)
    assert (third.sampling.temperature, third.sampling.seed) == (0.8, 7)
    assert generation.reask(third, 3, "x").sampling.temperature == 1.0
    assert len({req.key, again.key, third.key}) == 3
    assert again.meta == {"item": 7, "reask_reason": "empty_completion", "reask_of": req.key}

    rating = resolve_policy("conformity.rating")
    assert rating.validate('{"rating": 4}') == (4, None)
    assert rating.validate("Four.") == (None, "no_json_object")
    reminded = rating.reask(req, 1, "no_json_object")
    assert reminded.messages[-1][1].startswith("Rate this.\n\nReply with exactly one JSON object")
    assert reminded.sampling == req.sampling and reminded.key != req.key

    score = resolve_policy("anchoring.score")
    assert score.validate('{"score": 5}') == (5, None)
    assert score.validate('{"score": 6}') == (None, "score_out_of_range")
    assert '{"score": <integer 1-5>}' in score.reask(req, 1, "no_json_object").messages[-1][1]

    assert resolve_policy("none").validate("anything") == ("anything", None)


def test_shard_records_the_policy_and_fails_early(tmp_path):
    path = tmp_path / "shard.parquet"
    with pytest.raises(ValueError, match="unknown reply policy 'nonempty'"):
        write_request_shard(path, [request()], reply_policy="nonempty")
    with pytest.raises(ValueError, match="max_attempts"):
        write_request_shard(path, [request()], reply_policy="conformity.rating", max_attempts=0)
    assert not path.exists()
    write_request_shard(path, [request()], reply_policy="conformity.generation", policy_params=RETRY, max_attempts=6)
    requests, policy = read_request_shard(path)
    assert [r.key for r in requests] == [request().key]
    assert policy == {"reply_policy": "conformity.generation", "policy_params": RETRY, "max_attempts": 6}
    write_request_shard(path, [request()])
    assert read_request_shard(path)[1] == {"reply_policy": "none", "policy_params": {}, "max_attempts": 1}


def test_shard_from_before_reply_policies_is_refused(tmp_path):
    path = tmp_path / "old.parquet"
    table = pa.table({"request_json": []}).replace_schema_metadata(
        {META_KEY: json.dumps({"validator": "rating", "max_attempts": 3}).encode()}
    )
    pq.write_table(table, path)
    with pytest.raises(ValueError, match="before reply policies"):
        read_request_shard(path)


def test_llm_layer_imports_no_study_package():
    code = (
        "import sys, pkgutil, importlib, context_effects.llm as llm, context_effects.llm.backends as b\n"
        "for pkg in (llm, b):\n"
        "    for m in pkgutil.iter_modules(pkg.__path__):\n"
        "        importlib.import_module(f'{pkg.__name__}.{m.name}')\n"
        "studies = ('conformity', 'amel', 'anchoring')\n"
        "print(sorted(n for n in sys.modules if n.split('.')[1:2] and n.split('.')[1] in studies))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO, env=env)
    assert out.stdout.strip() == "[]"
