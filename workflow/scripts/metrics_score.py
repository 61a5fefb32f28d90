"""Per-answer metric rows of one dataset: text (lexical + readability), neural (SBERT,
BERTScore) or classifier (NLI, truth/info judges) metrics, by the `kind` wildcard."""

from context_effects.jobs import bound_threads, setup_job_logging

bound_threads(snakemake.threads)  # before torch is imported

import json

import pandas as pd

from context_effects.datasets import read_items
from context_effects.metrics import scoring
from context_effects.metrics.answers import scoring_frame

log = setup_job_logging(snakemake.log[0])
settings = snakemake.params.validation
kind = snakemake.wildcards.kind
frame = scoring_frame(pd.read_parquet(snakemake.input.answers), read_items(snakemake.input.item_table))
if kind == "text":
    rows, info = scoring.text_metrics(frame, settings, snakemake.input.nltk_data)
else:
    from context_effects.metrics.semantic import torch_device

    device = torch_device(settings["device"])
    if kind == "neural":
        rows, info = scoring.neural_metrics(frame, settings, device)
    else:
        rows, info = scoring.classifier_metrics(frame, settings, device, snakemake.wildcards.dataset)
info["threads"] = snakemake.threads
rows.to_parquet(snakemake.output.rows, index=False)
with open(snakemake.output.info, "w") as fh:
    json.dump(info, fh, indent=2, sort_keys=True, default=str)
log.info("%s metrics of %d answers -> %s; throughput %s", kind, len(rows), snakemake.output.rows,
         info.get("throughput"))
