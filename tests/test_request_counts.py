"""The request-count table (``results/tables/run/request_counts.csv``, rule ``request_counts``):
requests, answers and paid calls per study, stage and model, counted from real shards
written and answered by the project's own code; and the published row it reproduces
(seed 000's "75,898 API calls to 11 models")."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from conftest import REPO
from context_effects import request_counts as rc
from context_effects.config import load_config, validate_config
from context_effects.conformity.replies import RATING_SCHEMA
from context_effects.llm.backends.base import Backend
from context_effects.llm.shards import ShardMismatch, answer_shard, write_request_shard
from context_effects.llm.store.responses import ResponseStore
from context_effects.llm.types import LLMRequest, LLMResult, ModelRef, Sampling
from context_effects.outputs import registry, write_registered_table
from context_effects.paper.lookup import lookup, select_row, table_path
from context_effects.paper.reproduction import compare, read_published

TEXT_CSV = REPO / "paper" / "published" / "amel" / "text.csv"
ROW_ID = "abstract.n_api_calls"


class ScriptedBackend(Backend):
    """Replies ``{"rating": 3}`` (or "Yes") to every request, except a prompt holding
    ``"refuse"``, which gets a reply no rating policy accepts, at every ask."""

    name = "scripted"

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def run(self, requests: Sequence[LLMRequest]) -> Iterator[LLMResult]:
        for r in requests:
            self.calls += 1
            text = "I would rather not." if "refuse" in r.messages[-1][1] else (
                '{"rating": 3}' if r.output_schema else "Yes")
            yield LLMResult(key=r.key, text=text, finish_reason="stop", tokens_in=5, tokens_out=2, latency_s=0.0)


def _requests(model: str, prompts: Sequence[str], *, rating: bool = False) -> list[LLMRequest]:
    ref = ModelRef(provider="fake", model_id=f"fake/{model}")
    return [LLMRequest(model=ref, messages=(("user", p),), sampling=Sampling(max_tokens=8),
                       output_schema=RATING_SCHEMA if rating else None, meta={"model": model, "i": i})
            for i, p in enumerate(prompts)]


def _shard(root: Path, study: str, stage: str, model: str, shard: str, requests: list[LLMRequest],
           store: ResponseStore, *, rating: bool = False, ledger: bool = True) -> tuple[Path, Path, Path | None]:
    """Write a request shard under ``root``, answer it (answer_shard) and return the three paths."""
    rel = Path(study) / stage / model / f"{shard}.parquet"
    req, resp = root / "requests" / rel, root / "responses" / rel
    led = root / "ledgers" / rel.with_suffix(".json")
    write_request_shard(req, requests, reply_policy="conformity.rating" if rating else "none",
                        max_attempts=2 if rating else 1)
    answer_shard(req, resp, led, ScriptedBackend(), store, progress=False, handle_signals=False,
                 attempts_log=root / "ledgers" / ".attempts" / rel.with_suffix(".jsonl"))
    if not ledger:
        led.unlink()
    return req, resp, (led if ledger else None)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    """A small run: Study A with a roster model (5 requests) and an extra one (3), Study C's
    judge with two shards of one model (4 + 2 requests, one reply invalid after its re-ask)
    and a second judge whose shard has no ledger (1 request)."""
    root = tmp_path_factory.mktemp("run") / "results"
    store = ResponseStore(root / "store")
    shards = [
        _shard(root, "amel", "judge", "qwen-sim", "domains", _requests("qwen-sim", [f"a{i}" for i in range(5)]),
               store),
        _shard(root, "amel", "judge", "extra-sim", "domains", _requests("extra-sim", ["b0", "b1", "b2"]), store),
        _shard(root, "conformity", "judge", "judge-sim", "truthfulqa-000",
               _requests("judge-sim", ["c0", "c1", "refuse c2", "c3"], rating=True), store, rating=True),
        _shard(root, "conformity", "judge", "judge-sim", "truthfulqa-001",
               _requests("judge-sim", ["d0", "d1"], rating=True), store, rating=True),
        _shard(root, "conformity", "judge", "other-sim", "truthfulqa-000",
               _requests("other-sim", ["e0"], rating=True), store, rating=True, ledger=False),
    ]
    requests, responses, ledgers = (list(x) for x in zip(*shards))
    return {"root": root, "store": store, "requests": requests, "responses": responses, "ledgers": ledgers}


def _table(run: dict, **kw) -> pd.DataFrame:
    return rc.request_counts(run["responses"], run["requests"], run["ledgers"], rosters={"amel": ["qwen-sim"]}, **kw)


def _records(df: pd.DataFrame) -> list[dict]:
    return [{k: (None if pd.isna(v) else v) for k, v in r.items()} for r in df.to_dict("records")]


def test_every_count_of_a_small_run(run):
    df = _table(run)
    assert list(df.columns) == rc.COLUMNS
    assert _records(df) == [
        # Study A: the roster model, the extra one, then the roster total and the total over both.
        dict(study="amel", stage="judge", model="extra-sim", roster=False, shards=1, requests=3, answered=3,
             failed=0, calls=3, cache_hits=0),
        dict(study="amel", stage="judge", model="qwen-sim", roster=True, shards=1, requests=5, answered=5,
             failed=0, calls=5, cache_hits=0),
        dict(study="amel", stage="all", model=rc.ROSTER_TOTAL, roster=True, shards=1, requests=5, answered=5,
             failed=0, calls=5, cache_hits=0),
        dict(study="amel", stage="all", model=rc.EVERY_TOTAL, roster=False, shards=2, requests=8, answered=8,
             failed=0, calls=8, cache_hits=0),
        # Study C: "refuse c2" stays invalid after its re-ask (failed 1; calls 6 + 1 re-ask);
        # the judge without a ledger has no calls, and neither have the totals over it.
        dict(study="conformity", stage="judge", model="judge-sim", roster=True, shards=2, requests=6, answered=5,
             failed=1, calls=7, cache_hits=0),
        dict(study="conformity", stage="judge", model="other-sim", roster=True, shards=1, requests=1,
             answered=1, failed=0, calls=None, cache_hits=None),
        dict(study="conformity", stage="all", model=rc.ROSTER_TOTAL, roster=True, shards=3, requests=7,
             answered=6, failed=1, calls=None, cache_hits=None),
        dict(study="conformity", stage="all", model=rc.EVERY_TOTAL, roster=False, shards=3, requests=7,
             answered=6, failed=1, calls=None, cache_hits=None),
    ]
    # Every count is what the shards hold.
    amel_rows = sum(pq.read_metadata(p).num_rows for p in run["requests"] if "/amel/" in p.as_posix())
    assert df.set_index(["study", "model"]).loc[("amel", rc.EVERY_TOTAL), "requests"] == amel_rows == 8


def test_a_replay_counts_requests_and_answers_but_no_calls(run, tmp_path):
    """The same shard answered again from the store (a replay, a rerun): the same requests
    and answers, no call paid, every answer a cache hit."""
    root = tmp_path / "results"
    req, resp, led = _shard(root, "amel", "judge", "qwen-sim", "domains",
                            _requests("qwen-sim", [f"a{i}" for i in range(5)]), ResponseStore(run["store"].root))
    df = rc.request_counts([resp], [req], [led], rosters={"amel": ["qwen-sim"]})
    row = df.set_index("model").loc["qwen-sim"]
    assert (row["requests"], row["answered"], row["failed"], row["calls"], row["cache_hits"]) == (5, 5, 0, 0, 5)


def test_a_short_response_shard_or_a_stray_path_fails_naming_the_files(run, tmp_path):
    short = tmp_path / "responses" / "amel" / "judge" / "qwen-sim" / "domains.parquet"
    short.parent.mkdir(parents=True)
    pq.write_table(pq.read_table(run["responses"][0]).slice(0, 4), short)
    with pytest.raises(ShardMismatch, match=r"has 4 rows for the 5 requests of .*domains\.parquet"):
        rc.request_counts([short], [run["requests"][0]])
    with pytest.raises(rc.ShardLayoutError, match="not a response shard"):
        rc.request_counts([tmp_path / "x.parquet"], [run["requests"][0]])
    with pytest.raises(rc.ShardLayoutError, match="is not the one response shard"):
        rc.request_counts([run["responses"][0]], [run["requests"][1]])
    with pytest.raises(ValueError, match="2 response shards but 1 request shards"):
        rc.request_counts(run["responses"][:2], run["requests"][:1])


def test_the_rule_writes_what_lookup_reads_and_the_published_row_selects_one_row(run):
    """The rule's output is the path ``lookup('run/request_counts', ...)`` reads; the
    registry entry writes it (CSV + LaTeX) and the shipped row of text.csv selects the
    Study A roster total, exactly one row."""
    rule = (REPO / "workflow" / "rules" / "llm.smk").read_text()
    block = re.search(r"^rule request_counts:\n(.*?)(?=^rule |\Z)", rule, re.M | re.S)
    assert block and '"results/tables/run/request_counts.csv"' in block[1]
    assert 'of_script("request_counts.py")' in block[1]
    results = run["root"]
    assert table_path("run/request_counts", results) == results / "tables" / "run" / "request_counts.csv"
    cfg = validate_config(load_config(REPO / "config" / "synthetic.yaml"))
    assert registry("run").table_files(cfg) == ["results/tables/run/request_counts.csv",
                                                 "results/tables/run/request_counts.tex"]
    settings = {"run_kind": "paper", "rosters": {"amel": ["qwen-sim"]}}
    inputs = {"responses": run["responses"], "requests": run["requests"], "ledgers": run["ledgers"]}
    write_registered_table("run", "request_counts", inputs, settings, str(table_path("run/request_counts", results)),
                           str(results / "tables" / "run" / "request_counts.tex"))
    tex = (results / "tables" / "run" / "request_counts.tex").read_text()
    assert r"\label{tab:request-counts}" in tex and "all (roster)" in tex

    published = read_published([TEXT_CSV]).set_index("id")
    p = published.loc[ROW_ID]
    assert (p["table"], p["column"], p["value"], p["lower"], p["upper"]) == (
        "run/request_counts", "requests", "75898", "68308", "83488")
    written = pd.read_csv(table_path("run/request_counts", results), dtype=str, keep_default_na=False)
    hit = select_row(written, p["row"], "request_counts")
    assert (hit["study"], hit["model"], hit["roster"]) == ("amel", rc.ROSTER_TOTAL, "True")
    cell = lookup(p["table"], p["row"], p["column"], results=results)
    assert cell is not None and cell.value == 5 and not cell.has_interval


def _with_roster_requests(tmp_path: Path, n: int) -> Path:
    results = tmp_path / f"results-{n}"
    df = pd.DataFrame([dict(study="amel", stage="judge", model="m", roster=True, shards=1, requests=n, answered=n,
                            failed=0, calls=n, cache_hits=0),
                       dict(study="amel", stage="all", model=rc.ROSTER_TOTAL, roster=True, shards=1, requests=n,
                            answered=n, failed=0, calls=n, cache_hits=0),
                       dict(study="amel", stage="all", model=rc.EVERY_TOTAL, roster=False, shards=1, requests=n,
                            answered=n, failed=0, calls=n, cache_hits=0)])
    path = table_path("run/request_counts", results)
    path.parent.mkdir(parents=True)
    df.to_csv(path, index=False)
    return results


@pytest.mark.parametrize(("requests", "kind", "status"), [
    (75_898, "paper", "agrees"), (82_432, "paper", "agrees"), (68_308, "paper", "agrees"),
    (90_000, "paper", "differs"), (60_000, "paper", "differs"),
    (75_898, "synthetic", "not comparable"), (1_234, "rehearsal", "not planted"),
])
def test_the_published_count_is_compared_as_a_range(tmp_path, requests, kind, status):
    """A paper run agrees within 10% of the seed's 75,898 (the design's tolerance,
    transcribed as the row's lower/upper); a rehearsal's smaller design is a size, not
    planted; a synthetic run is not comparable."""
    published = read_published([TEXT_CSV])
    row = published[published["id"] == ROW_ID]
    report = compare(row, _with_roster_requests(tmp_path, requests), kind).iloc[0]
    assert report["status"] == status
    assert report["reproduced"] == requests
    if kind == "paper":
        assert "published interval" in report["reason"]
    if kind == "rehearsal":
        assert "count of the run's requests" in report["reason"]


def test_the_inputs_pair_every_response_shard_with_its_request_shard_and_ledger():
    from context_effects import targets

    for name in ("config.yaml", "synthetic.yaml", "demo.yaml"):
        cfg = validate_config(load_config(REPO / "config" / name))
        spec = registry("run").table("request_counts")
        inputs = spec.inputs(cfg)
        assert inputs["responses"] == targets.response_shards(cfg) and inputs["responses"]
        for resp, req, led in zip(inputs["responses"], inputs["requests"], inputs["ledgers"], strict=True):
            assert Path(req).parts[-4:] == Path(resp).parts[-4:] and req.startswith("results/requests/")
            assert led == "results/ledgers/" + resp.removeprefix("results/responses/").removesuffix(".parquet") \
                + ".json"
        assert "results/tables/run/request_counts.csv" in targets.report_tables(cfg)
        assert spec.settings(cfg)["rosters"] == {"amel": list(cfg["amel"]["models"])}


def test_the_synthetic_runs_table_counts_its_amel_request_shards(synthetic_run):
    """The session's synthetic run: its Study A roster total is the rows of its AMEL
    request shards of roster models, and every model row's answers add up."""
    import yaml

    results = synthetic_run.repo / "results"
    cfg = yaml.safe_load(synthetic_run.config.read_text())
    roster = set(cfg["amel"]["models"])
    shards = sorted((results / "requests" / "amel").glob("*/*/*.parquet"))
    assert shards
    rows = sum(pq.read_metadata(p).num_rows for p in shards if p.parent.name in roster)
    cell = lookup("run/request_counts", f"study=amel; stage=all; model={rc.ROSTER_TOTAL}", "requests",
                  results=results)
    assert cell is not None and cell.value == rows > 0
    df = pd.read_csv(table_path("run/request_counts", results))
    models = df[~df["model"].isin([rc.ROSTER_TOTAL, rc.EVERY_TOTAL])]
    assert (models["failed"] == models["requests"] - models["answered"]).all()
    assert set(df["study"]) >= {"amel", "conformity", "anchoring"}
