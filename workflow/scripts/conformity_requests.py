"""Build one shard of Study C generation requests: Round 1, Round 2 from Round 1's answers,
or (synthetic runs only) the tagged anchors."""

from context_effects.conformity.stages import write_anchor_shard, write_round1_shard, write_round2_shard
from context_effects.jobs import setup_job_logging

log = setup_job_logging(snakemake.log[0])
w = snakemake.wildcards
common = dict(
    blocks=[(d, int(i)) for d, i in snakemake.params.blocks],
    generator=w.generator,
    model_cfg=snakemake.params.model,
    settings=snakemake.params.generation,
)
items = dict(snakemake.params.item_tables)
if "corpus" not in w.keys():
    n = write_anchor_shard(items, snakemake.output[0], seed=int(snakemake.params.seed), **common)
else:
    common.update(seed=int(w.seed), corpus="decomposition" if w.corpus == "decomp" else "main")
    if "round1" in snakemake.input.keys():
        n = write_round2_shard(items, snakemake.input.round1, snakemake.output[0], peers=snakemake.params.peers, **common)
    else:
        n = write_round1_shard(items, snakemake.output[0], **common)
log.info("wrote %d requests to %s", n, snakemake.output[0])
