"""Dataset layer: real benchmark copies, demo items, sampling, attractors, validation."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parents[1]
try:
    import context_effects  # noqa: F401
except ModuleNotFoundError:  # not installed yet: test the checkout
    sys.path.insert(0, str(REPO / "src"))

from context_effects import datasets as ds  # noqa: E402
from context_effects.datasets import (  # noqa: E402
    ITEM_SCHEMA,
    ItemTableError,
    build_item_table,
    load_raw,
    normalise,
    read_items,
    sample_items,
    validate_items,
    write_items,
)

SHARED = Path(os.environ.get("CONTEXT_EFFECTS_SHARED_DATASETS")
              or Path(__file__).resolve().parents[2] / "shared" / "datasets")
DEMO = REPO / "data" / "demo"

real = pytest.mark.skipif(
    not SHARED.is_dir(),
    reason=f"shared dataset copies not found at {SHARED} (set CONTEXT_EFFECTS_SHARED_DATASETS)",
)


def local(path) -> dict:
    return {"kind": "local", "path": str(path)}


def items_of(dataset: str, path, seed=7) -> pd.DataFrame:
    return normalise(dataset, load_raw(dataset, local(path)), attractor_seed=seed)


# ------------------------------------------------------------------ real copies


@pytest.fixture(scope="module")
def tqa_csv():
    return items_of("truthfulqa", SHARED / "truthfulqa" / "TruthfulQA.csv")


@pytest.fixture(scope="module")
def mmlu():
    return items_of("mmlu_pro", SHARED / "mmlu_pro" / "mmlu_pro_test.jsonl")


@pytest.fixture(scope="module")
def arc_raw():
    return items_of("arc_challenge", SHARED / "arc_challenge" / "ARC-Challenge-Test.jsonl")


@real
def test_truthfulqa_csv_and_jsonl_give_identical_items(tqa_csv):
    jsonl = items_of("truthfulqa", SHARED / "truthfulqa" / "truthfulqa_generation.jsonl")
    assert len(tqa_csv) == len(jsonl) == 817
    pd.testing.assert_frame_equal(tqa_csv, jsonl)
    validate_items(tqa_csv, attractor_seed=7)
    assert tqa_csv["item_id"].iloc[0] == "truthfulqa-0000"
    assert tqa_csv["item_id"].iloc[-1] == "truthfulqa-0816"
    assert tqa_csv["category"].nunique() == 38
    assert (tqa_csv["option_labels"].map(len) == 0).all()
    assert tqa_csv["gold_label"].isna().all()
    # Trailing ';' leaves no empty answers; "Unknown" (listed both ways) stays correct only.
    assert not any("" in a for a in tqa_csv["correct_answers"] + tqa_csv["incorrect_answers"])
    row = tqa_csv.set_index("item_id").loc["truthfulqa-0347"]
    assert "Unknown" in row["correct_answers"] and "Unknown" not in row["incorrect_answers"]


@real
def test_mmlu_pro_test_split(mmlu):
    raw = load_raw("mmlu_pro", local(SHARED / "mmlu_pro" / "mmlu_pro_test.jsonl"))
    assert len(raw) == len(mmlu) == 12032
    validate_items(mmlu, attractor_seed=7)
    counts = mmlu["category"].value_counts()
    assert len(counts) == 14 and counts["math"] == 1351 and counts["history"] == 381
    assert (mmlu["option_labels"].map(len) == mmlu["options"].map(len)).all()
    assert (mmlu["options"].map(len) == 10).sum() == 9981
    # No "N/A" padding in this copy, so letters and gold texts are the source's own.
    assert (mmlu["gold_label"].to_numpy() == raw["answer"].to_numpy()).all()
    gold = [str(o[i]).strip() for o, i in zip(raw["options"], raw["answer_index"])]
    assert mmlu["gold_answer"].tolist() == gold
    assert mmlu["item_id"].iloc[0] == f"mmlu_pro-{raw['question_id'].iloc[0]}"


@real
def test_mmlu_pro_na_padding_dropped():
    path = SHARED / "mmlu_pro" / "mmlu_pro_validation.jsonl"
    raw = load_raw("mmlu_pro", local(path))
    assert sum(o == "N/A" for opts in raw["options"] for o in opts) > 0
    items = normalise("mmlu_pro", raw, attractor_seed=7)
    validate_items(items)
    assert not any("N/A" in o for o in items["options"])
    assert not any("N/A" in a for a in items["incorrect_answers"])
    assert items["gold_answer"].tolist() == [o[i].strip() for o, i in zip(raw["options"], raw["answer_index"])]


def test_mmlu_pro_padding_in_the_middle_reletters():
    # Hub parquet gives numpy arrays; padding anywhere is dropped and letters follow position.
    raw = pd.DataFrame({
        "question_id": [1], "question": ["q?"],
        "options": [np.array(["a", "N/A", "b", "c", "N/A"], dtype=object)],
        "answer": ["C"], "answer_index": [2], "cot_content": [""], "category": ["x"], "src": ["s"],
    })
    items = normalise("mmlu_pro", raw, attractor_seed=0)
    validate_items(items)
    row = items.iloc[0]
    assert row["options"] == ["a", "b", "c"] and row["option_labels"] == ["A", "B", "C"]
    assert row["gold_label"] == "B" and row["gold_answer"] == "b"


@real
def test_arc_raw_and_flat_agree_and_keep_own_labels(arc_raw):
    flat = items_of("arc_challenge", SHARED / "arc_challenge" / "arc_challenge_test_flat.jsonl")
    assert len(arc_raw) == len(flat) == 1172
    pd.testing.assert_frame_equal(arc_raw, flat)
    validate_items(arc_raw, attractor_seed=7)
    numeric = arc_raw[arc_raw["option_labels"].map(lambda labs: labs[0] == "1")]
    assert len(numeric) == 22
    assert all(labs == ["1", "2", "3", "4"][: len(labs)] for labs in numeric["option_labels"])
    assert numeric["gold_label"].isin(["1", "2", "3", "4"]).all()
    n_opts = Counter(arc_raw["options"].map(len))
    assert n_opts == {4: 1165, 3: 4, 5: 3}
    assert arc_raw["category"].isna().all()
    assert arc_raw["item_id"].iloc[0] == "arc_challenge-Mercury_7175875"
    assert arc_raw["gold_answer"].iloc[0] == "Planetary days will become shorter."


@real
def test_every_real_item_keeps_its_gold(tqa_csv, mmlu, arc_raw):
    for items in (tqa_csv, mmlu, arc_raw):
        for r in items.itertuples():
            assert r.gold_answer and r.gold_answer in r.correct_answers
            if r.option_labels:
                assert r.options[r.option_labels.index(r.gold_label)] == r.gold_answer
            assert r.wrong_attractor in r.incorrect_answers
            assert r.wrong_attractor not in r.correct_answers


@real
def test_mmlu_pro_category_balanced_sample(mmlu):
    s = sample_items(mmlu, 500, seed=2024, balance_by="category")
    assert len(s) == 500 and s["item_id"].is_unique
    counts = s["category"].value_counts()
    assert len(counts) == 14 and counts.between(35, 36).all()
    # Ties broken by name: the 10 alphabetically first categories get the extra item.
    assert sorted(counts[counts == 36].index) == sorted(counts.index)[:10]
    assert s["source_index"].is_monotonic_increasing


@real
def test_sampling_reproducible_seed_sensitive_and_order_free(mmlu):
    a = sample_items(mmlu, 500, seed=1, balance_by="category")
    b = sample_items(mmlu, 500, seed=1, balance_by="category")
    c = sample_items(mmlu, 500, seed=2, balance_by="category")
    pd.testing.assert_frame_equal(a, b)
    assert set(a["item_id"]) != set(c["item_id"])
    shuffled = mmlu.sample(frac=1.0, random_state=3)
    pd.testing.assert_frame_equal(a, sample_items(shuffled, 500, seed=1, balance_by="category"))
    plain = sample_items(mmlu, 500, seed=1)
    assert plain["item_id"].tolist() == sample_items(shuffled, 500, seed=1)["item_id"].tolist()


@real
def test_attractor_is_independent_of_sampling(mmlu, tqa_csv):
    for items in (mmlu, tqa_csv):
        a = sample_items(items, len(items) // 2, seed=11).set_index("item_id")
        b = sample_items(items, len(items) // 2, seed=12).set_index("item_id")
        common = a.index.intersection(b.index)
        assert len(common) > 10
        assert (a.loc[common, "wrong_attractor"] == b.loc[common, "wrong_attractor"]).all()
        full = items.set_index("item_id")
        assert (full.loc[a.index, "wrong_attractor"] == a["wrong_attractor"]).all()
    # The seed matters: another attractor seed moves some attractors.
    other = ds.assign_attractors(mmlu, 8)
    assert (other["wrong_attractor"] != mmlu["wrong_attractor"]).mean() > 0.5


def test_attractor_rule_is_the_documented_formula():
    items = items_of("truthfulqa", DEMO / "truthfulqa.jsonl", seed=42)
    for r in items.itertuples():
        h = hashlib.sha256(f"42:{r.item_id}".encode()).digest()[:8]
        assert r.wrong_attractor == r.incorrect_answers[int.from_bytes(h, "big") % len(r.incorrect_answers)]
    mc = items_of("arc_challenge", DEMO / "arc_challenge.jsonl", seed=42)
    for r in mc.itertuples():
        assert r.options[r.option_labels.index(r.attractor_label)] == r.wrong_attractor
        assert r.attractor_label != r.gold_label


@real
def test_real_too_many_items_names_dataset_and_fix(arc_raw):
    with pytest.raises(ValueError, match=r"arc_challenge.*n_items=5000.*1172.*lower n_items"):
        sample_items(arc_raw, 5000, seed=0)
    with pytest.raises(ValueError, match="balance_by to null"):
        sample_items(arc_raw, 10, seed=0, balance_by="category")


@real
def test_unknown_layout_names_columns_and_accepted_layouts():
    with pytest.raises(ValueError, match=r"mc1_targets.*Accepted layouts: truthfulqa_csv"):
        load_raw("truthfulqa", local(SHARED / "truthfulqa" / "mc_task.json"))
    with pytest.raises(ValueError, match=r"looks like truthfulqa:truthfulqa_hf_generation"):
        load_raw("arc_challenge", local(SHARED / "truthfulqa" / "truthfulqa_generation.jsonl"))


# ------------------------------------------------------------------- demo items


@pytest.mark.parametrize("dataset", ds.DATASETS)
def test_demo_items_load_normalise_validate(dataset, tmp_path):
    path = DEMO / f"{dataset}.jsonl"
    balance = "category" if dataset == "mmlu_pro" else None
    items = build_item_table(dataset, local(path), n_items=8, sample_seed=0, attractor_seed=42,
                             balance_by=balance)
    assert len(items) == 8 and list(items.columns) == ITEM_SCHEMA.names
    assert (items["dataset"] == dataset).all()
    out = tmp_path / "items.parquet"
    write_items(items, out)
    back = read_items(out)
    pd.testing.assert_frame_equal(back, items)
    meta = pq.read_schema(out).metadata
    assert json.loads(meta[b"context_effects.attractor_seed"]) == 42
    assert json.loads(meta[b"context_effects.sample_seed"]) == 0
    assert back.attrs["source"]["path"] == str(path)
    assert back.attrs["source"]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()


def test_demo_shapes_match_the_real_quirks():
    arc = items_of("arc_challenge", DEMO / "arc_challenge.jsonl")
    assert ["1", "2", "3", "4"] in arc["option_labels"].tolist()
    assert {3, 5} <= set(arc["options"].map(len))
    mmlu = items_of("mmlu_pro", DEMO / "mmlu_pro.jsonl")
    assert mmlu["category"].nunique() >= 3
    assert sample_items(mmlu, 5, seed=0, balance_by="category")["category"].nunique() == 5


def test_parquet_source_with_numpy_lists_matches_jsonl(tmp_path):
    # The hub's to_pandas() and local parquet copies hold numpy arrays and structs.
    raw = [json.loads(line) for line in (DEMO / "arc_challenge.jsonl").read_text().splitlines()]
    path = tmp_path / "arc.parquet"
    pq.write_table(pa.Table.from_pylist(raw), path)
    a = items_of("arc_challenge", path)
    b = items_of("arc_challenge", DEMO / "arc_challenge.jsonl")
    pd.testing.assert_frame_equal(a, b)


def test_allocation_gives_small_category_surplus_to_others():
    assert ds._allocate({"a": 2, "b": 10, "c": 10}, 12) == {"a": 2, "b": 5, "c": 5}
    assert ds._allocate({"a": 2, "b": 10, "c": 10}, 13) == {"a": 2, "b": 6, "c": 5}
    assert ds._allocate({"x": 3, "y": 3}, 6) == {"x": 3, "y": 3}


def test_items_without_incorrect_answers_are_dropped(caplog):
    raw = pd.DataFrame({
        "type": ["t", "t"], "category": ["c", "c"], "question": ["q1?", "q2?"],
        "best_answer": ["yes", "no"], "correct_answers": [["yes"], ["no"]],
        "incorrect_answers": [["no"], ["no", ""]],  # item 2: its only wrong answer is correct
        "source": ["", ""],
    })
    with caplog.at_level("WARNING"):
        items = normalise("truthfulqa", raw, attractor_seed=1)
    assert items["item_id"].tolist() == ["truthfulqa-0000"]
    assert "dropped 1 items" in caplog.text and "truthfulqa-0001" in caplog.text


# ------------------------------------------------------------------- validation


@pytest.fixture
def demo_items():
    return items_of("arc_challenge", DEMO / "arc_challenge.jsonl")


def test_validation_gold_missing_from_correct_answers(demo_items):
    bad = demo_items.copy()
    bad.at[1, "correct_answers"] = ["something else"]
    with pytest.raises(ItemTableError, match=r"gold_answer not in correct_answers.*CEDemo_002"):
        validate_items(bad)


def test_validation_duplicate_ids(demo_items):
    bad = pd.concat([demo_items, demo_items.iloc[[0]]], ignore_index=True)
    with pytest.raises(ItemTableError, match=r"duplicate item_id \[arc_challenge-CEDemo_001\]"):
        validate_items(bad)


def test_validation_mc_gold_and_attractor(demo_items):
    bad = demo_items.copy()
    bad.at[2, "gold_label"] = "1"  # CEDemo_003 has labels 1-4: now keys a wrong option
    bad.at[3, "wrong_attractor"] = bad.at[3, "gold_answer"]
    with pytest.raises(ItemTableError) as err:
        validate_items(bad)
    msg = str(err.value)
    assert "options[gold_label] != gold_answer" in msg and "CEDemo_003" in msg
    assert "wrong_attractor is also a correct answer" in msg and "CEDemo_004" in msg
    with pytest.raises(ItemTableError, match="seeded rule"):
        validate_items(demo_items, attractor_seed=999)


def test_validation_schema_errors(demo_items, tmp_path):
    with pytest.raises(ItemTableError, match=r"missing \['category'\].*normalise"):
        validate_items(demo_items.drop(columns="category"))
    bad = demo_items.copy()
    bad["source_index"] = bad["source_index"].astype(float)
    with pytest.raises(ItemTableError, match="source_index"):
        validate_items(bad)
    bad = demo_items.copy()
    bad["options"] = [[1, 2]] * len(bad)
    with pytest.raises(ItemTableError, match="column options"):
        validate_items(bad)
    with pytest.raises(ItemTableError, match="wrong_attractor"):
        write_items(normalise("arc_challenge", load_raw("arc_challenge",
                    local(DEMO / "arc_challenge.jsonl"))), tmp_path / "x.parquet")


def test_sample_too_large_message():
    items = items_of("truthfulqa", DEMO / "truthfulqa.jsonl")
    with pytest.raises(ValueError, match=r"truthfulqa: asked for n_items=500 but only 8 .*lower n_items"):
        sample_items(items, 500, seed=0)


# --------------------------------------------------------------------- hub path


def test_hub_source_calls_load_dataset(monkeypatch):
    import datasets as hf_datasets

    calls = []
    raw = pd.read_json(DEMO / "truthfulqa.jsonl", lines=True)

    class FakeDataset:
        def to_pandas(self):
            return raw

    def fake_load_dataset(*args, **kwargs):
        calls.append((args, kwargs))
        return FakeDataset()

    monkeypatch.setattr(hf_datasets, "load_dataset", fake_load_dataset)
    source = {"kind": "hub", "id": "truthfulqa/truthful_qa", "config": "generation",
              "split": "validation", "revision": "abc123"}
    got = load_raw("truthfulqa", source)
    assert calls == [(("truthfulqa/truthful_qa", "generation"),
                      {"split": "validation", "revision": "abc123"})]
    assert len(got) == 8
    with pytest.raises(ValueError, match="kind must be"):
        load_raw("truthfulqa", {"kind": "ftp", "path": "x"})


# ------------------------------------------------------------- damaged sources
#
# Every source is checked whole before sampling, so a damaged row fails the build
# whichever rows the sample would take, and every error names the file, the line
# (JSON lines, CSV) or row (Parquet) and the field. Damaged copies are built here
# from the demo files, in every layout the loaders recognise.

import csv  # noqa: E402
import re  # noqa: E402


def _demo_records(dataset: str) -> list[dict]:
    return [json.loads(line) for line in (DEMO / f"{dataset}.jsonl").read_text().splitlines()]


def _nested_arc(rec: dict) -> dict:
    choices = [{"text": t, "label": lab} for t, lab in zip(rec["choices"]["text"], rec["choices"]["label"])]
    return {"id": rec["id"], "question": {"stem": rec["question"], "choices": choices}, "answerKey": rec["answerKey"]}


# layout -> (dataset, file suffix, the demo records in that layout)
LAYOUT_SOURCES = {
    "truthfulqa_hf_generation": ("truthfulqa", ".jsonl", lambda: _demo_records("truthfulqa")),
    "truthfulqa_csv": ("truthfulqa", ".csv", lambda: [
        {"Type": r["type"], "Category": r["category"], "Question": r["question"], "Best Answer": r["best_answer"],
         "Correct Answers": "; ".join(r["correct_answers"]), "Incorrect Answers": "; ".join(r["incorrect_answers"]),
         "Source": r["source"]} for r in _demo_records("truthfulqa")]),
    "truthfulqa_parquet": ("truthfulqa", ".parquet", lambda: _demo_records("truthfulqa")),
    "mmlu_pro_hf": ("mmlu_pro", ".jsonl", lambda: _demo_records("mmlu_pro")),
    "mmlu_pro_parquet": ("mmlu_pro", ".parquet", lambda: _demo_records("mmlu_pro")),
    "arc_hf_flat": ("arc_challenge", ".jsonl", lambda: _demo_records("arc_challenge")),
    "arc_raw_nested": ("arc_challenge", ".jsonl", lambda: [_nested_arc(r) for r in _demo_records("arc_challenge")]),
    "arc_flat_parquet": ("arc_challenge", ".parquet", lambda: _demo_records("arc_challenge")),
    "arc_json_list": ("arc_challenge", ".json", lambda: _demo_records("arc_challenge")),
}

# The id field (or, for TruthfulQA, whose ids are positional, the question) of each layout.
ID_FIELD = {"truthfulqa": "question", "mmlu_pro": "question_id", "arc_challenge": "id"}


def _write_source(path: Path, records: list[dict]) -> Path:
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    elif path.suffix == ".json":
        path.write_text(json.dumps(records, indent=1))
    elif path.suffix == ".csv":
        with open(path, "w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(records[0]))
            writer.writeheader()
            writer.writerows(records)
    else:
        pq.write_table(pa.Table.from_pylist(records), path)
    return path


def _where(path: Path, index: int) -> str:
    """How an error names record ``index`` (0-based) of a source file."""
    if path.suffix == ".jsonl":
        return f"{path}:{index + 1}"
    if path.suffix == ".csv":
        return f"{path}:{index + 2}"  # the header is line 1
    if path.suffix == ".json":
        return f"{path}, record {index + 1}"
    return f"{path}, row {index + 1}"


def _short(path: Path, index: int) -> str:
    """The same place named within its file: "line 3", "row 3", "record 3"."""
    where = _where(path, index).removeprefix(str(path))
    return f"line {where[1:]}" if where.startswith(":") else where.removeprefix(", ")


def _field(layout: str, name: str) -> str:
    return {"Question": "Question", "question": "Question"}.get(name, name) if layout == "truthfulqa_csv" else name


def _build(dataset: str, path: Path, n_items: int = 1, seed: int = 0):
    return build_item_table(dataset, local(path), n_items=n_items, sample_seed=seed, attractor_seed=42)


@pytest.fixture(params=sorted(LAYOUT_SOURCES))
def layout(request):
    return request.param


def test_every_layout_source_builds_intact(layout, tmp_path):
    dataset, suffix, records = LAYOUT_SOURCES[layout]
    path = _write_source(tmp_path / f"src{suffix}", records())
    assert len(_build(dataset, path, n_items=8)) == 8


def test_duplicate_id_fails_even_when_the_sample_takes_one_copy(layout, tmp_path):
    """A second row with the id of row 2 but another answer: before, sampling one copy passed
    and the item could carry the other row's gold answer (TruthfulQA: a repeated row)."""
    dataset, suffix, make = LAYOUT_SOURCES[layout]
    records = make()
    copy_of = dict(records[1])
    if dataset == "mmlu_pro":
        copy_of["answer_index"], copy_of["answer"] = 0, "A"
    elif dataset == "arc_challenge":
        copy_of["answerKey"] = "A"
    records.append(copy_of)
    path = _write_source(tmp_path / f"src{suffix}", records)
    field = _field(layout, ID_FIELD[dataset])
    for seed in range(4):  # whichever copy (or neither) the sample takes
        with pytest.raises(ValueError) as err:
            _build(dataset, path, n_items=1, seed=seed)
        msg = str(err.value)
        assert f"{_where(path, 8)}: duplicate `{field}` (first at {_short(path, 1)})" in msg, msg
        assert "delete" in msg


@pytest.mark.parametrize("field_of", [
    {"truthfulqa": "incorrect_answers", "mmlu_pro": "options", "arc_challenge": "answerKey"},
    {"truthfulqa": "best_answer", "mmlu_pro": "answer_index", "arc_challenge": "question"},
])
def test_missing_required_field_is_an_error_not_a_dropped_item(layout, field_of, tmp_path):
    dataset, suffix, make = LAYOUT_SOURCES[layout]
    records = make()
    name = field_of[dataset]
    csv_names = {"incorrect_answers": "Incorrect Answers", "best_answer": "Best Answer"}
    key = csv_names[name] if layout == "truthfulqa_csv" else name
    if layout == "arc_raw_nested" and name == "question":
        records[3]["question"]["stem"], key = "  ", "question.stem"
    elif suffix == ".csv":
        records[3][key] = ""
    elif suffix == ".parquet":
        records[3][key] = None
    else:
        del records[3][key]
    path = _write_source(tmp_path / f"src{suffix}", records)
    with pytest.raises(ValueError) as err:
        _build(dataset, path, n_items=8)
    msg = str(err.value)
    assert f"{_where(path, 3)}: field `{key}` is missing or empty" in msg, msg


def test_missing_id_names_file_line_and_field(tmp_path):
    for dataset, field in (("mmlu_pro", "question_id"), ("arc_challenge", "id")):
        records = _demo_records(dataset)
        del records[5][field]
        path = _write_source(tmp_path / f"{dataset}.jsonl", records)
        with pytest.raises(ValueError, match=re.escape(f"{path}:6: field `{field}` is missing or empty")):
            _build(dataset, path)
        records[5][field] = "   " if dataset == "arc_challenge" else "x7"
        path = _write_source(tmp_path / f"{dataset}.jsonl", records)
        expected = "is missing or empty" if dataset == "arc_challenge" else "must be an integer"
        with pytest.raises(ValueError, match=re.escape(f"{path}:6: field `{field}` ") + ".*" + expected):
            _build(dataset, path)


@pytest.mark.parametrize("layout_name", ["truthfulqa_hf_generation", "truthfulqa_csv", "mmlu_pro_hf",
                                         "arc_hf_flat", "arc_raw_nested", "arc_json_list"])
def test_non_utf8_byte_names_file_line_and_field(layout_name, tmp_path):
    dataset, suffix, make = LAYOUT_SOURCES[layout_name]
    path = _write_source(tmp_path / f"src{suffix}", make())
    data = path.read_bytes()
    target = {"truthfulqa": b"octopus", "mmlu_pro": b"multiplied", "arc_challenge": b"own light"}[dataset]
    at = data.index(target)
    path.write_bytes(data[:at] + b"\xe9" + data[at + 1:])  # latin-1 'e' acute in place of one letter
    line = data[:at].count(b"\n") + 1
    with pytest.raises(ValueError) as err:
        _build(dataset, path)
    msg = str(err.value)
    assert f"{path}:{line}:" in msg and "byte 0xe9 is not valid UTF-8" in msg, msg
    question = {"truthfulqa_csv": "Question", "arc_raw_nested": "question.stem"}.get(layout_name, "question")
    if suffix != ".json":
        assert f"field `{question}`" in msg, msg
    assert "save the file as UTF-8" in msg


def test_truthfulqa_duplicate_question_is_an_error_naming_both_rows(tmp_path):
    records = LAYOUT_SOURCES["truthfulqa_csv"][2]()
    records.insert(5, dict(records[2]))
    path = _write_source(tmp_path / "TruthfulQA.csv", records)
    with pytest.raises(ValueError) as err:
        normalise("truthfulqa", load_raw("truthfulqa", local(path)), attractor_seed=1)
    msg = str(err.value)
    assert f"{path}:7: duplicate `Question` (first at line 4)" in msg, msg
    assert "ids are positional" in msg


def test_every_problem_of_the_source_is_listed(tmp_path):
    records = _demo_records("mmlu_pro")
    records[1]["answer_index"] = 42
    del records[4]["question"]
    records.append(dict(records[0]))
    path = _write_source(tmp_path / "mmlu.jsonl", records)
    with pytest.raises(ValueError) as err:
        _build("mmlu_pro", path)
    msg = str(err.value)
    assert "3 problem(s)" in msg, msg
    assert f"{path}:2: field `answer_index` = 42" in msg
    assert f"{path}:5: field `question` is missing or empty" in msg
    assert f"{path}:9: duplicate `question_id`" in msg


@real
def test_damaged_real_copies_name_file_line_and_field(tmp_path):
    """The real files' own layouts, first rows only: a repeated row and a blanked field."""
    tqa = (SHARED / "truthfulqa" / "TruthfulQA.csv").read_text(encoding="utf-8-sig").splitlines(keepends=True)
    path = tmp_path / "TruthfulQA.csv"
    path.write_text("".join(tqa[:30] + [tqa[10]]))
    with pytest.raises(ValueError, match=re.escape(f"{path}:31: duplicate `Question` (first at line 11)")):
        _build("truthfulqa", path)
    for rel, field in (("mmlu_pro/mmlu_pro_test.jsonl", "question_id"),
                       ("arc_challenge/ARC-Challenge-Test.jsonl", "id"),
                       ("arc_challenge/arc_challenge_test_flat.jsonl", "id"),
                       ("truthfulqa/truthfulqa_generation.jsonl", "incorrect_answers")):
        lines = (SHARED / rel).read_text(encoding="utf-8").splitlines(keepends=True)[:30]
        rec = json.loads(lines[20])
        del rec[field]
        lines[20] = json.dumps(rec) + "\n"
        path = tmp_path / Path(rel).name
        path.write_text("".join(lines))
        with pytest.raises(ValueError, match=re.escape(f"{path}:21: field `{field}` is missing or empty")):
            _build(rel.split("/")[0], path)
