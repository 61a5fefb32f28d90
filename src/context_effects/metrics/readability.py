"""Readability of one answer (seed 002 App. F.1, Table 18): textstat's Flesch reading
ease, Flesch-Kincaid grade and Gunning fog index (English).

textstat counts English syllables with NLTK's ``cmudict`` corpus and *downloads* it
when NLTK cannot find it; ``readability`` therefore refuses to run unless the
offline NLTK data folder (``resources.use_nltk_data``) holds it.
"""

from __future__ import annotations

import nltk
import textstat

from context_effects.metrics.resources import MissingResource

READABILITY_COLUMNS = ("flesch_reading_ease", "flesch_kincaid_grade", "gunning_fog")


def _require_cmudict() -> None:
    try:
        nltk.data.find("corpora/cmudict")
    except LookupError as exc:
        raise MissingResource(
            "NLTK's cmudict corpus is not on nltk.data.path, and textstat would download it: "
            "call context_effects.metrics.resources.use_nltk_data(<folder built by build_nltk_data>) first"
        ) from exc


def readability(text: str) -> dict[str, float]:
    _require_cmudict()
    textstat.set_lang("en_US")
    return {
        "flesch_reading_ease": float(textstat.flesch_reading_ease(text)),
        "flesch_kincaid_grade": float(textstat.flesch_kincaid_grade(text)),
        "gunning_fog": float(textstat.gunning_fog(text)),
    }
