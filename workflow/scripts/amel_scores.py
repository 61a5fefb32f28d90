"""P(Yes) of every model x item x cell from the response shards, and the bias scores."""

from context_effects.amel.scores import bias_scores, probabilities
from context_effects.jobs import setup_job_logging

log = setup_job_logging(snakemake.log[0])
probs = probabilities(list(snakemake.input.responses), list(snakemake.input.requests))
bs = bias_scores(
    probs, snakemake.params.models, entropy_threshold_bits=snakemake.params.settings["entropy_threshold_bits"]
)
probs.to_parquet(snakemake.output.probabilities, index=False)
bs.to_parquet(snakemake.output.bias_scores, index=False)
log.info(
    "%d cells (%d without P(Yes)), %d bias scores (%d missing); methods: %s",
    len(probs), int(probs["p_yes"].isna().sum()), len(bs), int(bs["bs"].isna().sum()),
    probs.groupby("model")["method"].first().to_dict(),
)
