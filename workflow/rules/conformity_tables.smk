# Study C's model-free results (seed 002 §3.1-3.2): each table and the figure by its
# own rule, from the ratings and answers tables (context_effects.conformity.descriptive).


rule conformity_table2:
    """Table 2: mean blind ratings by dataset × peer condition and the correct - wrong gap."""
    input:
        ratings=expand(
            "results/conformity/ratings/{dataset}.parquet",
            dataset=config["conformity"]["datasets"],
        ),
    output:
        csv="results/tables/conformity/table2.csv",
        tex="results/tables/conformity/table2.tex",
    log:
        "logs/conformity/tables/table2.log",
    conda:
        "../../envs/data.yaml"
    resources:
        **rule_resources("conformity_table2", runtime=10, mem_mb=4000),
    params:
        datasets=config["conformity"]["datasets"],
        primary_seed=config["conformity"]["primary_seed"],
        run=config["run"],
    script:
        "../scripts/conformity_descriptive.py"


use rule conformity_table2 as conformity_table5 with:
    output:
        csv="results/tables/conformity/table5.csv",
        tex="results/tables/conformity/table5.tex",
    log:
        "logs/conformity/tables/table5.log",


use rule conformity_table2 as conformity_agreement with:
    output:
        csv="results/tables/conformity/agreement.csv",
        tex="results/tables/conformity/agreement.tex",
    log:
        "logs/conformity/tables/agreement.log",


use rule conformity_table2 as conformity_parse_failures with:
    output:
        csv="results/tables/conformity/parse_failures.csv",
        tex="results/tables/conformity/parse_failures.tex",
    log:
        "logs/conformity/tables/parse_failures.log",


use rule conformity_table2 as conformity_rating_figure with:
    output:
        csv="results/figures/conformity/rating_distributions.csv",
        pdf="results/figures/conformity/rating_distributions.pdf",
    log:
        "logs/conformity/figures/rating_distributions.log",


rule conformity_wrong_peer_revisions:
    """Every all-wrong revision beside its Round-1 answer: flip indicator and blind ratings."""
    input:
        item_table="results/items/{dataset}.parquet",
        answers="results/conformity/answers/{dataset}.parquet",
        ratings="results/conformity/ratings/{dataset}.parquet",
    output:
        "results/conformity/revisions/{dataset}.parquet",
    log:
        "logs/conformity/revisions/{dataset}.log",
    conda:
        "../../envs/data.yaml"
    resources:
        **rule_resources("conformity_wrong_peer_revisions", runtime=10, mem_mb=4000),
    params:
        primary_seed=config["conformity"]["primary_seed"],
    script:
        "../scripts/conformity_revisions.py"


rule conformity_flip_share:
    """Share of flip-unchanged all-wrong revisions that still lost >= 1 blind rating point."""
    input:
        revisions=expand(
            "results/conformity/revisions/{dataset}.parquet",
            dataset=config["conformity"]["datasets"],
        ),
    output:
        csv="results/tables/conformity/flip_share.csv",
        tex="results/tables/conformity/flip_share.tex",
    log:
        "logs/conformity/tables/flip_share.log",
    conda:
        "../../envs/data.yaml"
    resources:
        **rule_resources("conformity_flip_share", runtime=10, mem_mb=4000),
    params:
        datasets=config["conformity"]["datasets"],
        primary_seed=config["conformity"]["primary_seed"],
        run=config["run"],
    script:
        "../scripts/conformity_descriptive.py"


use rule conformity_flip_share as conformity_table1 with:
    output:
        csv="results/tables/conformity/table1.csv",
        tex="results/tables/conformity/table1.tex",
    log:
        "logs/conformity/tables/table1.log",
