# Study C measurement model (seed 002 §2.3, App. C): input functions and targets of
# workflow/rules/conformity_fit.smk.


def fit_targets():
    return []
