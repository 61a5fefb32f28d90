"""The context-effects card (``snakemake card``, ``context_effects.card``).

End to end on the synthetic backend: the shared synthetic run (tests/conftest.py) builds
the card of its two models, planted far apart on each study's headline quantity (Study C's
gamma, Study A's bias, Study H's anchoring lambda). Every number the card prints with an
interval must cover the value its model planted, and the comparison must
separate the two models wherever the planted difference is at least twice the smallest
difference the run's own intervals resolve (sqrt(h1^2 + h2^2), docs/card.md). The unit
tests pin how the seed's models are found among the transcribed numbers, and the config
checks.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import CARD_MODELS, REPO, run_snakemake, synthetic_run_config
from context_effects import card
from context_effects.config import ConfigError, validate_config
from context_effects.paper.reproduction import read_published
from context_effects.studies import Headline

MODELS = CARD_MODELS
#: Study C's Table 3 columns and the planted shift each estimates.
ETA = {"all-correct": "peer_correct", "mixed": "peer_mixed", "all-wrong": "peer_wrong"}


@pytest.fixture(scope="module")
def card_run(synthetic_run) -> Path:
    """The shared synthetic run, which builds every card (``CARD_PLANTED``)."""
    return synthetic_run.repo


def planted_values(repo: Path) -> dict[tuple[str, str], float]:
    """(model, card quantity) -> the value the model planted, read from planted.json (and,
    for Study H's pull, what lambda implies for the run's own tasks)."""
    from context_effects.anchoring.recovery import pull_rows

    planted = json.loads((repo / "results" / "synthetic" / "planted.json").read_text())
    out = {}
    for m in MODELS:
        out[(m, "gamma")] = planted["conformity"]["judges"][m]["gamma"]
        gen = planted["conformity"]["generators"][m]
        for words, cond in ETA.items():
            out[(m, f"eta_{words}_truthfulqa")] = gen["eta"][cond]
        out[(m, "asym_total_truthfulqa")] = gen["asym_total"]
        head = planted["amel"]["models"][m]["headline"]["single_call"]
        out[(m, "d")] = head["d"]
        out[(m, "asymmetry")] = head["ratio_abs"]
    runs = {m: json.loads((repo / "results" / "anchoring" / "runs" / f"{m}.json").read_text()) for m in MODELS}
    for r in pull_rows(planted, runs):
        if r["parameter"] == "pull (mean, implied by λ)":
            out[(r["model"], "pull")] = r["planted"]
    return out


def test_every_card_interval_covers_its_planted_value(card_run):
    planted = planted_values(card_run)
    checked = {}
    for m in MODELS:
        rows = pd.read_csv(card_run / "results" / "card" / f"{m}.csv")
        for r in rows.itertuples():
            if (m, r.quantity) not in planted:
                continue
            p = planted[(m, r.quantity)]
            # Study C's short synthetic chains may miss the paper's ESS threshold: the card says so.
            assert r.status == "ok" or (r.study == "conformity" and r.status.startswith("fit diagnostics FAILED")), (
                m, r.quantity, r.status)
            assert r.lower <= p <= r.upper, f"{m} {r.quantity}: planted {p:+.3f} outside [{r.lower:+.3f}, {r.upper:+.3f}]"
            checked.setdefault(r.study, set()).add(r.quantity)
    # Each study's headline numbers with a planted value are all there.
    assert checked == {"conformity": {"gamma", "asym_total_truthfulqa", *(f"eta_{w}_truthfulqa" for w in ETA)},
                       "amel": {"d", "asymmetry"}, "anchoring": {"pull"}}


def test_the_comparison_separates_the_models_where_the_design_resolves_the_planted_difference(card_run):
    planted = planted_values(card_run)
    table = pd.read_csv(card_run / "results" / "card" / "comparison.csv", keep_default_na=False)
    must = set()
    for quantity in dict.fromkeys(table["quantity"]):
        a, b = (table[(table["quantity"] == quantity) & (table["model"] == m)].iloc[0] for m in MODELS)
        if (MODELS[0], quantity) not in planted:
            continue
        gap = abs(planted[(MODELS[0], quantity)] - planted[(MODELS[1], quantity)])
        if gap > 2 * card.resolvable(float(a["half_width"]), float(b["half_width"])):
            must.add((a["study"], quantity))
            assert a["separated_from"] == MODELS[1] and b["separated_from"] == MODELS[0], (quantity, a, b)
    # The planted gaps are wide enough that each study has a number the design must resolve.
    assert {s for s, _ in must} == {"conformity", "amel", "anchoring"}, must
    assert ("conformity", "gamma") in must and ("amel", "d") in must and ("anchoring", "pull") in must


def test_the_card_names_the_model_the_seed_models_and_what_the_run_is(card_run):
    out = card_run / "results" / "card"
    text = (out / "qwen-sim.md").read_text()
    assert text.startswith("# Context-effects card: Qwen-sim")
    assert "Synthetic backend: simulated models with planted effects" in text
    assert "| served as (Study H replies) | qwen-sim@synthetic-1-" in text
    assert re.search(r"\| replies dated \| \d{4}-\d\d-\d\dT[\d:.]+Z( to \d{4}-\d\d-\d\dT[\d:.]+Z)? \|", text)
    # Seed 002's Table 4 judges beside this one's gamma, with their printed intervals.
    assert "Mistral-7B +0.637 [+0.607, +0.668]" in text and "GPT-4o -0.096 [-0.163, -0.030]" in text
    # Seed 000's per-model d (Figure 14's |d| signed back) and its pooled asymmetry.
    assert "gpt-5-nano -0.340" in text and "claude-sonnet -0.180" in text and "seed roster (pooled) +1.620" in text
    assert "Seed 001 is a preregistered protocol" in text
    assert "\\|BS(no)\\|" in text  # a pipe inside a cell does not break the table
    for m in MODELS:
        for study in ("conformity", "amel", "anchoring"):
            assert (out / f"{m}_{study}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The one-page PDF, built like the paper (the synthetic config builds PDFs).
    page = subprocess.run(["pdftotext", str(out / "qwen-sim.pdf"), "-"], capture_output=True, text=True, check=True)
    assert "Context-effects card: Qwen-sim" in page.stdout and "Synthetic backend" in page.stdout
    info = subprocess.run(["pdfinfo", str(out / "qwen-sim.pdf")], capture_output=True, text=True, check=True)
    assert re.search(r"^Pages:\s+1$", info.stdout, re.M), info.stdout
    comparison = (out / "comparison.md").read_text()
    assert "| conformity | peer-context loading of its ratings, gamma_j |" in comparison


def test_one_more_model_asks_only_for_its_own_answers(card_run, tmp_path):
    """A third model on the finished run: a dry run answers its requests alone (the others'
    shards and Study C's fits stay), and writes its card beside the others."""
    cfg = synthetic_run_config()
    cfg["models"]["mistral-sim"] = {**cfg["models"]["qwen-sim"], "model_id": "mistral-sim",
                                    "display_name": "Mistral-sim", "family": "mistral"}
    cfg["amel"]["models"].append("mistral-sim")
    cfg["anchoring"]["judges"].append("mistral-sim")
    cfg["card"]["models"].append("mistral-sim")
    config = tmp_path / "card-tests-3.yaml"  # the shared run is only read
    config.write_text(yaml.safe_dump(cfg, sort_keys=False))
    res = run_snakemake("--snakefile", str(card_run / "Snakefile"), "--directory", str(card_run),
                        f"--configfile={config}", "--workflow-profile", "none", "-n", "card", cwd=card_run)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    jobs = re.findall(r"^(?:local)?rule (\w+):\n(?:    .*\n)*?    wildcards: (.*)$", res.stdout, re.M)
    answered = {w for rule, w in jobs if rule.startswith("answer_requests")}
    assert answered and all("model=mistral-sim" in w for w in answered), answered
    assert "rule conformity_fit" not in res.stdout
    assert "results/card/mistral-sim.md" in res.stdout


# ----------------------------------------------------------------------------- units


def _published() -> pd.DataFrame:
    return read_published(sorted((REPO / "paper" / "published").glob("*/*.csv")))


def test_seed_values_are_the_seeds_models_on_the_same_cell_in_the_tables_unit():
    published = _published()
    gamma = Headline("conformity", "gamma", "gamma", "judge", "conformity/table4", (), "Judge", "X",
                     "gamma_j @ 95% CrI")
    seeds = {s.model: s for s in card.seed_values(gamma, published)}
    assert set(seeds) == {"Gemma-2-9B", "Llama-3.1-8B", "Qwen2.5-7B", "Mistral-7B", "GPT-4o", "GPT-5.4-mini"}
    assert (seeds["Mistral-7B"].value, seeds["Mistral-7B"].lower, seeds["Mistral-7B"].upper) == (0.637, 0.607, 0.668)
    # Figure 14 prints |d| (scale -1): back in the table's signed unit; the pooled row is the roster's.
    d = Headline("amel", "d", "d", "answering model", "amel/effects", (("method", "single_call"), ("scope", "model")),
                 "group", "x", "d @ d_ci_low, d_ci_high", pooled=(("scope", "overall"), ("group", "all")))
    seeds = {s.model: s.value for s in card.seed_values(d, published)}
    assert seeds["claude-sonnet"] == -0.18 and seeds["gpt-5-nano"] == -0.34 and seeds[card.POOLED] == -0.17
    assert len(seeds) == 8
    # Another dataset's rows are not this one's.
    shift = Headline("conformity", "eta", "eta", "generator", "conformity/table3", (("Dataset", "MMLU-Pro"),), "Model",
                     "X", "All-Wrong")
    assert {s.model: s.value for s in card.seed_values(shift, published)}["Llama-3.1-8B"] == -0.479


def test_told_apart_only_beyond_the_combined_half_width():
    assert card.resolvable(0.3, 0.4) == pytest.approx(0.5)
    assert not card.tells_apart(0.0, 0.3, 0.49, 0.4)
    assert card.tells_apart(0.0, 0.3, 0.51, 0.4)
    assert card.tells_apart(0.2, 0.1, 0.0, 0.0)  # a seed value printed without an interval


def _config(**card_section) -> dict:
    cfg = yaml.safe_load((REPO / "config" / "synthetic.yaml").read_text())
    cfg["card"] = card_section
    return cfg


def test_a_name_latex_cannot_set_never_stops_the_page():
    assert card.tex("Qwen_2.5 & co: 100% {new} |x| ~ ^") == (
        r"Qwen\_2.5 \& co: 100\% \{new\} \textbar{}x\textbar{} \textasciitilde{} \textasciicircum{}")
    assert card.tex("Modèle γ") == "Modèle ?"


def test_card_models_must_be_run_by_an_enabled_study():
    cfg = _config(models=["qwen-sim"])
    cfg["models"]["spare-sim"] = {**cfg["models"]["qwen-sim"], "model_id": "spare-sim"}
    cfg["card"]["models"] = ["spare-sim"]
    with pytest.raises(ConfigError, match=r"`card.models` names model 'spare-sim', which no enabled study runs"):
        validate_config(cfg)
    cfg["card"]["models"] = ["nowhere"]
    with pytest.raises(ConfigError, match=r"`card.models` names model 'nowhere', which is not defined"):
        validate_config(cfg)


def test_without_card_models_every_model_the_studies_run_gets_a_card():
    cfg = validate_config(_config())
    assert card.card_models(cfg) == ["llama-sim", "qwen-sim"]
    outs = card.outputs(validate_config(_config(models=["qwen-sim"])))
    assert outs["cards"] == ["results/card/qwen-sim.md"]
    assert outs["figures"] == [f"results/card/qwen-sim_{s}.png" for s in ("conformity", "amel", "anchoring")]
    # A model only Study A runs has only Study A's numbers.
    cfg = _config(models=["qwen-sim"])
    cfg["conformity"]["judges"] = cfg["conformity"]["generators"] = ["llama-sim"]
    cfg["anchoring"]["judges"] = ["llama-sim"]
    cfg = validate_config(cfg)
    assert card.studies_of(cfg, "qwen-sim") == ["amel"]
    assert [h.quantity for h in card.headlines(cfg, "qwen-sim")] == ["d", "asymmetry", "d_uncertain",
                                                                      "d_deterministic"]


# ----------------------------------------------------------------------------- preflight

#: A card for a hosted judge in Study H beside a free synthetic one.
HOSTED = {
    "run": {"label": "card-keys", "kind": "paper"},
    "datasets": {"truthfulqa": {"source": "local", "local_path": "data/demo/truthfulqa.jsonl", "n_items": 4}},
    "models": {"sim": {"backend": "synthetic", "model_id": "sim"},
               "claude": {"backend": "anthropic", "model_id": "claude-sonnet-4-5"}},
    "conformity": {"enabled": False},
    "amel": {"enabled": False},
    "anchoring": {"judges": ["sim", "claude"], "benchmark_datasets": ["truthfulqa"], "tasks_per_dataset": 4},
    "card": {"models": ["claude"]},
}


def _card(workdir: Path, cfg: dict, **env: str):
    import os

    path = workdir / "card.yaml"
    path.write_text(yaml.safe_dump(cfg))
    full = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    return run_snakemake("--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir), f"--configfile={path}",
                         "--cores", "1", "card", cwd=REPO, env={**full, **env})


def test_a_card_of_a_hosted_model_is_checked_like_any_run_before_any_job(workdir):
    res = _card(workdir, HOSTED)
    out = res.stdout + res.stderr
    assert res.returncode != 0 and "ANTHROPIC_API_KEY  (needed by: claude)" in out, out[-3000:]
    assert not (workdir / "results").exists() and not (workdir / "logs").exists()
    # With the key, a budget of zero refuses the billed card before any job.
    res = _card(workdir, {**HOSTED, "run": {**HOSTED["run"], "budget_usd": 0}}, ANTHROPIC_API_KEY="sk-ant-unused")
    out = res.stdout + res.stderr
    assert res.returncode != 0 and "run.budget_usd" in out, out[-3000:]
    assert not (workdir / "results" / "responses").exists()


# ----------------------------------------------------------------------------- the card's design file

MY_MODEL = {"models": {"my-sim": {"backend": "synthetic", "model_id": "my-sim", "display_name": "My-sim"},
                       "my-base": {"backend": "synthetic", "model_id": "my-base", "mode": "completion"}},
            "card": {"models": ["my-sim", "my-base"]}}


def _card_design(extra: dict | None) -> dict:
    from context_effects.config import load_config

    cfg = load_config(REPO / "config" / "card.yaml")
    for key, value in (extra or {}).items():
        cfg[key] = {**cfg.get(key, {}), **value}  # Snakemake merges a second --configfile the same way
    return cfg


def test_the_card_design_runs_every_study_on_the_named_models_only():
    cfg = validate_config(_card_design(MY_MODEL))
    assert cfg["amel"]["models"] == cfg["anchoring"]["judges"] == cfg["conformity"]["judges"] == ["my-sim", "my-base"]
    assert cfg["conformity"]["generators"] == ["my-sim"]  # a completion-mode model writes no revision
    assert card.card_models(cfg) == ["my-sim", "my-base"]
    with pytest.raises(ConfigError, match=r"`card.run_studies` is true but `card.models` is empty: define the model"):
        validate_config(_card_design(None))


def test_the_card_design_with_a_model_file_plans_only_what_the_card_reads(tmp_path):
    (tmp_path / "data").symlink_to(REPO / "data")
    model_file = tmp_path / "my-model.yaml"
    model_file.write_text(yaml.safe_dump({**MY_MODEL, "card": {"models": ["my-sim"]}}))
    res = run_snakemake("card", "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path), "-n",
                        "--configfile", str(REPO / "config" / "card.yaml"), str(model_file), cwd=REPO)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    jobs = re.findall(r"^(?:local)?rule (\w+):\n(?:    .*\n)*?    wildcards: (.*)$", res.stdout, re.M)
    answered = {w for rule, w in jobs if rule.startswith("answer_requests")}
    assert answered and all("model=my-sim" in w for w in answered), answered
    assert "rule fetch_release" in res.stdout  # the predecessor release's TruthfulQA sample
    # Only the main fit and nothing the card does not read: no decomposition corpus, no text metrics, no paper.
    fits = re.findall(r"results/conformity/fits/(\S+?)/summary.csv", res.stdout)
    assert set(fits) == {"truthfulqa/main"}, set(fits)
    assert "conformity_answer_metrics" not in res.stdout and "paper_pdf" not in res.stdout
