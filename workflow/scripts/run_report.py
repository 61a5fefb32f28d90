"""Write the run report (results/report/report.md) from the tables and figures of the run."""

from pathlib import Path

from context_effects.jobs import setup_job_logging
from context_effects.report import build_report

log = setup_job_logging(snakemake.log[0])
text = build_report(
    snakemake.input.manifest,
    list(snakemake.input.tables),
    list(snakemake.input.figures),
    injection_paths=list(snakemake.input.injection),
    reproduction_path=snakemake.input.reproduction,
    ledger_path=snakemake.input.ledger,
    recovery_path=(list(snakemake.input.recovery) or [None])[0],
    ledger_paths=list(snakemake.input.ledgers),
)
Path(snakemake.output[0]).write_text(text)
log.info("report: %d tables, %d figures", len(snakemake.input.tables), len(snakemake.input.figures))
