"""Write one of Study C's model-free tables (or the rating-distribution figure); the rule
name says which. Inputs are per-dataset tables in config order."""

import pandas as pd

from context_effects.conformity import descriptive as D
from context_effects.figures import save_figure
from context_effects.jobs import setup_job_logging
from context_effects.tables import run_notes, write_table

log = setup_job_logging(snakemake.log[0])
datasets = list(snakemake.params.datasets)
seed = int(snakemake.params.primary_seed)
notes = run_notes(snakemake.params.run)
rule = snakemake.rule
out = snakemake.output

def per_dataset(paths):
    return {d: pd.read_parquet(p) for d, p in zip(datasets, paths, strict=True)}

PANEL = f"Open judge panel, blind pass, main corpus at the primary seed ({seed}); missing ratings excluded."

if rule == "conformity_table2":
    table = D.mean_blind_ratings(per_dataset(snakemake.input.ratings), seed)
    write_table(table, out.csv, out.tex, "Mean blind ratings by peer condition; the last column is "
                "AllCorrect minus AllWrong.", "tab:mean-blind-ratings", formats={"n_ratings": "d"},
                notes=[PANEL, *notes])
elif rule == "conformity_table5":
    table = D.anchor_audit(per_dataset(snakemake.input.ratings))
    write_table(table, out.csv, out.tex, "Anchor-recognition audit under reference-free and "
                "reference-augmented scoring.", "tab:anchor-audit",
                notes=["Ranked higher: share of (item, judge) pairs with correct anchor rated strictly above the "
                       "incorrect anchor; open judge panel.", *notes])
elif rule == "conformity_agreement":
    table = D.blind_agreement(per_dataset(snakemake.input.ratings), seed)
    write_table(table, out.csv, out.tex, "Krippendorff's alpha of the blind judge panel.", "tab:blind-agreement",
                notes=[PANEL + " Units are answers, coders are judges.", *notes])
elif rule == "conformity_parse_failures":
    table = D.parse_failures(per_dataset(snakemake.input.ratings))
    write_table(table, out.csv, out.tex, "Judge replies without a valid rating after every re-ask, by judge, "
                "pass and condition.", "tab:parse-failures", formats={"missing_rate": ".3f"},
                notes=["A missing rating is left out of every analysis, never imputed.", *notes])
elif rule == "conformity_rating_figure":
    dist = D.rating_distribution(per_dataset(snakemake.input.ratings), seed)
    dist.to_csv(out.csv, index=False)
    save_figure(D.plot_rating_distribution(dist, datasets), out.pdf)
    table = dist
elif rule == "conformity_flip_share":
    table = D.flip_share(per_dataset(snakemake.input.revisions))
    write_table(table, out.csv, out.tex, "All-wrong revisions a binary flip indicator scores as unchanged that "
                "still lost at least one blind rating point.", "tab:flip-share",
                notes=["Flip indicator: the answer's side is the candidate set (gold and other correct answers "
                       "vs attractor and other incorrect answers) with the highest token F1; mean blind panel "
                       "ratings.", *notes])
elif rule == "conformity_table1":
    revisions = per_dataset(snakemake.input.revisions)[datasets[0]]
    table, branch = D.example_table(revisions)
    write_table(table, out.csv, out.tex, f"An example of quality change without a simple answer flip "
                f"({datasets[0]}).", "tab:example", align="lp{0.75\\linewidth}",
                notes=[D.TABLE1_RULE, *notes])
    log.info("example: %s", branch)
else:
    raise ValueError(f"conformity_descriptive.py does not know rule {rule!r}")
log.info("%s: %d rows", rule, len(table))
