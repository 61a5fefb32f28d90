"""Study H summary tables and the pull-distribution figure, from the result files."""

from context_effects.anchoring.results import write_report
from context_effects.jobs import setup_job_logging
from context_effects.tables import run_notes

log = setup_job_logging(snakemake.log[0])
out = snakemake.output
records = write_report(
    list(snakemake.input.results),
    {name: (out[f"{name}_csv"], out[f"{name}_tex"]) for name in snakemake.params.tables},
    [out[k] for k in out.keys() if k.startswith("figure_")],
    notes=run_notes(snakemake.params.run),
)
log.info("tables and figure for %d model run(s)", len(records))
