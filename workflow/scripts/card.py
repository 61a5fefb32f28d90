"""Write results/card/: each card model's card, table and figures, and the comparison."""

from context_effects.card import write_cards
from context_effects.jobs import setup_job_logging

log = setup_job_logging(snakemake.log[0])
write_cards(snakemake.config, list(snakemake.input.published))
log.info("cards: %s", ", ".join(snakemake.output.cards))
