"""Study C generation rules end to end on the synthetic backend (seconds, no model)."""

from __future__ import annotations

import pandas as pd
import pyarrow.parquet as pq
import yaml

from conftest import REPO, run_snakemake
from context_effects.llm.store.rows import request_from_json

CONFIG = {
    "run": {"label": "synthetic-generation", "kind": "synthetic"},
    "datasets": {
        "truthfulqa": {"source": "local", "local_path": "data/demo/truthfulqa.jsonl", "n_items": 5},
        "arc_challenge": {"source": "local", "local_path": "data/demo/arc_challenge.jsonl", "n_items": 4},
    },
    "models": {
        "qwen-sim": {"backend": "synthetic", "model_id": "qwen-sim"},
        "llama-sim": {"backend": "synthetic", "model_id": "llama-sim"},
    },
    "conformity": {
        "datasets": ["truthfulqa", "arc_challenge"],
        "generators": ["qwen-sim", "llama-sim"],
        "judges": ["qwen-sim"],
        "seeds": [42],
        "primary_seed": 42,
        # 3 items per shard: several shards per dataset, Round 2 shard k reads Round 1 shard k.
        "generation": {"shard_size": 24},
    },
    "amel": {"enabled": False},
    "anchoring": {"enabled": False},
}


def test_generation_rules_build_both_corpora(workdir):
    cfg_path = workdir / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(CONFIG))
    res = run_snakemake(
        "--cores", "2", "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
        "--configfile=" + str(cfg_path),
        "results/conformity/answers/truthfulqa.parquet", "results/conformity/answers/arc_challenge.parquet",
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    ans = pd.read_parquet(workdir / "results/conformity/answers/truthfulqa.parquet")
    gen = ans[ans["corpus"] != "anchor"]
    # Main corpus: Round 1 + no-peer + 3 peer arms x 2 authority variants = 8 per trial.
    main = gen[gen["corpus"] == "main"]
    assert (main.groupby(["seed", "generator", "item_id"]).size() == 8).all()
    assert len(main) == 5 * 2 * 8
    # Decomposition: Round 1 + no-peer + 3 content + 3 peer arms = 8 per trial.
    dec = gen[gen["corpus"] == "decomposition"]
    assert (dec.groupby(["generator", "item_id"]).size() == 8).all()
    assert set(dec["condition"]) == {
        "round1", "no_peer", "content_correct", "content_wrong", "content_mixed",
        "peer_correct", "peer_wrong", "peer_mixed",
    }
    # Two fixed anchors per item, no generator (never a self-rating).
    anchors = ans[ans["corpus"] == "anchor"]
    assert len(anchors) == 10 and anchors["generator"].isna().all()
    assert ans["answer_id"].is_unique

    # Round 2 branches from the realised Round 1 answer of the same trial.
    r1 = pq.read_table(workdir / "results/responses/conformity/main-round1-s42/qwen-sim/truthfulqa-000.parquet").to_pandas()
    r2 = pq.read_table(workdir / "results/responses/conformity/main-round2-s42/qwen-sim/truthfulqa-000.parquet").to_pandas()
    realised = {request_from_json(b).meta["item_id"]: t for b, t, ok in zip(r1["request_json"], r1["text"], r1["ok"]) if ok}
    for blob in r2["request_json"]:
        req = request_from_json(blob)
        assert req.messages[1] == ("assistant", realised[req.meta["item_id"]])
