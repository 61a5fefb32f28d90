"""The cost before the first call: the estimate, and `run.budget_usd` at the start and while running.

The estimate's request counts are checked against numbers computed by hand from the
design and against the request shards the DAG itself writes for the same config; its
cost against a known price; an unpriced hosted model is unknown, never 0. The budget
stops a run before any job when the estimate exceeds it, and stops an answering job
talking to the local provider server (tests/provider_server.py, a real HTTP server)
once the run's ledgers reach it, keeping every answer; a rerun with a raised budget
pays for none of them again.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from conftest import REPO, run_snakemake
from provider_server import ProviderServer, Reply
from context_effects import targets
from context_effects.config import ConfigError, validate_config
from context_effects.dag import request_shard_of
from context_effects.llm.backends.openai_api import OpenAIBackend
from context_effects.costs import design_counts, estimate, require_within_budget
from context_effects.llm.estimate import BudgetExceeded, format_estimate
from context_effects.llm.factory import model_ref
from context_effects.llm.ledger import AttemptLog, Ledger, RunBudget, paid_in_logs
from context_effects.llm.pricing import model_price
from context_effects.llm.runner import BudgetReached
from context_effects.llm.shards import answer_shard, read_request_shard, write_request_shard
from context_effects.llm.store.responses import ResponseStore
from context_effects.llm.types import LLMRequest, Sampling

OPENAI_KEY = "sk-test-estimate-openai"
PRICE = {"input_per_mtok": 2.0, "output_per_mtok": 8.0}


def small_config(base_url: str = "http://127.0.0.1:9/v1", **run) -> dict:
    """Two synthetic generators, one open judge, one hosted judge (priced), all three studies.

    Small enough to count by hand: 2 datasets x 4 items, seeds 42 and 43 plus the
    decomposition corpus, Study H on 2 TruthfulQA tasks, AMEL on TruthfulQA."""
    return {
        "run": {"label": "estimate", "kind": "synthetic", "preflight": False, **run},
        "datasets": {
            "truthfulqa": {"source": "local", "local_path": "data/demo/truthfulqa.jsonl", "n_items": 4},
            "mmlu_pro": {"source": "local", "local_path": "data/demo/mmlu_pro.jsonl", "n_items": 4,
                         "balance_by": "category"},
        },
        "models": {
            "gen-a": {"backend": "synthetic", "model_id": "gen-a", "family": "a"},
            "gen-b": {"backend": "synthetic", "model_id": "gen-b", "family": "b"},
            "gpt": {"backend": "openai", "model_id": "gpt-test", "base_url": base_url, "family": "openai",
                    "concurrency": 1, "price": dict(PRICE)},
        },
        "conformity": {
            "datasets": ["truthfulqa", "mmlu_pro"], "generators": ["gen-a", "gen-b"], "judges": ["gen-a"],
            "hosted_judges": ["gpt"], "hosted_judge_datasets": ["truthfulqa"], "seeds": [42, 43],
            "primary_seed": 42, "generation": {"max_tokens": 64},
        },
        "amel": {"models": ["gen-a"], "benchmark_datasets": ["truthfulqa"], "item_files": {},
                 "items_per_domain": 2, "history_lengths": [2], "position_history_length": 2,
                 "position_biased_turns": 1, "framing_history_lengths": [2], "balanced_history_lengths": [2],
                 "saturation_share": 1.0, "n_samples": 3},
        "anchoring": {"judges": ["gen-a", "gpt"], "benchmark_datasets": ["truthfulqa"], "tasks_per_dataset": 2,
                      "repetitions": 2, "max_tokens": 16},
    }


def _write(workdir: Path, config: dict) -> Path:
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _snakemake(workdir: Path, cfg_path: Path, *args: str, env: dict | None = None):
    return run_snakemake("--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
                         f"--configfile={cfg_path}", "--cores", "2", "--workflow-profile", "none", *args,
                         env={"OMP_NUM_THREADS": "1", **(env or {})}, timeout=900)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """The small config's every request shard, written by the DAG (synthetic generators
    answer; no hosted model is called: its shards are only written), after `snakemake
    estimate` has printed the estimate."""
    workdir = tmp_path_factory.mktemp("estimate")
    (workdir / "data").symlink_to(REPO / "data")
    config = small_config()
    cfg_path = _write(workdir, config)
    printed = _snakemake(workdir, cfg_path, "estimate")
    assert printed.returncode == 0, printed.stdout[-3000:] + printed.stderr[-3000:]
    assert "Cost estimate (nothing has been sent or paid)" in printed.stdout
    assert not (workdir / "results" / "responses").exists()  # the estimate called nothing
    validated = validate_config(config, workdir=workdir)
    shards = sorted({request_shard_of(p) for p in targets.response_shards(validated)})
    res = _snakemake(workdir, cfg_path, *shards)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-5000:]
    return workdir, validated


def _by_stage(workdir: Path, config: dict) -> dict[tuple[str, str], int]:
    return {(sc.model, f"{sc.study}/{sc.stage}"): sc.requests for sc in design_counts(config, workdir)}


def test_counts_are_the_hand_computed_design(built):
    workdir, config = built
    counts = _by_stage(workdir, config)
    items = 2 * 4  # datasets x items
    for gen in ("gen-a", "gen-b"):
        for stage in ("main-round1-s42", "main-round1-s43", "decomp-round1-s42"):
            assert counts[(gen, f"conformity/{stage}")] == items
        for stage in ("main-round2-s42", "main-round2-s43", "decomp-round2-s42"):
            # no-peer + 3 peer polarities x 2 authority variants (main); no-peer + 3 content + 3 peer (decomposition)
            assert counts[(gen, f"conformity/{stage}")] == items * 7
    assert counts[("gen-a", "conformity/anchors")] == items * 2  # synthetic anchors: correct and incorrect
    # An open judge rates per item: per generator 2 seeds x (8 answers + 6 informed) + decomposition (8 + 3),
    # plus 2 anchors x 2 references.
    assert counts[("gen-a", "conformity/judge")] == items * (2 * (2 * 14 + 11) + 4)
    # The hosted judge: TruthfulQA only, the primary seed's main corpus and the anchors.
    assert counts[("gpt", "conformity/judge")] == 4 * (2 * 14 + 4)
    # Study H: 2 tasks x 3 conditions x 2 repetitions per judge.
    assert counts[("gen-a", "anchoring/judge")] == counts[("gpt", "anchoring/judge")] == 2 * 3 * 2
    # AMEL: 2 test items x 13 cells x (3 samples + 1 first-token request, the synthetic model
    # giving first-token probabilities). The cells: the baseline; yes- and no-saturated at k=2;
    # position runs at the start, middle and end, yes and no; the swapped framing's baseline
    # and both polarities at k=2; the balanced history at k=2.
    assert counts[("gen-a", "amel/judge")] == 2 * (1 + 2 + 3 * 2 + 3 + 1) * (3 + 1)
    assert len(counts) == 2 * 6 + 1 + 2 + 2 + 1


def test_counts_equal_the_request_shards_the_dag_wrote(built):
    """Every request shard the DAG wrote for the config, summed per model and stage, is
    what the estimate counted before any of them existed."""
    workdir, config = built
    wrote: dict[tuple[str, str], int] = {}
    for path in (workdir / "results" / "requests").rglob("*.parquet"):
        study, stage, model, _ = path.relative_to(workdir / "results" / "requests").parts
        wrote[(model, f"{study}/{stage}")] = wrote.get((model, f"{study}/{stage}"), 0) + pq.read_metadata(path).num_rows
    assert wrote == _by_stage(workdir, config)


def test_prompt_tokens_are_the_rendered_characters_over_four(built):
    """A stage whose prompts hold no earlier answer: its prompt tokens are the characters
    of the requests the DAG wrote, over four; its output tokens their max_tokens."""
    workdir, config = built
    requests, _ = read_request_shard(workdir / "results/requests/anchoring/judge/gpt/tasks.parquet")
    chars = sum(len(text) for r in requests for _, text in r.messages)
    row = next(r for r in estimate(config, workdir).rows if r.model == "gpt" and r.study == "anchoring")
    assert row.requests == len(requests) == 12
    assert row.prompt_tokens == math.ceil(chars / 4)
    assert row.output_tokens == sum(r.sampling.max_tokens for r in requests) == 12 * 16
    assert row.output_basis == "max_tokens"


def test_cost_at_a_known_price_and_through_a_batch_api(built):
    workdir, config = built
    est = estimate(config, workdir)
    gpt = [r for r in est.rows if r.model == "gpt"]
    assert {r.stage for r in gpt} == {"judge"} and len(gpt) == 2
    for r in gpt:
        assert r.price_basis == "config"
        assert r.cost_usd == pytest.approx((r.prompt_tokens * 2.0 + r.output_tokens * 8.0) / 1e6)
    # Local (synthetic) models cost no USD per token; the total is the hosted rows'.
    assert all(r.cost_usd == 0 for r in est.rows if r.model != "gpt")
    assert est.cost_usd == pytest.approx(sum(r.cost_usd for r in gpt)) and est.cost_usd > 0
    batch = {**config, "models": {**config["models"], "gpt": {**config["models"]["gpt"], "use_batch_api": True}}}
    assert estimate(batch, workdir).cost_usd == pytest.approx(est.cost_usd / 2)
    text = format_estimate(est)
    assert "models.<name>.price: gpt" in text and "max_tokens bound" in text and "unknown" not in text


def test_an_unpriced_hosted_model_is_unknown_never_zero(built):
    workdir, config = built
    unpriced = json.loads(json.dumps(config))
    del unpriced["models"]["gpt"]["price"]
    assert model_price(unpriced["models"]["gpt"]) == (None, "unpriced")
    est = estimate(unpriced, workdir)
    assert [r.cost_usd for r in est.rows if r.model == "gpt"] == [None, None]
    assert est.unpriced == ["gpt"]
    text = format_estimate(est)
    assert "Unknown price: gpt" in text and "+ unknown" in text
    # With a budget, an estimate that cannot be known refuses the run.
    unpriced["run"]["budget_usd"] = 1000.0
    with pytest.raises(BudgetExceeded, match=r"cannot be checked: hosted model\(s\) gpt have no known price"):
        require_within_budget(unpriced, None, workdir)


def test_the_shipped_table_prices_the_paper_configs_hosted_models():
    from context_effects.config import load_config

    paper = validate_config(load_config(REPO / "config" / "config.yaml"))
    for name, cfg in paper["models"].items():
        price, basis = model_price(cfg)
        assert price is not None, name
        if cfg["backend"] != "vllm" and not cfg.get("price"):
            assert basis.startswith("costs.yaml, read 20"), (name, basis)


def test_a_pilots_ledgers_replace_the_max_tokens_bound(built, tmp_path):
    """Mean output tokens per answered call and calls per first ask, as the pilot measured them."""
    workdir, config = built
    pilot = tmp_path / "ledgers"
    led = Ledger(job="pilot", backend="openai", calls=10, reasks=2, failures=0, tokens_in=999, tokens_out=50)
    led.save(pilot / "anchoring" / "judge" / "gpt" / "tasks.json")
    est = estimate(config, workdir, pilot=pilot)
    row = next(r for r in est.rows if r.model == "gpt" and r.study == "anchoring")
    assert row.output_basis == "pilot"
    assert row.calls == pytest.approx(12 * 10 / 8)  # 12 requests, 1.25 calls per first ask
    assert row.output_tokens == pytest.approx(12 * 10 / 8 * 50 / 10)  # 5 tokens per answered call
    judge = next(r for r in est.rows if r.model == "gpt" and r.study == "conformity")
    assert judge.output_basis == "max_tokens"  # the pilot measured no conformity judging
    assert "'pilot mean' rows use the mean per answered call" in format_estimate(est)


def test_without_item_tables_the_estimate_says_how_to_build_them(tmp_path):
    (tmp_path / "data").symlink_to(REPO / "data")
    config = validate_config(small_config(), workdir=tmp_path)
    with pytest.raises(FileNotFoundError, match=r"4 of them are not built yet .*run `snakemake estimate`"):
        design_counts(config, tmp_path)


def test_the_budget_is_a_closed_schema_key():
    config = small_config(budget_usd=-1)
    with pytest.raises(ConfigError, match=r"`run.budget_usd`: -1 is less than the minimum of 0"):
        validate_config(config)
    assert validate_config(small_config())["run"]["budget_usd"] is None
    with pytest.raises(ConfigError, match=r"unknown key `run.budget`"):
        validate_config(small_config(budget=5))


# ------------------------------------------------------------------ the budget at the start


def test_a_run_over_budget_is_refused_before_any_job(tmp_path):
    """The whole path: a run with run.budget_usd below its estimate stops in onstart,
    naming the estimate, the budget and how to go on; no job runs and nothing is sent."""
    (tmp_path / "data").symlink_to(REPO / "data")
    with ProviderServer(openai_key=OPENAI_KEY) as srv:
        config = small_config(srv.base_url, budget_usd=0.0001)
        config["conformity"]["enabled"] = False
        config["amel"]["enabled"] = False
        config["anchoring"]["judges"] = ["gpt"]
        cfg_path = _write(tmp_path, config)
        target = "results/responses/anchoring/judge/gpt/tasks.parquet"
        env = {"OPENAI_API_KEY": OPENAI_KEY}
        first = _snakemake(tmp_path, cfg_path, target, env=env)
        built_nothing = not (tmp_path / "results").exists()
        printed = _snakemake(tmp_path, cfg_path, "estimate", env=env)
        refused = _snakemake(tmp_path, cfg_path, target, env=env)
        assert not srv.generation_calls()
    # Before the item tables exist the estimate cannot be made: refused, naming the command.
    out = first.stdout + first.stderr
    assert first.returncode != 0, out[-3000:]
    assert "needs item tables this run has yet to build (results/anchoring/tasks.parquet)" in out, out[-3000:]
    assert "Run `snakemake estimate`" in out and built_nothing
    # `snakemake estimate` builds them (no model call) and says the estimate exceeds the budget.
    assert printed.returncode == 0, printed.stderr[-3000:]
    assert "run.budget_usd = 0.00: the estimate exceeds it." in printed.stdout
    # Now the run is refused on its estimate, before any job.
    out = refused.stdout + refused.stderr
    assert refused.returncode != 0, out[-3000:]
    assert "exceeds run.budget_usd = $0.00. Nothing has been started or paid. Raise run.budget_usd" in out, out[-3000:]
    assert "anchoring/judge" in out  # the estimate's table comes with it
    assert not (tmp_path / "results" / "requests").exists() and not (tmp_path / "results" / "responses").exists()


def test_a_run_within_budget_starts(built):
    """The start's check uses the run's own ledgers as a pilot: here the synthetic
    generators' answers were measured, so the judges' prompts carry measured answers."""
    workdir, config = built
    est = estimate(config, workdir, pilot=workdir / "results" / "ledgers")
    assert est.pilot and est.cost_usd < estimate(config, workdir).cost_usd
    within = {**config, "run": {**config["run"], "budget_usd": est.cost_usd * 1.01}}
    assert require_within_budget(within, None, workdir).cost_usd == pytest.approx(est.cost_usd)
    over = {**config, "run": {**config["run"], "budget_usd": est.cost_usd * 0.99}}
    with pytest.raises(BudgetExceeded, match="exceeds run.budget_usd"):
        require_within_budget(over, None, workdir)
    assert require_within_budget({**config, "run": {**config["run"], "budget_usd": None}}, None, workdir) is None
    # One estimate: the command a user runs prints the figure the start's check compares.
    from context_effects.costs import main as costs_main

    out = workdir / "printed-estimate.json"
    assert costs_main(["--configfile", str(workdir / "config.yaml"), "--directory", str(workdir),
                       "--json", str(out)]) == 0
    assert json.loads(out.read_text())["cost_usd"] == pytest.approx(
        require_within_budget(within, None, workdir).cost_usd, rel=1e-12)


def test_replies_without_usage_are_no_measurement_of_length(tmp_path):
    """A pilot whose replies carried no token usage records 0 output tokens for them: the
    estimate keeps the max_tokens bound instead of a mean of 0."""
    from context_effects.llm.estimate import read_pilot

    log = AttemptLog(tmp_path / ".attempts/amel/judge/gpt/0000.jsonl")
    log.append(Ledger(calls=10, tokens_in=0, tokens_out=0, cost_bounded_calls=10), attempt="a", outcome="completed")
    assert read_pilot(tmp_path).find("amel", "judge", "gpt") is None
    log.append(Ledger(calls=10, tokens_out=40, cost_bounded_calls=6), attempt="b", outcome="completed")
    assert read_pilot(tmp_path).find("amel", "judge", "gpt").out_per_call() == pytest.approx(40 / 4)


# ------------------------------------------------------------------ the budget while running


def _shard(tmp_path: Path, srv: ProviderServer, n: int, name: str = "0000") -> Path:
    cfg = {"backend": "openai", "model_id": "gpt-test", "base_url": srv.base_url}
    requests = [LLMRequest(model_ref("gpt", cfg), (("user", f"Rate answer number {i} of the {name} batch, please."),),
                           Sampling(max_tokens=32, seed=42)) for i in range(n)]
    path = tmp_path / f"results/requests/smoke/judge/gpt/{name}.parquet"
    write_request_shard(path, requests)
    return path


def _answer(tmp_path: Path, srv: ProviderServer, shard: Path, budget: RunBudget | None, store: ResponseStore,
            concurrency: int = 1, prices: dict | None = None) -> Ledger:
    prices = {"gpt-test": PRICE} if prices is None else prices
    backend = OpenAIBackend(base_url=srv.base_url, concurrency=concurrency, max_concurrency=concurrency,
                            prices=prices, backoff_base_s=0.02, backoff_max_s=0.1, request_timeout_s=5.0,
                            max_retry_time_s=10.0)
    name = shard.stem
    with backend:
        return answer_shard(shard, tmp_path / f"results/responses/smoke/judge/gpt/{name}.parquet",
                            tmp_path / f"results/ledgers/smoke/judge/gpt/{name}.json", backend, store,
                            attempts_log=tmp_path / f"results/ledgers/.attempts/smoke/judge/gpt/{name}.jsonl",
                            progress=False, handle_signals=False, model_name="gpt", budget=budget)


def _budget(limit: float, attempts: Path, **kwargs) -> RunBudget:
    return RunBudget(limit, attempts, prices={"gpt-test": PRICE}, **kwargs)


def _bill(srv: ProviderServer) -> float:
    """What the provider charged, from its own count of every answered call's tokens."""
    return sum(u["prompt_tokens"] * PRICE["input_per_mtok"] + u["completion_tokens"] * PRICE["output_per_mtok"]
               for u in srv.usage_log) / 1e6


def test_a_run_stops_sending_at_its_budget_and_a_raised_budget_pays_nothing_twice(tmp_path, monkeypatch):
    """Each batch is reserved at its calls' upper bound before it is sent, so the run never
    passes its budget; it stops once what is left does not cover the next call's bound."""
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    attempts = tmp_path / "results/ledgers/.attempts"
    store = ResponseStore(tmp_path / "results/store")
    with ProviderServer(openai_key=OPENAI_KEY) as srv:
        shard = _shard(tmp_path, srv, 12)
        requests, _ = read_request_shard(shard)
        bounds = [_budget(1.0, attempts).bound(r) for r in requests]
        # What one call costs here (the server counts words as tokens): far below its bound.
        per_call = _answer(tmp_path / "probe", srv, _shard(tmp_path / "probe", srv, 1), None,
                           ResponseStore(tmp_path / "probe/results/store")).cost_usd
        assert 0 < 3.5 * per_call < max(bounds)
        srv.log.clear()
        srv.usage_log.clear()
        limit = max(bounds) + 3.5 * per_call
        with pytest.raises(BudgetReached) as stopped:
            _answer(tmp_path, srv, shard, _budget(limit, attempts, refresh_s=0.0), store)
        sent = srv.generation_calls()
        paid = paid_in_logs(attempts)
        # Never past the budget, and stopped only when the next call's bound did not fit.
        assert paid == pytest.approx(_bill(srv)) and paid <= limit
        assert limit - paid < max(bounds) and 3 <= len(sent) <= 5
        text = str(stopped.value)
        assert f"of its budget run.budget_usd = ${limit:,.2f}" in text and "raise run.budget_usd and rerun" in text
        record = AttemptLog(attempts / "smoke/judge/gpt/0000.jsonl").previous()[-1]
        assert record["outcome"] == "stopped: the run's budget (run.budget_usd) reached"
        assert record["detail"] == text  # what the run's closing summary prints
        # Nothing stays reserved once the attempt has ended.
        assert json.loads((attempts / RunBudget.RESERVATIONS).read_text()) == {}
        # Everything received is kept: each answer is in the store.
        store.refresh()
        assert len(store.get_many(r.key for r in requests)) == len(sent)
        assert not (tmp_path / "results/responses/smoke/judge/gpt/0000.parquet").exists()

        # Resumed with a raised budget: the others are asked, the stored ones are not.
        ledger = _answer(tmp_path, srv, shard, _budget(100.0, attempts), store)
        prompts = [(c.body if isinstance(c.body, dict) else json.loads(c.body))["messages"][-1]["content"]
                   for c in srv.generation_calls()]
        bill = _bill(srv)
    assert len(prompts) == 12 == len(set(prompts))  # every request paid exactly once
    assert ledger.calls == 12 and ledger.cache_hits == len(sent) and ledger.runs == 2
    assert ledger.cost_usd == pytest.approx(bill) and paid_in_logs(attempts) == pytest.approx(bill)


def test_jobs_answering_at_once_stay_within_the_budget_together(tmp_path, monkeypatch):
    """Two shards answered at the same time, each with calls in flight, against a budget
    that buys about 20 of their calls: together they never pay more than the budget, and
    each one's message counts what both paid."""
    import threading

    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    attempts = tmp_path / "results/ledgers/.attempts"
    store = ResponseStore(tmp_path / "results/store")
    with ProviderServer(openai_key=OPENAI_KEY, latency_s=0.05) as srv:
        shards = [_shard(tmp_path, srv, 30, name) for name in ("0000", "0001")]
        probe = _answer(tmp_path / "probe", srv, _shard(tmp_path / "probe", srv, 1), None,
                        ResponseStore(tmp_path / "probe/results/store"))
        limit = 20 * probe.cost_usd
        srv.usage_log.clear()
        srv.log.clear()
        outcomes: dict[str, BaseException | Ledger] = {}

        def answer(shard: Path) -> None:
            try:
                outcomes[shard.stem] = _answer(tmp_path, srv, shard, _budget(limit, attempts), store, concurrency=4)
            except BaseException as exc:  # noqa: BLE001 - examined below
                outcomes[shard.stem] = exc

        threads = [threading.Thread(target=answer, args=(s,)) for s in shards]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        bill = _bill(srv)
        calls = len(srv.generation_calls())
        assert srv.max_in_flight > 1  # the two jobs did overlap
    assert all(isinstance(o, BudgetReached) for o in outcomes.values()), outcomes
    assert 0 < calls < 60
    assert bill <= limit * (1 + 1e-9), f"paid ${bill:.6f} against a budget of ${limit:.6f} ({calls} calls)"
    assert paid_in_logs(attempts) == pytest.approx(bill)
    beyond_own = []
    for name, stopped in outcomes.items():
        text = str(stopped)
        said = float(text.split("the run has paid $")[1].split(" ")[0].replace(",", ""))
        held = re.search(r"other jobs hold \$([\d,.]+) more for their calls in flight", text)
        held = float(held.group(1).replace(",", "")) if held else 0.0
        own = AttemptLog(attempts / f"smoke/judge/gpt/{name}.jsonl").previous()[-1]["cost_usd"]
        # What the run had paid when the job stopped, as printed (4 decimals): at least its
        # own, at most the bill (the other job's calls in flight may have come back since).
        # What the other job held for calls in flight is said apart, never as paid.
        assert own - 5e-5 <= said <= bill + 5e-5, (name, own, said, held, bill)
        beyond_own.append(said + held - own)
    # a message counts the other job too: what it paid, or holds for its calls in flight
    assert max(beyond_own) > 5e-5


def test_the_stop_message_says_what_was_paid_and_what_other_jobs_hold_apart(tmp_path):
    """A job stopped by another job's reservation (the upper bounds of its calls in flight)
    says what the run has paid, and what the other job holds, apart: a reservation is not a
    payment, and it settles to what the calls cost."""
    import os
    import socket

    from context_effects.llm.runner import run_budget_message

    root = tmp_path / "attempts"
    root.mkdir()
    held = {"other": {"reserved_usd": 0.0021, "shard": "judge/0000", "host": socket.gethostname(), "pid": os.getpid()}}
    (root / RunBudget.RESERVATIONS).write_text(json.dumps(held))
    budget = RunBudget(0.002, root).for_attempt("this", shard="judge/0001")
    live = Ledger()
    live.cost_usd = 0.0003
    assert budget.reached(live)
    text = run_budget_message(budget, *budget.paid_and_held(live), 0, "gpt")
    assert "the run has paid $0.0003 of its budget run.budget_usd = $0.00 " \
           "(other jobs hold $0.0021 more for their calls in flight)" in text, text
    (root / RunBudget.RESERVATIONS).write_text("{}")  # settled or released: nothing held
    text = run_budget_message(budget, *budget.paid_and_held(live), 0, "gpt")
    assert "the run has paid $0.0003 of its budget run.budget_usd = $0.00 (every" in text, text


def test_replies_without_token_usage_count_at_their_bound_and_the_budget_holds(tmp_path, monkeypatch, caplog):
    """A provider whose replies carry no usage: each call is counted at the most it can
    have cost, never at 0, so the budget still stops the run within what it allows, the
    ledger says how many were counted so, and the log says so."""
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    attempts = tmp_path / "results/ledgers/.attempts"
    with ProviderServer(openai_key=OPENAI_KEY, report_usage=False) as srv:
        shard = _shard(tmp_path, srv, 24)
        requests, _ = read_request_shard(shard)
        bounds = [_budget(1.0, attempts).bound(r) for r in requests]
        limit = 6.5 * max(bounds)
        with caplog.at_level("WARNING"), pytest.raises(BudgetReached):
            _answer(tmp_path, srv, shard, _budget(limit, attempts), ResponseStore(tmp_path / "results/store"))
        bill = _bill(srv)
        calls = len(srv.generation_calls())
    assert 0 < calls < 24 and bill <= limit
    record = AttemptLog(attempts / "smoke/judge/gpt/0000.jsonl").previous()[-1]
    assert record["cost_bounded_calls"] == record["calls"] == calls and record["cost_unknown_calls"] == 0
    assert bill <= record["cost_usd"] <= limit  # an upper bound of what was billed, within the budget
    assert "reported no token usage" in caplog.text and "cost_bounded_calls" in caplog.text


def test_a_budget_of_zero_allows_free_calls_and_no_paid_one(tmp_path, monkeypatch):
    """run.budget_usd: 0 means no paid call: a model priced at 0 answers every request, a
    priced one sends nothing."""
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    free = {"gpt-test": {"input_per_mtok": 0.0, "output_per_mtok": 0.0}}
    assert not RunBudget(0.0, tmp_path / "none").reached(Ledger())
    with ProviderServer(openai_key=OPENAI_KEY) as srv:
        shard = _shard(tmp_path / "free", srv, 5)
        budget = RunBudget(0.0, tmp_path / "free/results/ledgers/.attempts", prices=free)
        ledger = _answer(tmp_path / "free", srv, shard, budget, ResponseStore(tmp_path / "free/results/store"),
                         prices=free)
        assert ledger.calls == 5 and len(srv.generation_calls()) == 5
        shard = _shard(tmp_path / "paid", srv, 5)
        with pytest.raises(BudgetReached, match=r"the run has paid \$0.0000 of its budget run.budget_usd = \$0.00"):
            _answer(tmp_path / "paid", srv, shard, _budget(0.0, tmp_path / "paid/results/ledgers/.attempts"),
                    ResponseStore(tmp_path / "paid/results/store"))
        assert len(srv.generation_calls()) == 5


def test_what_other_jobs_paid_counts_against_the_budget(tmp_path, monkeypatch):
    """The budget is the run's, not one job's: a shard whose run has already paid it
    sends nothing at all."""
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    attempts = tmp_path / "results/ledgers/.attempts"
    other = AttemptLog(attempts / "conformity/judge/gpt/truthfulqa-000.jsonl")
    other.append(Ledger(calls=500, cost_usd=0.75), attempt="earlier-attempt", outcome="completed")
    with ProviderServer(openai_key=OPENAI_KEY) as srv:
        shard = _shard(tmp_path, srv, 3)
        with pytest.raises(BudgetReached, match=r"the run has paid \$0.7500 of its budget run.budget_usd = \$0.50"):
            _answer(tmp_path, srv, shard, _budget(0.5, attempts), ResponseStore(tmp_path / "results/store"))
        assert not srv.generation_calls()


def test_a_snakemake_run_stops_at_its_budget_and_goes_on_when_it_is_raised(tmp_path):
    """The whole path: a run that starts within its budget, in a working directory where
    another job has already paid nearly all of it, stops its answering job before its first
    call, failing with the message, which the run's closing summary repeats; with the budget
    raised the rerun completes and asks the provider nothing twice."""
    (tmp_path / "data").symlink_to(REPO / "data")
    env = {"OPENAI_API_KEY": OPENAI_KEY}
    target = "results/responses/anchoring/judge/gpt/tasks.parquet"
    # A valid Study H score every time: no re-asks, one call per request.
    score = Reply(["{", '"score"', ": ", "3", "}"], [("{", 1.0)])
    with ProviderServer(openai_key=OPENAI_KEY, reply=lambda prompt: score) as srv:
        config = small_config(srv.base_url)
        config["conformity"]["enabled"] = False
        config["amel"]["enabled"] = False
        config["anchoring"]["judges"] = ["gpt"]
        cfg_path = _write(tmp_path, config)
        assert _snakemake(tmp_path, cfg_path, "estimate", env=env).returncode == 0
        cost = estimate(validate_config(config, workdir=tmp_path), tmp_path).cost_usd
        budget = 2 * cost
        config["run"]["budget_usd"] = budget
        _write(tmp_path, config)
        earlier = AttemptLog(tmp_path / "results/ledgers/.attempts/other/judge/gpt/0000.jsonl")
        earlier.append(Ledger(calls=1, cost_usd=budget - cost / 1000), attempt="earlier", outcome="completed")
        stopped = _snakemake(tmp_path, cfg_path, target, env=env)
        after_stop = len(srv.generation_calls())
        config["run"]["budget_usd"] = 10 * budget
        _write(tmp_path, config)
        resumed = _snakemake(tmp_path, cfg_path, target, env=env)
        bodies = [json.dumps(c.body if isinstance(c.body, dict) else json.loads(c.body), sort_keys=True)
                  for c in srv.generation_calls()]
    out = stopped.stdout + stopped.stderr
    assert stopped.returncode != 0, out[-3000:]
    assert "is within run.budget_usd" in out  # it started: the estimate alone fits the budget
    assert "gpt: model gpt: the run has paid $" in out and "raise run.budget_usd and rerun" in out, out[-3000:]
    # The cause is also the run's last word, not only in the job's log.
    closing = out[out.rindex("answering stopped: "):]
    assert closing.startswith("answering stopped: anchoring/judge/gpt/tasks: model gpt: the run has paid $"), closing
    assert after_stop == 0  # what is left does not cover one call's bound: nothing was sent
    assert resumed.returncode == 0, (resumed.stdout + resumed.stderr)[-3000:]
    assert "answering stopped" not in resumed.stdout + resumed.stderr
    # 12 requests, 12 calls, each a different request.
    assert len(bodies) == 12 == len(set(bodies))
    ledger = Ledger.load(tmp_path / "results/ledgers/anchoring/judge/gpt/tasks.json")
    assert ledger.calls == 12 and ledger.cache_hits == 0 and ledger.runs == 2


def test_the_estimate_asks_each_enabled_study_through_its_face():
    """costs iterates over the studies' faces (context_effects.studies), in one order, and
    a study the config does not run is not asked."""
    from context_effects.costs import estimate_inputs
    from context_effects.studies import faces

    config = validate_config(small_config())
    assert [f.name for f in faces(config)] == ["conformity", "amel", "anchoring"]
    assert estimate_inputs(config) == [p for f in faces(config) for p in f.item_inputs(config)]
    assert "results/anchoring/tasks.parquet" in estimate_inputs(config)
    off = validate_config({**small_config(), "amel": {**small_config()["amel"], "enabled": False},
                           "anchoring": {**small_config()["anchoring"], "enabled": False}})
    assert [f.name for f in faces(off)] == ["conformity"]
    assert not any("amel" in p or "anchoring" in p for p in estimate_inputs(off))
