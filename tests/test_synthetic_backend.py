"""The synthetic backend: determinism, the meta contract, and recovery of every planted effect."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from context_effects.amel.synthetic import amel_expected_bias_score, amel_p_yes
from context_effects.anchoring.synthetic import anchoring_blind_mean
from context_effects.conformity.replies import parse_rating, rating_policy
from context_effects.conformity.synthetic import DEFAULTS, parse_quality_tag, rating_probabilities, trial_baseline
from context_effects.amel.synthetic import DEFAULTS as AMEL_DEFAULTS
from context_effects.anchoring.synthetic import DEFAULTS as ANCHORING_DEFAULTS
from context_effects.llm.backends.synthetic import (
    ENGINE_VERSION,
    SyntheticBackend,
    model_revision,
    parameter_names,
    planted_effects,
)
from context_effects.conformity.replies import RATING_SCHEMA
from context_effects.llm.replies import ReplyPolicy
from context_effects.llm.runner import run_requests
from context_effects.llm.store.responses import ResponseStore
from context_effects.llm.types import LLMRequest, ModelRef, Sampling

MODEL = "syn-mistral-7b"


def req(meta, text="Question?", *, model=MODEL, attempt=0, sample_index=0, sampling=None, mode="chat"):
    return LLMRequest(
        model=ModelRef(provider="synthetic", model_id=model),
        messages=(("user", text),),
        sampling=sampling or Sampling(max_tokens=300),
        sample_index=sample_index,
        attempt=attempt,
        mode=mode,
        meta=meta,
    )


def gen_meta(item, cond, generator=MODEL):
    return {"study": "conformity", "role": "generator", "item_id": item, "generator": generator, "condition": cond}


def judge_meta(pas="blind", d=None, judge=MODEL):
    m = {"study": "conformity", "role": "judge", "judge": judge, "pass": pas}
    if d is not None:
        m["d"] = d
    return m


def answer_prompt(theta):
    return f"Question: q. Answer to grade: [synthetic q={theta:+.4f}] Some answer. Respond ONLY with JSON."


def one(backend, request):
    (res,) = list(backend.run([request]))
    return res


# ----------------------------------------------------------------------------- basics


def test_labelled_and_deterministic():
    b = SyntheticBackend(model_name=MODEL, seed=7)
    r = req(gen_meta("tqa/1", "peer_wrong"))
    a1, a2 = one(b, r), one(SyntheticBackend(model_name=MODEL, seed=7), r)
    assert a1.ok and a1 == a2
    assert a1.notes.startswith("SYNTHETIC") and a1.engine_version == ENGINE_VERSION == b.engine_version()
    assert a1.backend == "synthetic" and a1.cost_usd == 0.0 and a1.latency_s == 0.0
    assert a1.tokens_in == 1 and a1.tokens_out == len(a1.text.split())
    # A re-ask is a new key and a fresh draw; so is another backend seed.
    texts = {one(b, dataclasses.replace(r, attempt=i)).text for i in range(5)}
    assert len(texts) == 5
    assert one(SyntheticBackend(model_name=MODEL, seed=8), r).text != a1.text


def test_a_seeded_sampled_request_draws_its_noise_from_its_seed_alone_as_on_vllm():
    """vLLM seeds a generator per request from its seed alone (docs/llm-layer.md, "Sampling
    seeds"), and so does the synthetic backend: equal seeds draw equal noise whatever the
    prompt, other seeds and unseeded requests draw independently, and a greedy request's
    reply, which the seed does not touch on vLLM, follows its prompt."""
    from context_effects.amel.synthetic import amel_p_yes

    b = SyntheticBackend(model_name=MODEL, seed=4)
    item = next(f"it{i}" for i in range(200) if 0.4 < amel_p_yes(b, f"it{i}") < 0.6)
    p = amel_p_yes(b, item)
    meta = amel_meta(item, "baseline")
    hot = lambda seed: Sampling(temperature=1.0, max_tokens=4, seed=seed)  # noqa: E731
    n = 2000

    def agreement(first, second, n=n):
        same = [one(b, first(i)).text == one(b, second(i)).text for i in range(n)]
        assert all(t in ("Yes", "No") for t in (one(b, first(0)).text, one(b, second(0)).text))
        return float(np.mean(same))

    # One seed, two prompts (and sample indices): the same uniform, so the same answer at one planted p.
    assert agreement(lambda i: req(meta, f"prompt a {i}", sampling=hot(i)),
                     lambda i: req(meta, f"prompt b {i}", sample_index=1, sampling=hot(i)), 500) == 1.0
    # The same noise stream whatever the study or the planted probability.
    r1 = req(amel_meta("it1", "no_saturated", 5), "one prompt", sampling=hot(99))
    r2 = req({"study": "anchoring", "task_id": "t", "condition": "blind", "gold_score": 3}, "another",
             sampling=dataclasses.replace(hot(99), temperature=None))
    assert b.noise_rng(r1).random(8).tolist() == b.noise_rng(r2).random(8).tolist()
    # Independent draws: the agreement of two independent answers at P(Yes) = p, not 1.
    independent = p * p + (1 - p) * (1 - p)
    other_seeds = agreement(lambda i: req(meta, f"prompt {i}", sampling=hot(2 * i)),
                            lambda i: req(meta, f"prompt {i}", sampling=hot(2 * i + 1)))
    unseeded = agreement(lambda i: req(meta, f"prompt a {i}", sampling=hot(None)),
                         lambda i: req(meta, f"prompt b {i}", sampling=hot(None)))
    greedy = agreement(lambda i: req(meta, f"prompt a {i}", sampling=dataclasses.replace(hot(i), temperature=0.0)),
                       lambda i: req(meta, f"prompt b {i}", sampling=dataclasses.replace(hot(i), temperature=0.0)))
    for value in (other_seeds, unseeded, greedy):
        assert value == pytest.approx(independent, abs=4 * math.sqrt(independent * (1 - independent) / n))
    # Reproducible, and another world (``sampling.synthetic_seed``) draws other noise for the same seed.
    r = req(meta, "x", sampling=hot(5))
    assert one(SyntheticBackend(model_name=MODEL, seed=4), r) == one(b, r)
    worlds = [SyntheticBackend(model_name=MODEL, seed=w).noise_rng(r).random() for w in range(4)]
    assert len(set(worlds)) == 4


def test_unknown_params_rejected():
    with pytest.raises(ValueError, match=r"unknown synthetic params: \['gama'\].*allowed:.*'gamma'"):
        SyntheticBackend(model_name=MODEL, params={"gama": 0.1})
    with pytest.raises(ValueError, match=r"'eta'.*\['peer_wrongg'\].*allowed"):
        SyntheticBackend(model_name=MODEL, params={"eta": {"peer_wrongg": -1}})
    with pytest.raises(ValueError, match="kappa"):
        SyntheticBackend(model_name=MODEL, params={"kappa": [1, 0, 2, 3]})
    with pytest.raises(ValueError, match="unknown synthetic profile 'nope'; allowed: none, qwen"):
        SyntheticBackend(model_name=MODEL, params={"profile": "nope"})
    # The name-chosen profile is gone: asking for it says to name a family instead.
    with pytest.raises(ValueError, match=r"'auto' is no longer supported.*name it \(profile: qwen \| mistral"):
        SyntheticBackend(model_name=MODEL, params={"profile": "auto"})


def test_planted_values_are_the_defaults_plus_the_config_whatever_the_name():
    """No hidden layer: a model named after a family gets exactly defaults ⊕ its params
    (a judge set to γ = 0 is planted with γ = 0, not its family's γ)."""
    for name in ("syn-gemma-2-9b", "syn-mistral-7b", "qwen-sim", "anything"):
        pe = planted_effects(name, {"gamma": 0.0, "eta": {"peer_wrong": -0.9}})
        assert pe["profile"] is None and pe["params"]["profile"] == "none"
        assert pe["conformity"]["judge"]["gamma"] == 0.0
        assert pe["conformity"]["eta"] == {"round1": 0.0, **DEFAULTS["eta"], "peer_wrong": -0.9}
        assert pe["conformity"]["judge"]["alpha"] == DEFAULTS["alpha"]
        assert pe["conformity"]["quality_mean"] == DEFAULTS["quality_mean"]
        assert pe["amel"]["conformity"] == AMEL_DEFAULTS["amel_conformity"]
        assert pe["anchoring"]["bias"] == ANCHORING_DEFAULTS["anchoring_bias"]
    # Nor does the name enter the values anywhere: two names, the same planted values.
    a, b = planted_effects("syn-gemma-2-9b"), planted_effects("syn-llama-3-8b")
    assert {k: v for k, v in a.items() if k != "model_name"} == {k: v for k, v in b.items() if k != "model_name"}
    # Every planted parameter is a schema key of `synthetic:` and the other way round.
    assert set(parameter_names()) == set(DEFAULTS) | set(AMEL_DEFAULTS) | set(ANCHORING_DEFAULTS) | {"profile"}


def test_params_and_named_profiles():
    pe = planted_effects(MODEL, {"profile": "mistral", "gamma": 0.2, "eta": {"peer_wrong": -0.9}})
    assert pe["profile"] == "mistral"
    assert pe["conformity"]["judge"]["gamma"] == 0.2
    assert pe["conformity"]["eta"]["peer_wrong"] == -0.9
    assert pe["conformity"]["eta"]["round1"] == 0.0
    assert pe["conformity"]["eta"]["no_peer"] == -0.9 + 0.9 + 0.03  # rest of the named profile kept
    generic = planted_effects("anything", {"profile": "none"})
    assert generic["profile"] is None and generic["conformity"]["eta"]["peer_wrong"] == DEFAULTS["eta"]["peer_wrong"]
    # The built-in panel has judges on both sides of neutral (seed 002 Table 4), when named.
    gammas = {
        f: planted_effects("judge", {"profile": f})["conformity"]["judge"]["gamma"]
        for f in ("qwen", "mistral", "gemma", "llama")
    }
    assert gammas["mistral"] > 0.3 and gammas["gemma"] < -0.2 and gammas["llama"] < -0.2 and abs(gammas["qwen"]) < 0.05
    for f in ("qwen", "mistral", "gemma", "llama"):
        eta = planted_effects("generator", {"profile": f})["conformity"]["eta"]
        assert min(eta, key=eta.get) == "peer_wrong"
    d = pe["conformity"]["decomposition"]
    assert d["delta_sp"] + d["delta_content"]["wrong"] + d["delta_pp"]["wrong"] == pytest.approx(-0.9)
    # Planted values are part of the model revision, so changed params never hit old cache entries.
    assert model_revision(MODEL) != model_revision(MODEL, {"gamma": 0.2}) != model_revision(MODEL, seed=1)
    assert model_revision(MODEL) != model_revision(MODEL, {"profile": "mistral"})
    b = SyntheticBackend(model_name=MODEL)
    stale = dataclasses.replace(
        req(gen_meta("i", "round1")), model=ModelRef("synthetic", MODEL, revision=model_revision(MODEL, {"gamma": 1}))
    )
    assert "revision" in one(b, stale).error
    fresh = dataclasses.replace(stale, model=ModelRef("synthetic", MODEL, revision=b.revision))
    assert one(b, fresh).ok


@pytest.mark.parametrize(
    "meta, missing",
    [
        ({}, ["'study'"]),
        ({"study": "conformity"}, ["'role'"]),
        ({"study": "conformity", "role": "generator", "condition": "round1"}, ["'item_id'", "'generator'"]),
        ({"study": "conformity", "role": "judge", "judge": "j", "pass": "informed"}, ["'d'"]),
        ({"study": "amel", "item_id": "x", "condition": "yes_saturated"}, ["'k'"]),
        ({"study": "anchoring", "task_id": "t", "condition": "anchor", "gold_score": 3}, ["'prior_score'"]),
        ({"study": "anchoring", "condition": "blind"}, ["'task_id'", "'gold_score'"]),
    ],
)
def test_missing_meta_is_an_error_naming_the_fields(meta, missing):
    res = one(SyntheticBackend(model_name=MODEL), req(meta, answer_prompt(0.0)))
    assert not res.ok and res.text is None and "missing" in res.error
    for m in missing:
        assert m in res.error
    assert res.notes.startswith("SYNTHETIC")


def test_invalid_meta_values_and_missing_tag():
    b = SyntheticBackend(model_name=MODEL)
    assert "one of" in one(b, req({"study": "nope"})).error
    assert "'condition'" in one(b, req(gen_meta("i", "peer_bogus"))).error
    assert "tag" in one(b, req(judge_meta(), "Answer to grade: no tag here")).error


# ----------------------------------------------------------------------------- Study C generator


def test_anchors_pinned_and_condition_shifts_recovered():
    b = SyntheticBackend(model_name=MODEL, seed=3, params={"empty_rate": 0.0})
    pe = b.planted_effects()["conformity"]
    for cond, sign in (("anchor_correct", 1), ("anchor_incorrect", -1)):
        for i in range(5):
            res = one(b, req(gen_meta(f"q{i}", cond), sample_index=i))
            assert res.text.startswith(f"[synthetic q={sign * 1.5:+.4f}] ")
            assert parse_quality_tag(res.text) == sign * pe["theta_anchor"]
    n = 1500
    thetas = {c: np.empty(n) for c in ("round1", "no_peer", "peer_wrong", "peer_correct")}
    for i in range(n):
        for c in thetas:
            thetas[c][i] = parse_quality_tag(one(b, req(gen_meta(f"q{i}", c), text=f"{c} {i}")).text)
    # b_t is shared by a trial's answers: differences have only the answer-level noise.
    se = math.sqrt(2) * pe["sigma_theta"] / math.sqrt(n)
    for c in ("no_peer", "peer_wrong", "peer_correct"):
        diff = thetas[c] - thetas["round1"]
        assert diff.mean() == pytest.approx(pe["eta"][c], abs=4 * se)
        assert diff.std() == pytest.approx(math.sqrt(2) * pe["sigma_theta"], rel=0.1)
    assert thetas["round1"].std() == pytest.approx(math.hypot(pe["sigma_b"], pe["sigma_theta"]), rel=0.1)
    assert thetas["round1"][0] == pytest.approx(trial_baseline(b, "q0", MODEL), abs=5 * pe["sigma_theta"])


def test_empty_generations_and_retry_through_runner(tmp_path):
    b = SyntheticBackend(model_name=MODEL, params={"empty_rate": 0.3})
    reqs = [req(gen_meta(f"q{i}", "round1"), text=f"Q{i}") for i in range(200)]
    first = [one(b, r) for r in reqs]
    empty = sum(r.text == "" for r in first)
    assert 40 <= empty <= 80  # 30% of 200
    store = ResponseStore(tmp_path / "store")
    out = run_requests(
        reqs,
        b,
        store,
        progress=False,
        max_attempts=6,
        reply_policy=ReplyPolicy("test", lambda t: (t, None if t.strip() else "empty_generation")),
    )
    # 0.3**6 * 200 ≈ 0.15 expected final misses: each is recorded with its reason, never as text.
    good = [r for r in out if r.ok and r.text]
    assert len(good) >= 198
    # An empty reply is "empty" whatever the study's own validator would call it.
    assert all(r.error == "invalid_reply: empty" for r in out if r not in good)


# ----------------------------------------------------------------------------- Study C judge


def test_rating_probabilities_closed_form():
    kappa = DEFAULTS["kappa"]
    p = rating_probabilities([-3.0, 0.0, 2.5], kappa)
    assert p.shape == (3, 5) and np.allclose(p.sum(-1), 1) and (p > 0).all()
    assert p[0].argmax() == 0 and p[2].argmax() == 4
    s = 1 / (1 + math.exp(-(kappa[0] - 0.7)))
    assert rating_probabilities(0.7, kappa)[0] == pytest.approx(s)


def test_judge_frequencies_match_ordered_logistic_and_failures_are_reasked(tmp_path):
    b = SyntheticBackend(model_name=MODEL, seed=11)
    pj = b.planted_effects()["conformity"]["judge"]
    theta, n = 0.4, 4000
    results = [one(b, req(judge_meta(), answer_prompt(theta), sample_index=i)) for i in range(n)]
    parsed = [parse_rating(r.text) for r in results]
    ratings = np.array([v for v, why in parsed if why is None])
    reasons = {why for _, why in parsed if why is not None}
    fail = 1 - len(ratings) / n
    assert fail == pytest.approx(pj["parse_failure_rate"], abs=0.012)
    assert {"no_json_object", "rating_out_of_range", "truncated_json", "rating_is_string"} <= reasons
    expected = rating_probabilities(pj["alpha"] * (theta - pj["beta"]), pj["kappa"]) * len(ratings)
    observed = np.bincount(ratings, minlength=6)[1:]
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    assert chi2 < 18.47  # chi-square(4) 99.9% quantile; fixed seed, so not flaky
    # Through the runner with the judging validator, malformed replies are re-asked and resolved.
    reqs = [req(judge_meta(), answer_prompt(0.1 * (i % 7)), sample_index=i) for i in range(300)]
    out = run_requests(
        reqs,
        b,
        ResponseStore(tmp_path / "s"),
        progress=False,
        reply_policy=rating_policy(),
        max_attempts=4,
    )
    assert all(r.ok and parse_rating(r.text)[1] is None for r in out)
    assert RATING_SCHEMA["required"] == ["rating"]


@pytest.mark.parametrize("judge, gamma", [("syn-mistral-7b", 0.64), ("syn-gemma-2-9b", -0.33)])
@pytest.mark.parametrize("d", [1, -1])
def test_informed_shift_has_sign_of_gamma_times_d(judge, gamma, d):
    b = SyntheticBackend(model_name=judge, params={"gamma": gamma, "parse_failure_rate": 0.0})
    pj = b.planted_effects()["conformity"]["judge"]
    n = 1500
    means = {}
    for pas in ("blind", "informed"):
        rs = [
            json.loads(one(b, req(judge_meta(pas, d, judge), answer_prompt(0.0), sample_index=i)).text)["rating"]
            for i in range(n)
        ]
        means[pas] = np.mean(rs)
    shift = means["informed"] - means["blind"]
    assert pj["gamma"] == gamma and np.sign(shift) == np.sign(gamma * d)
    k = np.arange(1, 6)
    mu_b = pj["alpha"] * (0.0 - pj["beta"])
    exp_shift = (
        rating_probabilities(mu_b + pj["gamma"] * d, pj["kappa"]) @ k - rating_probabilities(mu_b, pj["kappa"]) @ k
    )
    assert shift == pytest.approx(exp_shift, abs=0.12)


# ----------------------------------------------------------------------------- Study A (AMEL)


def amel_meta(item, cond, k=None, framing="standard", position=None):
    m = {"study": "amel", "item_id": item, "condition": cond, "framing": framing, "position": position}
    if k is not None:
        m["k"] = k
    return m


def mean_bs(b, n, cond, k, framing="standard", position=None):
    """Mean per-item bias score P(r*|treatment) − P(r*|baseline) from probe_probs."""
    probe = Sampling(max_tokens=1, logprobs=2, probe_tokens=("Yes", "No"))
    rstar = "No" if cond == "yes_saturated" else "Yes"
    bs = np.empty(n)
    for i in range(n):
        base = one(b, req(amel_meta(f"it{i}", "baseline", framing=framing), f"base {framing} {i}", sampling=probe))
        tr = one(b, req(amel_meta(f"it{i}", cond, k, framing, position), f"{cond} {k} {i}", sampling=probe))
        bs[i] = tr.probe_probs[rstar] - base.probe_probs[rstar]
    return bs


def test_amel_bias_scores_recover_planted_values():
    b = SyntheticBackend(model_name=MODEL, seed=5)
    pa = b.planted_effects()["amel"]
    n = 1200
    bs = {c: {k: mean_bs(b, n, c, k) for k in (5, 20)} for c in ("yes_saturated", "no_saturated")}
    for c in bs:
        for k, v in bs[c].items():
            assert v.mean() == pytest.approx(
                pa["expected_bias_score"]["standard"][c][k], abs=4 * v.std() / math.sqrt(n)
            )
            assert v.mean() < 0  # conforming
        assert abs(bs[c][5].mean()) < abs(bs[c][20].mean())  # f(k) increasing
    ratio = bs["no_saturated"][20].mean() / bs["yes_saturated"][20].mean()
    assert ratio == pytest.approx(pa["bias_score_ratio"]["standard"][20], rel=0.08)
    assert ratio > 1.3
    assert pa["f_k"][5] < pa["f_k"][10] < pa["f_k"][20] < pa["f_k"][50] <= 1
    # Framing swap keeps the token-level part of the asymmetry only.
    sw = {c: mean_bs(b, n, c, 20, "swapped") for c in ("yes_saturated", "no_saturated")}
    ratio_sw = sw["no_saturated"].mean() / sw["yes_saturated"].mean()
    assert ratio_sw == pytest.approx(pa["bias_score_ratio"]["swapped"][20], rel=0.08)
    assert 1 < ratio_sw < ratio
    # Recency: biased turns at the end move more than at the start.
    start = mean_bs(b, 300, "no_saturated", 5, position="start").mean()
    end = mean_bs(b, 300, "no_saturated", 5, position="end").mean()
    assert end < start < 0


def test_amel_items_mix_and_framing_flips_semantics_only():
    b = SyntheticBackend(model_name=MODEL)
    p = np.array([amel_p_yes(b, f"it{i}") for i in range(2000)])
    det = (p < 0.05) | (p > 0.95)
    assert 0.4 < det.mean() < 0.65  # near-deterministic and uncertain items
    tau = b.planted_effects()["amel"]["yes_bias"]
    for i in range(20):
        logit = lambda q: math.log(q / (1 - q))
        std, sw = amel_p_yes(b, f"it{i}"), amel_p_yes(b, f"it{i}", framing="swapped")
        # semantic part flips, token-level yes-bias stays: mean of the two logits is τ
        assert (logit(std) + logit(sw)) / 2 == pytest.approx(tau, abs=1e-9)


def test_amel_sampling_logprobs_and_completion_mode():
    b = SyntheticBackend(model_name=MODEL)
    m = amel_meta("it3", "yes_saturated", 10)
    p = amel_p_yes(b, "it3", "yes_saturated", 10)
    texts = [one(b, req(m, "x", sample_index=i, mode="completion")).text for i in range(3000)]
    assert set(texts) <= {"Yes", "No"}
    assert np.mean([t == "Yes" for t in texts]) == pytest.approx(p, abs=4 * math.sqrt(p * (1 - p) / 3000) + 1e-3)
    res = one(b, req(m, "x", sampling=Sampling(max_tokens=300, logprobs=5)))
    assert res.probe_probs == pytest.approx({"Yes": p, "No": 1 - p})
    assert res.first_token_logprobs == pytest.approx({"Yes": math.log(p), "No": math.log(1 - p)})
    assert one(b, req(m, "x")).probe_probs is None
    probes = Sampling(max_tokens=300, probe_tokens=("Yes", " Yes"))
    assert one(b, req(m, "x", sampling=probes)).probe_probs == pytest.approx({"Yes": p})
    assert (
        amel_expected_bias_score(MODEL, None, "no_saturated", 20)
        < amel_expected_bias_score(MODEL, None, "no_saturated", 5)
        < 0
    )


# ----------------------------------------------------------------------------- Study H (anchoring)


def test_anchoring_pull_recovers_lambda():
    b = SyntheticBackend(model_name=MODEL, seed=2)
    ph = b.planted_effects()["anchoring"]
    reps, x, y, af = 25, [], [], []
    for t in range(120):
        gold = 2 + t % 3
        prior = gold + (1, -1, 2, -2)[t % 4]
        prior = min(5, max(1, prior))
        scores = {}
        for cond in ("blind", "framing", "anchor"):
            meta = {
                "study": "anchoring",
                "task_id": f"t{t}",
                "condition": cond,
                "gold_score": gold,
                "prior_score": prior,
                "repetition": 0,
            }
            rs = [
                json.loads(one(b, req({**meta, "repetition": r}, f"{cond} t{t}", sample_index=r)).text)["score"]
                for r in range(reps)
            ]
            assert all(1 <= s <= 5 for s in rs)
            scores[cond] = np.mean(rs)
        x.append(prior - scores["blind"])
        y.append(scores["anchor"] - scores["blind"])
        pull = ph["lambda"] * (prior - anchoring_blind_mean(b, f"t{t}", gold))
        af.append(scores["anchor"] - scores["framing"] - pull)
    slope, intercept = np.polyfit(x, y, 1)
    assert slope == pytest.approx(ph["lambda"], abs=0.06)
    assert intercept == pytest.approx(ph["framing_shift"], abs=0.06)
    assert np.mean(af) == pytest.approx(0.0, abs=0.05)
    # signed prior-score pull is positive on average
    assert np.mean(np.sign(x) * np.array(y)) > 0.15


def test_the_runs_synthetic_seed_is_another_draw_of_the_same_world_and_never_shares_an_answer():
    """``sampling.synthetic_seed`` reaches every job through ``dag.model_settings``: it redraws
    the trial baselines, it is part of each request's key, and a backend of one draw refuses
    a request written for the other instead of answering it from the wrong world."""
    from pathlib import Path

    from context_effects import dag
    from context_effects.config import load_config, validate_config
    from context_effects.llm.factory import make_backend, model_ref

    cfg = validate_config(load_config(Path(__file__).resolve().parents[1] / "config" / "synthetic.yaml"))
    assert cfg["sampling"]["synthetic_seed"] == 0
    model = next(m for m, c in cfg["models"].items() if c["backend"] == "synthetic")
    drawn = {}
    for seed in (0, 3):
        run = {**cfg, "sampling": {**cfg["sampling"], "synthetic_seed": seed}}
        settings = dag.model_settings(run, model)
        assert settings["synthetic_seed"] == seed
        backend = make_backend(model, settings)
        ref = model_ref(model, settings)
        assert backend.seed == seed and ref.revision == backend.revision
        r = dataclasses.replace(req(gen_meta(f"tqa/{seed}", "round1", generator=model), model=model), model=ref)
        assert one(backend, r).ok
        drawn[seed] = (backend, ref, r)
    (b0, ref0, r0), (b3, ref3, r3) = drawn[0], drawn[3]
    assert ref0.revision != ref3.revision and r0.key != dataclasses.replace(r0, model=ref3).key
    assert not one(b3, r0).ok and "revision" in one(b3, r0).error
    baselines = [[trial_baseline(b, f"tqa/{i}", model) for i in range(200)] for b in (b0, b3)]
    assert abs(np.corrcoef(*baselines)[0, 1]) < 0.2
    assert np.std(baselines[0]) == pytest.approx(np.std(baselines[1]), rel=0.25)
    # A real model's settings carry no seed: its keys do not depend on the synthetic world.
    paper = validate_config(load_config(Path(__file__).resolve().parents[1] / "config" / "config.yaml"))
    paper["sampling"]["synthetic_seed"] = 3
    assert not any("synthetic_seed" in dag.model_settings(paper, m) for m in paper["models"])
