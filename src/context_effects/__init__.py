"""Library behind the context-effects workflow: data, LLM execution, analyses.

Snakemake scripts under ``workflow/scripts`` stay thin and import from here, so
everything that computes a number can be tested without running the workflow.
"""

__version__ = "0.1.0"
