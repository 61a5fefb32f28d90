"""Write one of Tables 6-8, 13-16, 18, 19 (seed 002) as CSV + LaTeX, by `params.table`."""

from pathlib import Path

from context_effects.jobs import setup_job_logging
from context_effects.metrics import tables

log = setup_job_logging(snakemake.log[0])
i, p, out, cfg = snakemake.input, snakemake.params, snakemake.output, snakemake.config
name = p.table
if name == "table13":
    df = tables.write_table13(i.metrics, out, cfg)
elif name == "table14":
    df = tables.write_table14(i.metrics, i.infos, out, cfg)
elif name == "table15":
    df = tables.write_table15(i.metrics, i.quality, out, cfg)
elif name == "table16":
    df = tables.write_table16(i.metrics, out, cfg)
elif name == "table18":
    df = tables.write_table18(i.metrics, out, cfg)
elif name == "table19":
    df = tables.write_table19(i.ratings, out, cfg)
elif name == "table6":
    df = tables.write_table6(i.infos, out, cfg)
elif name == "table7":
    df = tables.write_table7(p.benchmark_root, out, cfg, p.model_gpus, p.stage_gpus)
elif name == "table8":
    df = tables.write_table8(i.infos, sorted(Path(p.ledger_root).rglob("*.json")), out, cfg)
else:
    raise ValueError(f"unknown table {name!r}")
log.info("%s: %d rows -> %s", name, len(df), out.csv)
