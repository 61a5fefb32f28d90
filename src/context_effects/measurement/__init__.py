"""Hierarchical ordinal measurement model of seed 002 (§2.3, App. C): ratings → latent quality.

Typical use::

    from context_effects.measurement import prepare_data, fit_nuts, summarize, diagnostics, save_fit
    data = prepare_data(ratings_table)                 # data contract: see measurement.data
    fit = fit_nuts(data)                               # paper set-up + dense global mass block
    table = summarize(fit); diag = diagnostics(fit)
    save_fit(fit, "posterior.nc", "summary.csv", "diagnostics.json")

Variants: ``prepare_data(..., exclude_self=True)`` (Table 17), ``judges=[...]`` (five-judge
refits), ``fit_nuts(..., theta_anchor=1.0)`` (Table 20); a decomposition corpus (content-only
arms present) yields the Δ_sp / Δ_content / Δ_pp blocks (Tables 10-12).
"""

from context_effects.measurement.data import (
    CONDITIONS,
    PEER_D,
    REQUIRED_COLUMNS,
    MeasurementData,
    RatingsError,
    exclude_self_ratings,
    model_family,
    prepare_data,
    validate_ratings,
)
from context_effects.measurement.fit import (
    REPORTED_BLOCKS,
    Block,
    Fit,
    answer_quality,
    compare_to_truth,
    derived_blocks,
    diagnostics,
    diagnostics_ok,
    enable_compilation_cache,
    fit_nuts,
    fit_svi,
    rank_normalized_rhat,
    save_fit,
    set_precision,
    summarize,
    to_inference_data,
)
from context_effects.measurement.model import (
    GLOBAL_SITES,
    ModelOptions,
    global_sites,
    log_likelihood,
    make_model,
    model_arrays,
    ordered_logistic_logprob,
)
from context_effects.measurement.simulate import SimulationTruth, simulate_ratings

__all__ = [
    "CONDITIONS",
    "GLOBAL_SITES",
    "PEER_D",
    "REPORTED_BLOCKS",
    "REQUIRED_COLUMNS",
    "Block",
    "Fit",
    "MeasurementData",
    "ModelOptions",
    "RatingsError",
    "SimulationTruth",
    "answer_quality",
    "compare_to_truth",
    "derived_blocks",
    "diagnostics",
    "diagnostics_ok",
    "enable_compilation_cache",
    "exclude_self_ratings",
    "fit_nuts",
    "fit_svi",
    "global_sites",
    "log_likelihood",
    "make_model",
    "model_arrays",
    "model_family",
    "ordered_logistic_logprob",
    "prepare_data",
    "rank_normalized_rhat",
    "save_fit",
    "set_precision",
    "simulate_ratings",
    "summarize",
    "to_inference_data",
    "validate_ratings",
]
