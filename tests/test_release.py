"""Items and peer blocks from the predecessor release (conformity.release; seed 002 §2.2, App. A.8).

Tests marked ``shared`` read the release and benchmark copies beside the checkout
(``../shared/datasets``) and are skipped where that folder is absent; the others use the
release rows shipped for the demo (data/demo/release/).
"""

from __future__ import annotations

import copy
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from conftest import REPO
from context_effects import pinned
from context_effects.config import ConfigError, load_config, validate_config
from context_effects.conformity import peers, release
from context_effects.conformity import requests as creq
from context_effects.datasets import build_item_table, read_items, write_items
from context_effects.report import peer_source_section

SHARED = REPO.parents[0] / "shared" / "datasets"
RELEASE = SHARED / "predecessor-release"
DEMO = REPO / "data" / "demo" / "release"
shared = pytest.mark.skipif(not RELEASE.is_dir(), reason="no shared release copy beside the checkout")

MODEL_CFG = {"backend": "synthetic", "model_id": "m", "synthetic": {"empty_rate": 0.0}}
GEN = {"temperature": 0.0, "top_p": 1.0, "max_tokens": 300}
LINE = re.compile(r"^(?P<name>[^:()]+?)(?: \((?P<role>[^()]+)\))?: (?P<phrase>.*?)(?P<letter>[A-Z]|[0-9]+)\.$")

SOURCES = {  # dataset -> (benchmark split the release sampled, release file)
    "truthfulqa": ("truthfulqa/truthfulqa_generation.jsonl", "truthfulqa_sample500.rq1_rq3.jsonl"),
    "arc_challenge": ("arc_challenge/ARC-Challenge-Train.jsonl", "arc_challenge_sample500.rq1_rq3.jsonl"),
    "mmlu_pro": ("mmlu_pro/mmlu_pro_test.jsonl", "mmlu_pro_sample500.rq2a.jsonl"),
}
DEMO_SOURCES = {
    "truthfulqa": (DEMO / "truthfulqa_generation.demo.jsonl", DEMO / "truthfulqa_sample500.rq1_rq3.demo.jsonl"),
    "arc_challenge": (DEMO / "ARC-Challenge-Train.demo.jsonl", DEMO / "arc_challenge_sample500.rq1_rq3.demo.jsonl"),
}


def _build(raw: Path, rel: Path, dataset: str, peer_source: str = "release"):
    return build_item_table(dataset, {"kind": "local", "path": str(raw)}, n_items=500, sample_seed=42,
                            attractor_seed=42, sample={"source": "release", "path": str(rel)},
                            peer_source=peer_source)


@pytest.fixture(scope="module")
def shared_items():
    return {d: _build(SHARED / raw, RELEASE / rel, d) for d, (raw, rel) in SOURCES.items()} if RELEASE.is_dir() else {}


@pytest.fixture(scope="module")
def demo_items():
    return {d: _build(raw, rel, d) for d, (raw, rel) in DEMO_SOURCES.items()}


def _norm(text: str) -> str:
    return " ".join(text.split())


def _expected_block(row: dict, gold: str, wrong: str) -> str:
    """The release's block with each option letter cut out and the text put in its place,
    rebuilt independently from one release row: the lines, blank lines and final periods stay."""
    key = row["answer"]["label"].strip("()")
    lines = []
    for line in row["perturbed_prompt"].split("\n\n"):
        m = LINE.match(line)
        text = gold if m["letter"] == key else wrong
        lines.append(line[: m.start("letter")] + text + line[m.end("letter"):][: 0 if text.endswith(".") else 1])
    return "\n\n".join(lines)


def _arc_key(row: dict) -> str:
    """The ARC id of a release row or an item-table row."""
    return str(row.get("original_instance_ID") or row["item_id"].removeprefix("arc_challenge-"))


def _check_blocks(items, rows, match_key):
    """Every released condition of every item renders as the release's speakers with texts."""
    by_item = {}
    for r in rows:
        by_item.setdefault(match_key(r), {})[r["condition_id"]] = r
    blocks = items.attrs["release_blocks"]
    for item in items.to_dict("records"):
        conds = by_item[match_key(item)]
        assert len(conds) == 6
        for cid, (pol, auth) in release.CONDITIONS.items():
            row = conds[cid]
            block = peers.peer_block(item, pol, auth, 42, release=blocks[item["item_id"]])
            assert block.text == _expected_block(row, item["gold_answer"], item["wrong_attractor"])
            assert sum(t == item["gold_answer"] for t in block.endorsed) == row["correct_peer_count"]
            assert set(block.endorsed) <= {item["gold_answer"], item["wrong_attractor"]}
            roles = [block.text[a:b] for a, b in block.role_spans]
            want = re.findall(r"^[^:(]+ (\([^()]+\)):", row["perturbed_prompt"], flags=re.M)
            assert roles == [" " + w for w in want] and len(roles) == row["n_authority"]


# ------------------------------------------------------------------- items (shared)


@shared
@pytest.mark.parametrize("dataset", sorted(SOURCES))
def test_release_items_match_the_release_row_for_row(shared_items, dataset):
    items = shared_items[dataset]
    rows = release.read_release(RELEASE / SOURCES[dataset][1])
    released = release.release_items(rows)
    assert len(items) == len(released) == 500
    assert items.attrs["sample"]["source"] == "release"
    assert items.attrs["sample"]["commit"] == release.RELEASE_COMMIT
    assert items.attrs["sample"]["sha256"] == release.RELEASE_FILES[SOURCES[dataset][1]]["sha256"]
    by_q = {_norm(q): r for q, r in zip(items.question, items.to_dict("records"))}
    by_id = {r["item_id"]: r for r in items.to_dict("records")}
    for rel in released:
        if dataset == "truthfulqa":
            item = by_q[_norm(rel["question"])]
            # The open-ended gold is the generation split's best answer, not the MC sentence.
            assert item["gold_answer"] in item["correct_answers"]
        else:
            # By id: ARC repeats some question texts under other ids.
            item = by_id[f"{dataset}-{rel['original_instance_ID']}"]
            assert _norm(item["question"]) == _norm(rel["question"])
            assert _norm(item["gold_answer"]) == _norm(rel["answer"]["text"])
        assert item["wrong_attractor"] in item["incorrect_answers"]


@shared
def test_truthfulqa_release_rows_count_the_multiple_choice_split():
    # Why TruthfulQA is matched by question text: the two splits order rows differently.
    gen = [json.loads(line) for line in (SHARED / "truthfulqa/truthfulqa_generation.jsonl").open()]
    mc = json.loads((SHARED / "truthfulqa/mc_task.json").read_text())
    rows = release.release_items(release.read_release(RELEASE / SOURCES["truthfulqa"][1]))
    assert all(_norm(mc[r["source_row_index"]]["question"]) == _norm(r["question"]) for r in rows)
    assert sum(_norm(gen[r["source_row_index"]]["question"]) == _norm(r["question"]) for r in rows) < 5


@shared
def test_shared_release_checksums_are_the_pinned_ones():
    for name, spec in release.RELEASE_FILES.items():
        assert pinned.sha256_of(RELEASE / name) == spec["sha256"]


@shared
def test_released_blocks_keep_speakers_phrases_and_roles(shared_items):
    tqa_rows = release.read_release(RELEASE / SOURCES["truthfulqa"][1])
    _check_blocks(shared_items["truthfulqa"], tqa_rows, lambda r: _norm(r["question"]))
    arc_rows = release.read_release(RELEASE / SOURCES["arc_challenge"][1])
    _check_blocks(shared_items["arc_challenge"], arc_rows, _arc_key)


@shared
def test_wrong_letters_drawn_per_condition_map_to_one_attractor(shared_items):
    items = shared_items["arc_challenge"]
    for item in items.to_dict("records"):
        blocks = items.attrs["release_blocks"][item["item_id"]]
        wrong = {t for auth in ("present", "absent") for pol in ("wrong", "mixed")
                 for t in peers.peer_block(item, pol, auth, 42, release=blocks).endorsed} - {item["gold_answer"]}
        assert wrong == {item["wrong_attractor"]}


def _block_stats(blocks) -> dict:
    """The statistics of a dataset's blocks (item -> condition -> speakers) that the release's
    design fixes: speakers and authority roles per block, names, roles and phrases used, the
    gold count per consensus structure, the authority's side in mixed blocks."""
    out = {"speakers": set(), "roles_per_block": set(), "gold": set(), "names": Counter(), "roles": Counter(),
           "phrases": Counter(), "authority_phrases": Counter(), "mixed_authority_gold": 0, "mixed_present": 0,
           "same_speakers_absent_present": 0}
    for conds in blocks.values():
        for cond, sps in conds.items():
            polarity, authority = cond.split("|")
            out["speakers"].add(len(sps))
            out["roles_per_block"].add((authority, sum(sp["role"] is not None for sp in sps)))
            out["gold"].add((polarity, sum(sp["gold"] for sp in sps)))
            for sp in sps:
                out["names"][sp["name"]] += 1
                out["phrases" if not sp["role"] else "authority_phrases"][sp["phrase"]] += 1
                if sp["role"]:
                    out["roles"][sp["role"]] += 1
                    if cond == "mixed|present":
                        out["mixed_present"] += 1
                        out["mixed_authority_gold"] += sp["gold"]
        for pol in ("correct", "wrong", "mixed"):
            out["same_speakers_absent_present"] += ([sp["name"] for sp in conds[f"{pol}|absent"]]
                                                    == [sp["name"] for sp in conds[f"{pol}|present"]])
    return out


@shared
def test_mmlu_pro_blocks_are_built_with_the_released_design(shared_items):
    """MMLU-Pro has no released rq1_rq3 blocks: its six conditions are built with the design of
    the TruthfulQA and ARC blocks (same names, roles and phrases, one authority speaker, the same
    consensus structures), and its mixed/absent block is the rq2a file's commit6 block of the item."""
    items = shared_items["mmlu_pro"]
    assert items.attrs["peer_source"]["used"] == "release design"
    assert "rq2a_commit6 blocks (500 items)" in items.attrs["peer_source"]["why"]
    got = _block_stats(items.attrs["release_blocks"])
    for ds in ("truthfulqa", "arc_challenge"):
        want = _block_stats(shared_items[ds].attrs["release_blocks"])
        for key in ("speakers", "roles_per_block", "gold"):
            assert got[key] == want[key], key
        for key in ("names", "roles", "phrases", "authority_phrases"):
            assert set(got[key]) == set(want[key]), key
        assert got["same_speakers_absent_present"] == want["same_speakers_absent_present"] == 0
    # Frequencies: names, roles and phrases within binomial noise of uniform, like the release's.
    for key, k in (("names", 24), ("roles", 8), ("phrases", 10), ("authority_phrases", 6)):
        counts = got[key]
        n = sum(counts.values())
        assert len(counts) == k and all(abs(c - n / k) < 5 * (n / k) ** 0.5 for c in counts.values()), (key, counts)
    # The authority of a mixed block is on the gold side about 1/4 of the time (release: 129 and 116 of 500).
    assert got["mixed_present"] == 500 and 80 <= got["mixed_authority_gold"] <= 170
    rows = release.read_release(RELEASE / SOURCES["mmlu_pro"][1])
    row = next(r for r in rows if r["condition_id"] == "rq2a_commit6")
    iid = f"mmlu_pro-{row['original_instance_ID']}"
    block = items.attrs["release_blocks"][iid]["mixed|absent"]
    assert [f"{sp['name']}: {sp['phrase']}" for sp in block] == [
        line.rsplit(" ", 1)[0] + " " for line in row["perturbed_prompt"].split("\n\n")]
    # The requests render them as released blocks are rendered: "Name (role): phrase" + the text.
    reqs = creq.round2_requests(items.iloc[:2], {i: "x" for i in items.item_id[:2]}, "m", MODEL_CFG, GEN, 42)
    item = items.iloc[0].to_dict()
    want = peers.peer_block(item, "correct", "present", 42, release=items.attrs["release_blocks"][item["item_id"]])
    assert want.text in reqs[1].messages[-1][1] and len(want.role_spans) == 1


@shared
def test_arc_release_is_not_in_the_test_split():
    # The release sampled ARC-Challenge train; loading test must fail naming items and the fix.
    with pytest.raises(release.ReleaseMatchError, match=r"(?s)500 of 500 items.*train split.*Mercury_7145495"):
        _build(SHARED / "arc_challenge/ARC-Challenge-Test.jsonl", RELEASE / SOURCES["arc_challenge"][1],
               "arc_challenge")


# ------------------------------------------------------------ shipped demo rows


def test_demo_release_items_and_numeric_labels(demo_items):
    arc = demo_items["arc_challenge"]
    assert len(arc) == 4 and len(demo_items["truthfulqa"]) == 4
    rows = release.read_release(DEMO_SOURCES["arc_challenge"][1])
    _check_blocks(arc, rows, _arc_key)
    numeric = arc[arc.item_id == "arc_challenge-NYSEDREGENTS_2007_8_6"].iloc[0].to_dict()
    assert list(numeric["option_labels"]) == ["1", "2", "3", "4"]
    block = peers.peer_block(numeric, "correct", "present", 42,
                             release=arc.attrs["release_blocks"][numeric["item_id"]])
    assert block.endorsed == (numeric["gold_answer"],) * 6 and not re.search(r" [0-9]\.(;|$)", block.text)
    _check_blocks(demo_items["truthfulqa"], release.read_release(DEMO_SOURCES["truthfulqa"][1]),
                  lambda r: _norm(r["question"]))


def test_release_metadata_survives_the_item_table(demo_items, tmp_path):
    items = demo_items["truthfulqa"]
    write_items(items, tmp_path / "results/items/truthfulqa.parquet")
    back = read_items(tmp_path / "results/items/truthfulqa.parquet")
    assert back.attrs["release_blocks"] == items.attrs["release_blocks"]
    assert back.attrs["peer_source"]["used"] == "release" and back.attrs["panel_seed"] == 42
    section = "\n".join(peer_source_section({"conformity": {"datasets": ["truthfulqa", "mmlu_pro"],
                                                            "peers": {"source": "release"}}}, tmp_path))
    assert "| truthfulqa | release (4 items" in section and "| release |" in section


def test_unmatched_item_names_the_item_and_the_fix(tmp_path):
    lines = DEMO_SOURCES["truthfulqa"][1].read_text().splitlines()
    bad = [json.loads(line) for line in lines]
    for row in bad:
        if row["original_instance_ID"] == 372:
            row["question"] = "What colour is a question no split holds?"
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in bad) + "\n")
    with pytest.raises(release.ReleaseMatchError) as exc:
        _build(DEMO_SOURCES["truthfulqa"][0], path, "truthfulqa")
    msg = str(exc.value)
    assert "release item 372" in msg and "1 of 4 items" in msg and "load the split and revision" in msg
    arc = [json.loads(line) for line in DEMO_SOURCES["arc_challenge"][1].read_text().splitlines()]
    for row in arc:
        if row["original_instance_ID"] == "TAKS_2009_8_19":
            row["answer"] = {"label": "(A)", "text": "a text the key does not give"}
    path.write_text("\n".join(json.dumps(r) for r in arc) + "\n")
    with pytest.raises(release.ReleaseMatchError, match=r"TAKS_2009_8_19.*answer key differs"):
        _build(DEMO_SOURCES["arc_challenge"][0], path, "arc_challenge")


def test_a_second_copy_of_a_released_block_is_refused(tmp_path):
    """A user's release file (not a pinned name) with an item's block given twice: the
    peer blocks would keep the appended copy and the item list the first, silently. It is
    refused naming the file, both lines and the differing field; an identical second copy
    is refused too, as a duplicate id of an item source is (context_effects.datasets)."""
    raw, pinned_rel = DEMO_SOURCES["truthfulqa"]
    lines = pinned_rel.read_text().splitlines()
    row = json.loads(lines[0])
    assert row["perturbed_prompt"].startswith("Jeff: ")
    row["perturbed_prompt"] = row["perturbed_prompt"].replace("Jeff: ", "Maria: ", 1)  # another speaker
    path = tmp_path / "my_release.jsonl"
    path.write_text("\n".join([*lines, json.dumps(row)]) + "\n")
    with pytest.raises(release.ReleaseError) as exc:
        _build(raw, path, "truthfulqa")
    msg = str(exc.value)
    assert f"{path}:{len(lines) + 1}:" in msg and "already given at line 1" in msg, msg
    assert f"item 315 condition {row['condition_id']}" in msg and "differ in ['perturbed_prompt']" in msg, msg
    assert "delete one of the two rows" in msg
    path.write_text("\n".join([*lines, lines[0]]) + "\n")
    with pytest.raises(release.ReleaseError, match=rf"my_release.jsonl:{len(lines) + 1}: .* line 1; the two rows are "
                                                   "identical.*delete one of the two rows"):
        release.read_release(path)
    # Rows of one item under other conditions are the format, not duplicates.
    path.write_text("\n".join(lines) + "\n")
    assert len(_build(raw, path, "truthfulqa")) == 4


def test_release_attractor_is_the_first_released_wrong_option(tmp_path):
    """Constructed: the release lists the options in another order than the benchmark. The
    attractor is the first non-keyed release option that the item lists as incorrect
    (passing over "Unknown.", which the generation split counts as correct, and ignoring the
    multiple-choice sentence's final period): W2. Source order would give W0, the seeded
    hash W1, the release's all-wrong blocks (letter D) W0."""
    from context_effects.datasets import ATTRACTOR_RULE, RELEASE_ATTRACTOR_RULE, attractor_index, validate_items

    raw = tmp_path / "tqa.jsonl"
    raw.write_text(json.dumps({"type": "Adversarial", "category": "Misc", "question": "Which one?",
                               "best_answer": "Right", "correct_answers": ["Right", "Unknown"],
                               "incorrect_answers": ["W0", "W1", "W2", "W3"], "source": "x"}) + "\n")
    options = [{"label": f"({k})", "text": t} for k, t in zip("ABCD", ("Unknown.", "W2.", "Right.", "W0."))]
    rows = [{"original_instance_ID": 0, "source_row_index": 0, "question": "Which one?", "options": options,
             "answer": {"label": "(C)", "text": "Right."}, "dataset_name": "truthfulqa", "condition_id": cid,
             "perturbed_prompt": "\n\n".join(f"N{i}: My guess is D." for i in range(6))}
            for cid in ("unanimous_wrong_absent", "unanimous_wrong_present")]
    rel = tmp_path / "rel.jsonl"
    rel.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    items = build_item_table("truthfulqa", {"kind": "local", "path": str(raw)}, n_items=1, sample_seed=42,
                             attractor_seed=42, sample={"source": "release", "path": str(rel)},
                             peer_source="generated")
    item = items.iloc[0]
    assert item["wrong_attractor"] == "W2"
    assert item["incorrect_answers"][0] == "W0" and item["incorrect_answers"][attractor_index(item["item_id"], 4, 42)] == "W1"
    assert items.attrs["attractor_rule"] == RELEASE_ATTRACTOR_RULE and items.attrs["attractor_seed"] is None
    # The written table names its rule, and reading it back checks that rule, not the hash.
    write_items(items, tmp_path / "items.parquet")
    back = read_items(tmp_path / "items.parquet")
    assert back.attrs["attractor_rule"] == RELEASE_ATTRACTOR_RULE and back["wrong_attractor"].tolist() == ["W2"]
    with pytest.raises(ValueError, match="seeded rule"):
        validate_items(back, attractor_seed=42)
    # A seeded sample keeps the hash rule.
    seeded = build_item_table("truthfulqa", {"kind": "local", "path": str(raw)}, n_items=1, sample_seed=42,
                              attractor_seed=42)
    assert seeded.iloc[0]["wrong_attractor"] == "W1" and seeded.attrs["attractor_rule"] == ATTRACTOR_RULE
    # No wrong option among the incorrect answers: an error naming the item.
    rows[0]["options"] = rows[1]["options"] = [options[0], options[2]]
    rel.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(release.ReleaseError, match=r"release item 0 .*no wrong option is among its incorrect"):
        build_item_table("truthfulqa", {"kind": "local", "path": str(raw)}, n_items=1, sample_seed=42,
                         attractor_seed=42, sample={"source": "release", "path": str(rel)})


@shared
def test_release_attractors_give_the_seeds_magpie_claim(shared_items):
    """Seed 002's one printed attractor (Table 1): the magpie item's wrong peers claim that saying
    "Good morning, Mr. Magpie" wards off bad luck. Every attractor is one of the options the
    release shows; for ARC-Challenge and MMLU-Pro (release order = source order) it is the
    first incorrect option."""
    tqa = shared_items["truthfulqa"]
    magpie = tqa.loc[tqa["question"].str.contains("single magpie"), "wrong_attractor"].item()
    assert magpie.endswith('by saying "Good morning, Mr. Magpie"')
    for dataset, items in shared_items.items():
        rows = release.read_release(RELEASE / SOURCES[dataset][1])
        # TruthfulQA by question, the others by id (ARC repeats some question texts under other ids).
        key = (lambda r: _norm(r["question"])) if dataset == "truthfulqa" else (
            lambda r: str(r.get("original_instance_ID") or r["item_id"].removeprefix(f"{dataset}-")))
        shown = {key(rel): {_norm(o["text"]).rstrip(".") for o in rel["options"] if o["label"] != rel["answer"]["label"]}
                 for rel in release.release_items(rows)}
        assert all(_norm(r["wrong_attractor"]).rstrip(".") in shown[key(r)] for r in items.to_dict("records"))
        if dataset != "truthfulqa":
            assert (items["wrong_attractor"] == items["incorrect_answers"].map(lambda x: x[0])).all()


def test_release_design_blocks_by_construction():
    """The release's design (conformity.release_design), checked on 2,000 constructed items:
    six distinct release names, one authority speaker in a present block (with one of the
    release's roles and one of its six authority phrases), the consensus structures' gold
    counts, and a mixed block's authority on the gold side about 1/4 of the time, as in the
    release (129/500, 116/500), not the 1/2 a uniformly placed authority would give."""
    from context_effects.conformity import release_design as rd

    ids = [f"mmlu_pro-{i}" for i in range(2000)]
    blocks = {i: {f"{p}|{a}": rd.design_block(i, p, a, 42) for p in ("correct", "wrong", "mixed")
                  for a in ("absent", "present")} for i in ids}
    stats = _block_stats(blocks)
    assert stats["speakers"] == {6}
    assert stats["roles_per_block"] == {("absent", 0), ("present", 1)}
    assert stats["gold"] == {("correct", 6), ("wrong", 0), ("mixed", 3)}
    assert set(stats["names"]) == set(rd.NAMES) and set(stats["roles"]) == set(rd.ROLES)
    assert {p.strip() for p in stats["phrases"]} == set(rd.PHRASES)
    assert {p.strip() for p in stats["authority_phrases"]} == set(rd.AUTHORITY_PHRASES)
    assert all(len({sp["name"] for sp in b}) == 6 for c in blocks.values() for b in c.values())
    share = stats["mixed_authority_gold"] / stats["mixed_present"]
    assert abs(share - 0.25) < 0.04 and abs(share - 0.5) > 0.2
    # Seeded by (panel seed, item, condition) only: the same call gives the same block.
    assert rd.design_block(ids[0], "mixed", "present", 42) == blocks[ids[0]]["mixed|present"]
    assert rd.design_block(ids[0], "mixed", "present", 43) != blocks[ids[0]]["mixed|present"]
    # The vocabulary is the release's: every name, role and phrase of the shipped release rows is in it.
    for path in (DEMO_SOURCES["truthfulqa"][1], DEMO_SOURCES["arc_challenge"][1]):
        for row in release.read_release(path):
            for sp in release.parse_block(row["perturbed_prompt"]):
                assert sp["name"] in rd.NAMES and sp["phrase"].strip() in rd.PHRASES
                assert sp["role"] is None or (sp["role"] in rd.ROLES and sp["phrase"].strip() in rd.AUTHORITY_PHRASES)


def test_items_without_released_blocks_get_release_design_blocks():
    items = build_item_table("mmlu_pro", {"kind": "local", "path": str(REPO / "data/demo/mmlu_pro.jsonl")},
                             n_items=4, sample_seed=42, attractor_seed=42, balance_by="category",
                             peer_source="release")
    assert items.attrs["peer_source"]["used"] == "release design"
    assert items.attrs["peer_source"]["why"].startswith("the items are not from a release file")
    assert set(items.attrs["release_blocks"]) == set(items["item_id"])
    reqs = creq.round2_requests(items, {i: "x" for i in items.item_id}, "m", MODEL_CFG, GEN, 42)
    item = items.iloc[0].to_dict()
    present = peers.peer_block(item, "wrong", "present", 42, release=items.attrs["release_blocks"][item["item_id"]])
    assert any(present.text in r.messages[-1][1] for r in reqs)
    assert present.endorsed == (item["wrong_attractor"],) * 6 and len(present.role_spans) == 1


def test_generated_peer_source_ignores_released_blocks(demo_items):
    items = _build(*DEMO_SOURCES["arc_challenge"], "arc_challenge", peer_source="generated")
    assert items.attrs["peer_source"]["used"] == "generated" and "release_blocks" not in items.attrs
    reqs = creq.round2_requests(items, {i: "x" for i in items.item_id}, "m", MODEL_CFG, GEN, 42)
    assert "(" not in reqs[1].meta["peer_block"].split(":")[0]  # generated: "Name, role," not "Name (role)"


# ------------------------------------------------------ identical prompts across executions


@pytest.mark.parametrize("source", ["release", "generated"])
def test_prompts_are_byte_identical_across_executions(demo_items, source):
    items = demo_items["truthfulqa"] if source == "release" else _build(
        *DEMO_SOURCES["truthfulqa"], "truthfulqa", peer_source="generated")
    answers = {i: "An answer." for i in items.item_id}
    runs = {s: creq.round2_requests(items, answers, "m", MODEL_CFG, GEN, s) for s in (42, 43, 44)}
    for corpus in ("main", "decomposition"):
        if corpus == "decomposition":
            runs = {s: creq.round2_requests(items, answers, "m", MODEL_CFG, GEN, s, "decomposition",
                                            authority_variants=("present",)) for s in (42, 43)}
        seeds = sorted(runs)
        for a, b in zip(seeds, seeds[1:]):
            assert [r.messages for r in runs[a]] == [r.messages for r in runs[b]]
            assert all(x.key != y.key for x, y in zip(runs[a], runs[b]))
            assert {r.sampling.seed for r in runs[b]} == {b}


def test_panel_seed_comes_from_the_item_table_not_the_execution(demo_items):
    items = _build(*DEMO_SOURCES["truthfulqa"], "truthfulqa", peer_source="generated")
    answers = {i: "x" for i in items.item_id}
    base = creq.round2_requests(items, answers, "m", MODEL_CFG, GEN, 43)
    other = creq.round2_requests(items, answers, "m", MODEL_CFG, GEN, 43, panel_seed=7)
    assert [r.messages for r in base] != [r.messages for r in other]
    plain = creq.round2_requests(items.to_dict("records"), answers, "m", MODEL_CFG, GEN, 44)
    assert [r.messages for r in plain] == [r.messages for r in base]  # DEFAULT_PANEL_SEED = sampling seed 42


# --------------------------------------------------------------------- config and fetch


def test_config_sample_and_peer_source_are_validated():
    demo = load_config(REPO / "config/demo.yaml")
    validate_config(demo, workdir=REPO)
    for edit, pattern in [
        (lambda c: c["conformity"]["peers"].update(source="bogus"), r"conformity.peers.source"),
        (lambda c: c["datasets"]["truthfulqa"]["sample"].update(source="qu"), r"sample.source"),
        (lambda c: c["datasets"]["truthfulqa"]["sample"].update(extra=1), r"sample"),
        (lambda c: c["datasets"]["truthfulqa"]["sample"].update(path=None), r"sample.path.*not set"),
        (lambda c: c["datasets"]["truthfulqa"]["sample"].update(path="data/demo/none.jsonl"), r"does not exist"),
        (lambda c: c["datasets"]["truthfulqa"]["sample"].update(path="resources/release/x.jsonl"),
         r"fetch_release rule knows only"),
        (lambda c: c["conformity"]["peers"].update(n_speakers=4), r"released blocks have 6 speakers"),
    ]:
        cfg = copy.deepcopy(demo)
        edit(cfg)
        with pytest.raises(ConfigError, match=pattern):
            validate_config(cfg, workdir=REPO)


def test_paper_config_uses_the_release_for_every_dataset():
    cfg = validate_config(load_config(REPO / "config/config.yaml"))
    assert cfg["conformity"]["peers"]["source"] == "release"
    for name, ds in cfg["datasets"].items():
        assert ds["sample"]["source"] == "release"
        assert Path(ds["sample"]["path"]).parent.as_posix() == release.FETCH_DIR
        assert Path(ds["sample"]["path"]).name in release.RELEASE_FILES
    assert cfg["datasets"]["arc_challenge"]["hub"]["split"] == "train"


def test_demo_config_needs_nothing_outside_the_repository():
    cfg = validate_config(load_config(REPO / "config/demo.yaml"))
    for ds in cfg["datasets"].values():
        for path in (ds.get("local_path"), (ds.get("sample") or {}).get("path")):
            assert path is None or (path.startswith("data/demo/") and (REPO / path).is_file())


def test_fetch_checks_the_pinned_checksum(tmp_path, monkeypatch):
    name = "truthfulqa_sample500.rq1_rq3.jsonl"
    src = DEMO_SOURCES["truthfulqa"][1]
    monkeypatch.setattr(release, "release_url", lambda n: src.resolve().as_uri())
    with pytest.raises(release.ReleaseError, match="differs from the pinned"):
        release.fetch(name, tmp_path / name)
    assert not (tmp_path / name).exists() and not list(tmp_path.iterdir())
    monkeypatch.setitem(release.RELEASE_FILES, name, {"path": "x", "sha256": pinned.sha256_of(src)})
    release.fetch(name, tmp_path / name)
    assert (tmp_path / name).read_bytes() == src.read_bytes()


def test_release_url_is_the_pinned_raw_github_file():
    url = release.release_url("mmlu_pro_sample500.rq2a.jsonl")
    assert url == ("https://raw.githubusercontent.com/yibo-hu-lab/Easier-to-Mislead-Than-to-Correct/"
                   "29feb84e37df8f08ecf9277d659dc5b3364e58c7/perturbed_dataset/rq2/rq2a/data/mmlu_pro_sample500.jsonl")


def test_n_items_takes_the_first_items_of_a_release_in_the_files_order():
    """A smaller run of the paper's design: n_items below the release's count takes its first
    n_items in the release file's order (its random draw order), kept in source order, so a
    cut is a random subsample and every smaller cut of one file lies inside a larger one."""
    raw, rel = DEMO_SOURCES["truthfulqa"]
    full = _build(raw, rel, "truthfulqa")
    cut = build_item_table("truthfulqa", {"kind": "local", "path": str(raw)}, n_items=2, sample_seed=42,
                           attractor_seed=42, sample={"source": "release", "path": str(rel)},
                           peer_source="release")
    assert len(full) == 4 and set(cut["item_id"]) == set(full.attrs["release_order"][:2])
    assert cut.attrs["n_items"] == 2 and cut.attrs["sample"]["n_items_taken"] == 2
    blocks = cut.attrs["release_blocks"]
    assert blocks and set(blocks) <= set(cut["item_id"])  # only the kept items' peer blocks
    # The rehearsal's shipped ARC-Challenge excerpt (120 items): the file's first ids, nested.
    raw = REPO / "data" / "rehearsal" / "ARC-Challenge-Train.rehearsal.jsonl"
    rel = REPO / "data" / "rehearsal" / "arc_challenge_sample500.rq1_rq3.rehearsal.jsonl"
    first = [str(r["original_instance_ID"]) for r in release.release_items(release.read_release(rel))]
    cuts = {n: build_item_table("arc_challenge", {"kind": "local", "path": str(raw)}, n_items=n, sample_seed=42,
                                attractor_seed=42, sample={"source": "release", "path": str(rel)},
                                peer_source="release") for n in (30, 60)}
    ids = {n: [i.removeprefix("arc_challenge-") for i in c["item_id"]] for n, c in cuts.items()}
    assert set(ids[30]) == set(first[:30]) and set(ids[60]) == set(first[:60]) and set(ids[30]) < set(ids[60])
    assert cuts[60]["source_index"].is_monotonic_increasing  # kept in source order
    # not the 30 lowest source rows of the 60 (the file's order is not the source's)
    assert ids[30] != ids[60][:30]
