"""Figures: where every figure goes (``figures/<study>/``, its data under ``results/figures/``),
and Study C's forest plots of Tables 3 and 4 drawn from fit summaries — their data are the
summaries' own numbers, failed fits are marked, the run caveat sits under everything, and
the workflow's one fit-figure rule writes PDF + PNG + CSV. Every study's figures, drawn at
paper size on small synthetic inputs: printed width, no text under 7 pt, and the run's
caveat clear of every tick label and panel."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import REPO, run_snakemake
from context_effects import targets
from context_effects.config import load_config, validate_config
from context_effects.figures import add_note
from context_effects.measurement import figures as F
from context_effects.outputs import draw_registered_figure, figure_outputs, figure_path, registry
from context_effects.tables import run_notes

SUMMARY_COLUMNS = ["block", "parameter", "generator", "condition", "judge", "mean", "sd", "q2.5", "q97.5", "pr_gt0",
                   "rhat", "ess_bulk", "ess_tail"]
CONDITIONS = ("peer_correct", "peer_wrong", "peer_mixed")


def _config(hosted: bool = True, datasets=("truthfulqa", "mmlu_pro")) -> dict:
    models = {m: {"backend": "synthetic", "model_id": m, "family": "a"} for m in ("g1", "g2", "j1", "j2")}
    models["g1"]["display_name"] = "Gen One"
    conformity = {"datasets": list(datasets), "generators": ["g1", "g2"], "judges": ["j1", "j2"],
                  "decomposition": {"enabled": False}, "fit": {"theta_anchor_sensitivity": [1.5]}}
    if hosted:
        models["h1"] = {"backend": "openai", "model_id": "gpt-x", "api_key_env": "OPENAI_API_KEY",
                        "display_name": "Hosted X"}
        conformity |= {"hosted_judges": ["h1"], "hosted_judge_datasets": ["truthfulqa"]}
    return validate_config({
        "run": {"kind": "synthetic"},
        "datasets": {d: {"source": "local", "local_path": f"data/demo/{d}.jsonl"} for d in datasets},
        "models": models,
        "conformity": conformity,
        "amel": {"enabled": False},
        "anchoring": {"enabled": False},
    })


def _summary(rng: np.random.Generator, generators, judges) -> pd.DataFrame:
    """A fit summary as ``measurement.fit.summarize`` writes it, with unrounded values."""
    rows = [{"block": "sigma_b", "parameter": "sigma_b"}]
    rows += [{"block": "total_shift", "parameter": f"total_shift[{g},{c}]", "generator": g, "condition": c}
             for g in generators for c in CONDITIONS]
    rows += [{"block": "asym_total", "parameter": f"asym_total[{g}]", "generator": g} for g in generators]
    rows += [{"block": "gamma", "parameter": f"gamma[{j}]", "judge": j} for j in judges]
    for r in rows:
        m, sd = rng.normal(0, 0.6), rng.uniform(0.1, 0.4)
        r.update({"mean": m, "sd": sd, "q2.5": m - 1.96 * sd - rng.uniform(0, 0.05),
                  "q97.5": m + 1.96 * sd + rng.uniform(0, 0.05), "pr_gt0": rng.uniform(), "rhat": 1.001,
                  "ess_bulk": 2000.0, "ess_tail": 1800.0})
    return pd.DataFrame(rows).reindex(columns=SUMMARY_COLUMNS)


def _diag(failed: bool) -> dict:
    return {"method": "nuts", "max_rhat": 1.2 if failed else 1.001, "max_rhat_at": "gamma[j1]",
            "min_ess_bulk": 5000.0, "min_ess_bulk_at": "eta", "min_ess_tail": 5000.0, "min_ess_tail_at": "eta",
            "divergences": 0, "chains": 4, "draws_per_chain": 1500, "data": {}}


def _write_fits(root: Path, config: dict, failed=frozenset(), seed: int = 0) -> dict[tuple[str, str], pd.DataFrame]:
    """Every fit of the plan as a folder holding summary.csv and diagnostics.json, each with
    the record of the config's settings a fit job writes (measurement.records)."""
    from context_effects.measurement.pipeline import (
        RECORD_KEY,
        RECORD_SHA256_COLUMN,
        fit_dir,
        fit_plan,
        made_with,
        record_sha256,
    )

    rng = np.random.default_rng(seed)
    out = {}
    for spec in fit_plan(config):
        d = root / fit_dir(spec)
        d.mkdir(parents=True, exist_ok=True)
        record = made_with(config, spec)
        summary = _summary(rng, config["conformity"]["generators"], spec.judges)
        summary.assign(**{RECORD_SHA256_COLUMN: record_sha256(record)}).to_csv(d / "summary.csv", index=False)
        diag = {**_diag((spec.dataset, spec.variant) in failed), RECORD_KEY: record}
        (d / "diagnostics.json").write_text(json.dumps(diag))
        out[(spec.dataset, spec.variant)] = pd.read_csv(d / "summary.csv")
    return out


def _inputs(root: Path, config: dict, name: str) -> dict:
    return {k: [str(root / p) for p in v] for k, v in registry("conformity").figure(name).inputs(config).items()}


def _draw(root: Path, config: dict, name: str):
    spec = registry("conformity").figure(name)
    return spec.draw(_inputs(root, config, name), spec.settings(config))


def _summary_row(summary: pd.DataFrame, **labels) -> pd.Series:
    m = np.ones(len(summary), bool)
    for k, v in labels.items():
        m &= (summary[k] == v).to_numpy()
    (i,) = np.flatnonzero(m)
    return summary.iloc[i]


# ------------------------------------------------------------------ where figures go


def test_figure_files_go_to_the_top_level_figures_folder_and_data_stays_in_results():
    assert figure_path("amel", "effects", "pdf") == "figures/amel/effects.pdf"
    assert figure_path("conformity", "eta_forest", "csv") == "results/figures/conformity/eta_forest.csv"
    paper = validate_config(load_config(REPO / "config" / "config.yaml"))
    for study in ("conformity", "amel", "anchoring"):
        reg = registry(study)
        for fig in reg.figures():
            for path in figure_outputs(study, fig):
                folder = "results/figures" if path.endswith(".csv") else "figures"
                assert path == f"{folder}/{study}/{fig.name}.{path.rsplit('.', 1)[1]}"
    figures = targets.report_figures(paper)
    assert figures and all(f.startswith("figures/") and f.endswith((".pdf", ".png")) for f in figures)
    every = {f for study in ("conformity", "amel", "anchoring") for fig in registry(study).figures()
             for f in figure_outputs(study, fig) if not f.endswith(".csv")}
    assert set(figures) == every  # the run report lists every figure file, nothing else
    for name in ("rating_distributions", "eta_forest", "gamma_forest"):
        assert f"figures/conformity/{name}.pdf" in figures
        assert f"results/figures/conformity/{name}.csv" in targets.study_outputs(paper)
    assert registry("conformity").figure("eta_forest").stage == "fit"
    assert registry("conformity").figure("gamma_forest").stage == "fit"


def test_gitignore_keeps_generated_figures_out_of_git():
    lines = (REPO / ".gitignore").read_text().split()
    assert "figures/*" in lines or "figures/" in lines


# ------------------------------------------------------------------ eta forest


def test_eta_forest_data_are_table3_summary_rows(tmp_path):
    cfg = _config()
    summaries = _write_fits(tmp_path, cfg)
    fig, data = _draw(tmp_path, cfg, "eta_forest")
    # 2 datasets x 2 generators x (3 conditions + Asym_total); hosted refits are not Table 3's.
    assert len(data) == 16 and set(data["fit"]) == {"main"}
    for _, r in data.iterrows():
        summary = summaries[(r["dataset"], "main")]
        if r["block"] == "total_shift":
            s = _summary_row(summary, block="total_shift", generator=r["generator"], condition=r["condition"])
        else:
            s = _summary_row(summary, block="asym_total", generator=r["generator"])
        for col in ("mean", "sd", "q2.5", "q97.5", "pr_gt0"):
            assert r[col] == s[col], (col, r.to_dict())  # full precision, not the table's 3 decimals
    assert list(data.loc[data["dataset"] == "truthfulqa", "quantity"].iloc[:4]) == [
        "All-Correct", "All-Wrong", "Mixed", "Asym_total"]
    assert set(data["generator_label"]) == {"Gen One", "g2"}
    assert len(fig.axes) == 2 and [a.get_title() for a in fig.axes] == ["TruthfulQA", "MMLU-Pro"]
    # A vertical line at zero in every panel.
    for ax in fig.axes:
        assert any(list(line.get_xdata()) == [0.0, 0.0] for line in ax.get_lines())


def test_failed_fit_is_drawn_hollow_and_named_in_the_legend(tmp_path):
    cfg = _config(hosted=False)
    _write_fits(tmp_path, cfg, failed={("mmlu_pro", "main")})
    fig, data = _draw(tmp_path, cfg, "eta_forest")
    assert set(data.loc[data["dataset"] == "mmlu_pro", "diagnostics"]) == {"FAILED"}
    assert set(data.loc[data["dataset"] == "truthfulqa", "diagnostics"]) == {"ok"}

    def faces(ax):
        return {str(line.get_markerfacecolor()) for line in ax.get_lines() if line.get_marker() not in ("None", "")}

    ok_ax, failed_ax = fig.axes
    assert "white" not in faces(ok_ax) and faces(failed_ax) == {"white"}
    legend = " ".join(t.get_text() for t in fig.legends[0].get_texts())
    assert F.FAILED_LEGEND in legend
    assert any(F.FAILED_NOTE in t.get_text().replace("\n", " ") for t in fig.texts)

    _write_fits(tmp_path, cfg)  # every fit passes: no hollow marker, no legend entry
    fig, _ = _draw(tmp_path, cfg, "eta_forest")
    assert F.FAILED_LEGEND not in " ".join(t.get_text() for t in fig.legends[0].get_texts())


def test_caveat_sits_below_every_tick_label_and_axis_label(tmp_path):
    cfg = _config()
    _write_fits(tmp_path, cfg)
    for name in ("eta_forest", "gamma_forest"):
        fig, _ = _draw(tmp_path, cfg, name)
        caveat = run_notes("synthetic")[0]
        notes = [t for t in fig.texts if caveat.split(";")[0] in t.get_text().replace("\n", " ")]
        assert len(notes) == 1, name
        renderer = fig.canvas.get_renderer()
        fig.canvas.draw()
        note_box = notes[0].get_window_extent(renderer)
        lowest = min([ax.get_tightbbox(renderer).y0 for ax in fig.axes]
                     + [fig._supxlabel.get_window_extent(renderer).y0])
        assert note_box.y1 < lowest, name
        assert note_box.width <= fig.get_tightbbox(renderer).width * fig.dpi + 1, name


def test_add_note_without_notes_adds_nothing():
    import matplotlib.pyplot as plt

    fig, _ = plt.subplots()
    assert add_note(fig, run_notes("paper")) is None and not fig.texts
    plt.close(fig)


def test_interval_columns_as_the_summary_holds_them(tmp_path):
    cfg = _config(hosted=False, datasets=("truthfulqa",))
    summaries = _write_fits(tmp_path, cfg)
    path = tmp_path / "results/conformity/fits/truthfulqa/main/summary.csv"
    hdi = summaries[("truthfulqa", "main")].rename(columns={"q2.5": "hdi_2.5%", "q97.5": "hdi_97.5%"})
    hdi.to_csv(path, index=False)
    fig, data = _draw(tmp_path, cfg, "eta_forest")
    assert "hdi_2.5%" in data.columns and "q2.5" not in data.columns
    s = _summary_row(hdi, block="total_shift", generator="g2", condition="peer_wrong")
    r = data[(data["generator"] == "g2") & (data["condition"] == "peer_wrong")].iloc[0]
    assert (r["hdi_2.5%"], r["hdi_97.5%"]) == (s["hdi_2.5%"], s["hdi_97.5%"])
    with pytest.raises(KeyError, match="interval columns"):
        F.interval_columns(["mean", "sd"])


# ------------------------------------------------------------------ gamma forest


def test_gamma_forest_rows_are_table4_judges_per_fit(tmp_path):
    cfg = _config()
    summaries = _write_fits(tmp_path, cfg, failed={("truthfulqa", "hosted-h1")})
    fig, data = _draw(tmp_path, cfg, "gamma_forest")
    # Open-weight judges from each main fit, the hosted judge from its own refit only.
    assert list(zip(data["dataset"], data["judge"], data["fit"])) == [
        ("truthfulqa", "j1", "main"), ("truthfulqa", "j2", "main"),
        ("mmlu_pro", "j1", "main"), ("mmlu_pro", "j2", "main"),
        ("truthfulqa", "h1", "hosted-h1")]
    for _, r in data.iterrows():
        s = _summary_row(summaries[(r["dataset"], r["fit"])], block="gamma", judge=r["judge"])
        for col in ("mean", "q2.5", "q97.5", "pr_gt0"):
            assert r[col] == s[col], (col, r.to_dict())
    assert list(data["diagnostics"]) == ["ok"] * 4 + ["FAILED"]
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["j1", "j2", "Hosted X (refit)"]
    legend = " ".join(t.get_text() for t in fig.legends[0].get_texts())
    assert "hosted judge" in legend and F.FAILED_LEGEND in legend


# ------------------------------------------------------------------ files


def test_registered_figures_write_pdf_png_and_their_data(tmp_path):
    cfg = _config()
    _write_fits(tmp_path, cfg)
    reg = registry("conformity")
    for name in ("eta_forest", "gamma_forest"):
        spec = reg.figure(name)
        outs = {p.rsplit(".", 1)[1]: str(tmp_path / "out" / p) for p in figure_outputs("conformity", spec)}
        assert set(outs) == {"csv", "pdf", "png"}
        data = draw_registered_figure("conformity", name, _inputs(tmp_path, cfg, name), spec.settings(cfg), outs)
        assert Path(outs["pdf"]).read_bytes()[:5] == b"%PDF-"
        assert Path(outs["png"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        back = pd.read_csv(outs["csv"])
        assert back["mean"].tolist() == data["mean"].tolist()  # the CSV keeps full precision
        first = Path(outs["pdf"]).read_bytes()
        draw_registered_figure("conformity", name, _inputs(tmp_path, cfg, name), spec.settings(cfg), outs)
        assert Path(outs["pdf"]).read_bytes() == first  # byte-stable reruns


def test_no_main_fit_draws_a_labelled_empty_figure():
    settings = {"fits": [], "generators": ["g"], "datasets": ["truthfulqa"], "display_names": {},
                "thresholds": {}, "run_kind": "demo"}
    fig = F.plot_eta_forest(F.eta_forest_data({}, settings), settings, run_notes("demo"))
    assert any("not estimated" in t.get_text() for ax in fig.axes for t in ax.texts)


def test_fit_figure_rule_draws_both_forest_plots(workdir):
    """The stage's one wildcard rule builds the forest plots from existing fit folders."""
    cfg = _config(hosted=False, datasets=("truthfulqa",))
    _write_fits(workdir, cfg, failed={("truthfulqa", "main")})
    raw = {
        "run": {"kind": "synthetic"},
        "datasets": {"truthfulqa": {"source": "local", "local_path": "data/demo/truthfulqa.jsonl"}},
        "models": {m: {"backend": "synthetic", "model_id": m, "family": "a"} for m in ("g1", "g2", "j1", "j2")},
        "conformity": {"datasets": ["truthfulqa"], "generators": ["g1", "g2"], "judges": ["j1", "j2"],
                       "decomposition": {"enabled": False}, "fit": {"theta_anchor_sensitivity": [1.5]}},
        "amel": {"enabled": False},
        "anchoring": {"enabled": False},
    }
    (workdir / "config.yaml").write_text(yaml.safe_dump(raw))
    targets = [f for name in ("eta_forest", "gamma_forest")
               for f in figure_outputs("conformity", registry("conformity").figure(name))]
    # Only this rule may run: the fit folders above are its sources, as a finished fit leaves them.
    res = run_snakemake(*targets, "--cores", "1", "--snakefile", str(REPO / "Snakefile"), "--directory",
                        str(workdir), "--configfile=" + str(workdir / "config.yaml"), "--allowed-rules",
                        "conformity_fit_figure", env={"OMP_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "conformity_fit_figure" in res.stdout + res.stderr
    for f in targets:
        assert (workdir / f).stat().st_size > 0, f
    eta = pd.read_csv(workdir / "results/figures/conformity/eta_forest.csv")
    assert len(eta) == 8 and set(eta["diagnostics"]) == {"FAILED"}


# ------------------------------------------------------------------ every figure at paper size


def _caveat_text(fig, kind: str = "synthetic"):
    head = run_notes(kind)[0].split(";")[0]
    found = [t for t in fig.texts if head in t.get_text().replace("\n", " ")]
    assert len(found) == 1, [t.get_text() for t in fig.texts]
    return found[0]


def _tick_label_boxes(fig, renderer):
    """The tick labels actually drawn: a locator's ticks outside the view limits keep a
    label that is never drawn."""
    boxes = []
    for ax in fig.axes:
        for axis, (lo, hi) in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            lo, hi = min(lo, hi), max(lo, hi)
            for loc, label in zip(axis.get_majorticklocs(), axis.get_majorticklabels()):
                if lo - 1e-9 <= loc <= hi + 1e-9 and label.get_visible() and label.get_text().strip():
                    boxes.append(label.get_window_extent(renderer))
    return boxes


def _check_paper_figure(fig, name: str, tmp_path: Path, kind: str = "synthetic") -> None:
    """Printed width, no text under the smallest size, the caveat clear of every tick label
    and every panel, and both drawn formats written."""
    from matplotlib.text import Text

    from context_effects import style
    from context_effects.figures import save_figure

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    assert fig.get_figwidth() <= style.FULL_WIDTH + 1e-9, name
    sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    assert sizes and min(sizes) >= style.MIN_FONT_PT, (name, min(sizes))
    note = _caveat_text(fig, kind).get_window_extent(renderer)
    ticks = _tick_label_boxes(fig, renderer)
    assert ticks, name
    for box in ticks:
        assert not note.overlaps(box), (name, note, box)
    for ax in fig.axes:
        assert not note.overlaps(ax.get_window_extent(renderer)), name
    for ext, magic in (("png", b"\x89PNG"), ("pdf", b"%PDF-")):
        path = tmp_path / f"{name}.{ext}"
        save_figure(fig, path)
        assert path.read_bytes()[:len(magic)] == magic, path


def test_forest_plots_at_paper_size_keep_the_caveat_clear_of_tick_labels(tmp_path):
    cfg = _config()
    _write_fits(tmp_path, cfg, failed={("mmlu_pro", "main")})
    for name in ("eta_forest", "gamma_forest"):
        fig, _ = _draw(tmp_path, cfg, name)
        _check_paper_figure(fig, name, tmp_path)


def _ratings_shards(root: Path, datasets=("truthfulqa", "mmlu_pro")) -> list[str]:
    from context_effects.measurement.simulate import simulate_ratings

    paths = []
    for i, d in enumerate(datasets):
        r, _ = simulate_ratings(n_items=6, seed=i)
        anchor = r["condition"].str.startswith("anchor")
        r = r.assign(dataset=d, corpus=np.where(anchor, "anchor", "main"), seed=np.where(anchor, np.nan, 42.0),
                     hosted=False, status="ok", reference=np.where(anchor, "free", None),
                     rating=r["rating"].astype(float))
        path = root / f"results/conformity/ratings/{d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        r.to_parquet(path, index=False)
        paths.append(str(path))
    return paths


def test_rating_distribution_at_paper_size(tmp_path):
    from context_effects.conformity import descriptive as D

    cfg = _config()
    paths = _ratings_shards(tmp_path)
    spec = registry("conformity").figure("rating_distributions")
    fig, dist = spec.draw({"ratings": paths}, spec.settings(cfg))
    assert len(fig.axes) == 2 and [a.get_title() for a in fig.axes] == ["TruthfulQA", "MMLU-Pro"]
    # Top to bottom in display order in every panel (the panels share y).
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels.index("round1") < labels.index("peer_wrong")
    ratings = {d: pd.read_parquet(p) for d, p in zip(cfg["conformity"]["datasets"], paths)}
    fig = D.plot_rating_distribution(D.rating_distribution(ratings, 42), cfg["conformity"]["datasets"],
                                     run_notes("synthetic"))
    _check_paper_figure(fig, "rating_distributions", tmp_path)


def _anchoring_record(name: str, pulls) -> dict:
    est = float(np.mean(pulls))
    return {
        "model": {"name": name, "display_name": name.title()},
        "settings": {"bootstrap": {"confidence_level": 0.95}},
        "scorer": {
            "per_task": [{"pull": float(p), "pull_status": "ok"} for p in pulls]
            + [{"pull": None, "pull_status": "no_reply"}],
            "summary": {"pull": {"mean": {"estimate": est, "ci_low": est - 0.3, "ci_high": est + 0.25}}},
        },
    }


@pytest.mark.parametrize("n_models", [1, 5])
def test_anchoring_pull_figure_at_paper_size(tmp_path, n_models):
    rng = np.random.default_rng(n_models)
    paths = []
    for i in range(n_models):
        path = tmp_path / f"m{i}.json"
        path.write_text(json.dumps(_anchoring_record(f"judge-model-{i}", rng.normal(0.4, 1.0, 20))))
        paths.append(str(path))
    spec = registry("anchoring").figure("pull_distribution")
    fig, data = spec.draw({"results": paths}, {"run_kind": "demo"})
    assert data is None
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == [f"Judge-Model-{i}" for i in range(n_models)]
    _check_paper_figure(fig, f"pull_{n_models}", tmp_path, kind="demo")


@pytest.fixture(scope="module")
def amel_run(tmp_path_factory):
    """A small synthetic AMEL run's tables and item-level data, as the figure jobs read them."""
    from test_amel import amel_config, run_synthetic, select_items, sim_items

    from context_effects.amel.outputs import REGISTRY as AMEL, analysis_table

    root = tmp_path_factory.mktemp("amel")
    cfg = amel_config(history_lengths=[2, 6], position_history_length=8, position_biased_turns=2,
                      framing_history_lengths=[2])
    cfg["run"] = {**cfg["run"], "kind": "synthetic"}
    probs, bs = run_synthetic(root, cfg, select_items(sim_items(24), 12, seed=7))
    data = {"bias_scores": bs, "probabilities": probs}
    tables = {spec.name: analysis_table(spec.name, data[_amel_data(spec.name)], cfg["amel"])
              for spec in AMEL.figures("analysis")}
    return cfg, data, tables


def _amel_data(name: str) -> str:
    from context_effects.amel.outputs import ANALYSES

    return ANALYSES[name].data


def test_every_amel_figure_at_paper_size(amel_run, tmp_path):
    from context_effects.amel.outputs import REGISTRY as AMEL, analysis_figure

    cfg, data, tables = amel_run
    note = " ".join(run_notes("synthetic"))
    names = [spec.name for spec in AMEL.figures("analysis")]
    assert len(names) == 10
    for name in names:
        # Through the CSV round trip, as the figure job reads the table.
        table = tables[name]
        table.to_csv(tmp_path / f"{name}.csv", index=False)
        fig = analysis_figure(name, pd.read_csv(tmp_path / f"{name}.csv"), data[_amel_data(name)], cfg["amel"], note)
        _check_paper_figure(fig, name, tmp_path)


def test_style_theme_sets_paper_sizes():
    import matplotlib as mpl

    from context_effects import style

    fig, ax = style.figure(style.COLUMN_WIDTH, 2.0)
    assert tuple(fig.get_size_inches()) == (style.COLUMN_WIDTH, 2.0)
    assert mpl.rcParams["xtick.labelsize"] == style.MIN_FONT_PT and mpl.rcParams["pdf.fonttype"] == 42
    assert style.width_for(2) == style.COLUMN_WIDTH and style.width_for(12) == style.FULL_WIDTH
    assert len(style.palette(3)) == 3
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_overlap_check_catches_a_caveat_on_the_tick_labels(tmp_path):
    from context_effects import style

    fig, ax = style.figure(style.COLUMN_WIDTH, 2.0)
    ax.set_xticks([0, 1], ["first", "second"])
    fig.canvas.draw()
    box = ax.get_xticklabels()[0].get_window_extent(fig.canvas.get_renderer())
    x, y = fig.transFigure.inverted().transform((box.x0, box.y1))
    fig.text(x, y, run_notes("synthetic")[0], fontsize=style.MIN_FONT_PT, va="top")
    with pytest.raises(AssertionError):
        _check_paper_figure(fig, "overlap", tmp_path)
