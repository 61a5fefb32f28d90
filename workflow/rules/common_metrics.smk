# Study C external validation and text metrics (seed 002 App. E, F): input functions
# and targets of workflow/rules/conformity_metrics.smk.


def metrics_targets():
    return []
