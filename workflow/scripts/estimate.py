"""Print the run's cost estimate (context_effects.costs): nothing is sent or paid.

The run's own ledgers (results/ledgers), where a pilot or an earlier run left them, give
measured output lengths; without them each request counts at its max_tokens.
"""

from context_effects.jobs import setup_job_logging
from context_effects.costs import estimate
from context_effects.llm.estimate import LEDGERS, format_estimate

log = setup_job_logging(snakemake.log[0])
est = estimate(snakemake.params.config, ".", pilot=LEDGERS)
text = format_estimate(est)
# The table goes to the terminal and into the log file, once each.
print(text, flush=True)
with open(snakemake.log[0], "a", encoding="utf-8") as fh:
    fh.write(text)
log.info("estimate: $%.2f%s, %.1f GPU-hours", est.cost_usd, " + unknown" if est.unpriced else "", est.gpu_hours)
