"""Hierarchical ordinal measurement model of seed 002 (§2.3, App. C): ratings → latent quality.

Typical use::

    from context_effects.measurement import prepare_data, fit_nuts, summarize, diagnostics, save_fit
    data = prepare_data(ratings_table)                 # data contract: see measurement.data
    fit = fit_nuts(data)                               # paper set-up + dense global mass block
    # or fit_nutpie(data): nutpie's Rust NUTS over the same log density
    table = summarize(fit); diag = diagnostics(fit)
    save_fit(fit, "posterior.nc", "summary.csv", "diagnostics.json")

Variants: ``prepare_data(..., exclude_self=True)`` (Table 17), ``judges=[...]`` (five-judge
refits), ``fit_nuts(..., theta_anchor=1.0)`` (Table 20); a decomposition corpus (content-only
arms present) yields the Δ_sp / Δ_content / Δ_pp blocks (Tables 10-12).

The workflow side: ``measurement.pipeline`` decides which fits a configuration needs
(``fit_plan``), selects each fit's ratings and runs one fit as a file-to-file job;
``measurement.report`` builds the paper's model-based tables from the fits' summaries.
"""

import importlib

# Names are imported on first use (PEP 562): the table and plan modules need only
# pandas, and loading JAX/NumPyro/ArviZ costs a table job seconds it does not need.
_EXPORTS = {
    "data": ("CONDITIONS", "PEER_D", "REQUIRED_COLUMNS", "MeasurementData", "RatingsError",
             "exclude_self_ratings", "model_family", "prepare_data", "validate_ratings"),
    "fit": ("REPORTED_BLOCKS", "Block", "Fit", "answer_quality", "compare_to_truth", "derived_blocks",
            "diagnostics", "diagnostics_ok", "enable_compilation_cache", "fit_nuts", "fit_nutpie", "fit_svi",
            "rank_normalized_rhat", "save_fit", "set_precision", "summarize", "to_inference_data"),
    "model": ("GLOBAL_SITES", "ModelOptions", "global_sites", "log_likelihood", "make_model", "model_arrays",
              "ordered_logistic_logprob"),
    "simulate": ("SimulationTruth", "simulate_ratings"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}


def __getattr__(name):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_MODULE_OF))


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
    "fit_nutpie",
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
