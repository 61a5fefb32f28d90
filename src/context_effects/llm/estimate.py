"""What a run's model calls will cost, before any is paid (docs/costs.md).

For every model and stage of a config: the number of requests, the prompt and output
tokens, the cost in USD at the price table (``llm/costs.yaml``, dated, or the config's
``models.<name>.price``) and, for local (vLLM) models, GPU-hours at a throughput. Nothing
here calls a model or the network. The design's requests are counted by
``context_effects.costs`` (it builds every study's requests, so it sits above the
studies; this module, like the rest of the LLM layer, imports none of them), which also
holds the command and the check of ``run.budget_usd`` at a run's start.

How each number is obtained, and why:

* **requests** are exact: the requests of every stage are built by the very functions
  the DAG's request rules call, from the item tables the DAG builds without calling any
  model. Stages whose prompts hold an earlier answer (Study C's Round 2 and judging)
  are built with a one-character stand-in (:data:`STAND_IN`) for that answer, so their
  count assumes that every earlier call succeeds (a failed generation is not judged: an
  upper bound). Only the first ask of each request is counted; re-asks of invalid
  replies come on top, unless a pilot says how many there were.
* **prompt tokens** are an estimate: characters / 4 of the rendered messages (no
  tokenizer: the paper's hosted models' tokenizers are not available offline, and four
  characters per token is the usual rule for English text), plus, for each earlier
  answer a prompt carries, that answer's output-token estimate. Chat-template tokens and
  provider prompt caching are not counted.
* **output tokens**: the requests' ``max_tokens`` (as sent, after the capability
  profile), an upper bound per call; or, with a pilot run's ledgers, the mean output
  tokens per answered call of the same model and stage (or, failing that, stage kind)
  measured there, times the pilot's calls per first ask. Each row says which.
* **cost**: prompt and output tokens at the model's price; a model without a known
  price is ``unknown``, never 0. Local models cost no USD per token.
* **GPU-hours** (vLLM models on a GPU): prompt and output tokens over a throughput: the
  pilot's, measured from its ledgers, or the assumption in ``llm/costs.yaml`` (printed).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from context_effects.llm.ledger import AttemptLog, Ledger
from context_effects.llm.pricing import CHARS_PER_TOKEN, batch_factor, load_costs, model_price, prices_read

Config = Mapping[str, Any]

#: Stands in for an answer not yet written, in prompts built before it exists.
STAND_IN = "·"
#: Where a run's ledgers are (and their attempts logs, under ``.attempts``).
LEDGERS = "results/ledgers"
#: Backends whose jobs hold a GPU (when the model's config gives one).
LOCAL_GPU_BACKENDS = ("vllm",)


class BudgetExceeded(RuntimeError):
    """The run's estimate exceeds ``run.budget_usd`` (or cannot be known): nothing was started."""


# --------------------------------------------------------------------------- counting


@dataclass
class StageCount:
    """What the design asks of one model at one stage (a ledger's study/stage/model)."""

    study: str
    stage: str
    model: str
    requests: int = 0
    prompt_chars: int = 0
    max_tokens: int = 0
    #: Prompts carrying one earlier answer, by the (study, stage, model) that writes it.
    carries: Counter = field(default_factory=Counter)

    def add(self, requests: Iterable[Any], carried: Mapping[tuple[str, str, str], int] | None = None) -> None:
        for req in requests:
            self.requests += 1
            self.prompt_chars += sum(len(text) for _, text in req.messages)
            self.max_tokens += int(req.sampling.max_tokens)
        if carried:
            self.carries.update(carried)

    @property
    def kind(self) -> str:
        return stage_kind(self.study, self.stage)


def stage_kind(study: str, stage: str) -> str:
    """``main-round1-s42`` -> ``round1``: what a stage does, whatever the execution."""
    if study == "conformity":
        for kind in ("round1", "round2"):
            if f"-{kind}-" in stage:
                return kind
    return stage


# --------------------------------------------------------------------------- a pilot's ledgers


@dataclass
class Measured:
    """What a pilot's ledgers say about one model at one stage (or stage kind)."""

    calls: int = 0
    reasks: int = 0
    failures: int = 0
    #: Answers whose reply reported no token usage: paid, but no measurement of length.
    unmeasured: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    wall_s: float = 0.0
    backends: set = field(default_factory=set)

    def add(self, rec: Mapping[str, Any]) -> None:
        self.calls += int(rec.get("calls") or 0)
        self.reasks += int(rec.get("reasks") or 0)
        self.failures += int(rec.get("failures") or 0)
        self.unmeasured += int(rec.get("cost_bounded_calls") or 0)
        self.tokens_in += int(rec.get("tokens_in") or 0)
        self.tokens_out += int(rec.get("tokens_out") or 0)
        self.wall_s += float(rec.get("wall_s") or 0.0)
        if rec.get("backend"):
            self.backends.update(str(rec["backend"]).split(","))

    @property
    def answered(self) -> int:
        """Answers whose length was measured: a reply without token usage counts 0 tokens
        in its ledger, which would make a pilot's mean, and so the estimate, too small."""
        return self.calls - self.failures - self.unmeasured

    def out_per_call(self) -> float | None:
        return self.tokens_out / self.answered if self.answered > 0 else None

    def calls_per_ask(self) -> float:
        """Paid calls per first ask (re-asks of invalid replies on top of each)."""
        first = self.calls - self.reasks
        return self.calls / first if first > 0 else 1.0


@dataclass
class Pilot:
    """A pilot run's ledgers: per (study, stage, model) and per (study, stage kind, model)."""

    where: str
    by_stage: dict[tuple[str, str, str], Measured]
    by_kind: dict[tuple[str, str, str], Measured]

    def find(self, study: str, stage: str, model: str) -> Measured | None:
        exact = self.by_stage.get((study, stage, model))
        if exact is not None and exact.answered > 0:
            return exact
        kind = self.by_kind.get((study, stage_kind(study, stage), model))
        return kind if kind is not None and kind.answered > 0 else None

    def throughput(self, model: str) -> float | None:
        """Prompt and output tokens per second of a local model's answering jobs (model load included)."""
        tokens = wall = 0.0
        for (_, _, m), got in self.by_stage.items():
            if m == model and got.backends & set(LOCAL_GPU_BACKENDS):
                tokens += got.tokens_in + got.tokens_out
                wall += got.wall_s
        return tokens / wall if wall > 0 and tokens > 0 else None


def read_pilot(ledgers: str | Path) -> Pilot | None:
    """The spending a run's ledgers directory records: each shard's attempts log (every
    attempt, finished or not) where there is one, else its ledger. ``None`` if it records none."""
    root = Path(ledgers)
    if not root.is_dir():
        return None
    shards: dict[tuple[str, ...], list[Mapping[str, Any]]] = {}
    attempts = root / ".attempts"
    for path in sorted(attempts.rglob("*.jsonl")) if attempts.is_dir() else []:
        if path.name.endswith(".answers.jsonl"):
            continue
        parts = path.relative_to(attempts).with_suffix("").parts
        if len(parts) == 4:
            shards[parts] = AttemptLog(path).previous()
    for path in sorted(root.rglob("*.json")):
        parts = path.relative_to(root).with_suffix("").parts
        if len(parts) == 4 and not parts[0].startswith(".") and parts not in shards:
            shards[parts] = [Ledger.load(path).to_dict()]
    if not shards:
        return None
    by_stage: dict[tuple[str, str, str], Measured] = defaultdict(Measured)
    by_kind: dict[tuple[str, str, str], Measured] = defaultdict(Measured)
    for (study, stage, model, _), records in shards.items():
        for rec in records:
            by_stage[(study, stage, model)].add(rec)
            by_kind[(study, stage_kind(study, stage), model)].add(rec)
    return Pilot(str(ledgers), dict(by_stage), dict(by_kind))


# --------------------------------------------------------------------------- the estimate


@dataclass
class Row:
    """One model at one stage kind, as the table prints it."""

    study: str
    stage: str
    model: str
    backend: str
    requests: int
    calls: float
    prompt_tokens: float
    output_tokens: float
    #: "max_tokens" (an upper bound per call) or "pilot" (measured means).
    output_basis: str
    cost_usd: float | None
    price_basis: str
    gpu_hours: float | None


@dataclass
class SizeRow:
    """One size a seed paper prints (calls, answers, rating tasks, GPU-hours) beside the
    config's own, and the ledger entry (docs/deviations.yaml) that says why they differ."""

    quantity: str
    seed: str
    seed_value: float
    run: float
    where: str
    ledger: str | None = None
    decimals: int = 0

    @property
    def ratio(self) -> float:
        return self.run / self.seed_value if self.seed_value else float("nan")


@dataclass
class Estimate:
    rows: list[Row]
    prices_read: str
    throughput: dict[str, Any]
    pilot: str | None
    budget_usd: float | None
    #: The config's sizes beside those the seed papers print (``context_effects.costs.seed_sizes``).
    sizes: list[SizeRow] = field(default_factory=list)

    @property
    def cost_usd(self) -> float:
        """Known costs summed (see ``unpriced``)."""
        return sum(r.cost_usd for r in self.rows if r.cost_usd is not None)

    @property
    def unpriced(self) -> list[str]:
        return sorted({r.model for r in self.rows if r.cost_usd is None})

    @property
    def gpu_hours(self) -> float:
        return sum(r.gpu_hours or 0.0 for r in self.rows)

    def to_dict(self) -> dict[str, Any]:
        return {"rows": [asdict(r) for r in self.rows], "prices_read": self.prices_read,
                "throughput": self.throughput, "pilot": self.pilot, "budget_usd": self.budget_usd,
                "cost_usd": self.cost_usd, "unpriced": self.unpriced, "gpu_hours": self.gpu_hours}


def estimate_counts(config: Config, counts: Sequence[StageCount], pilot: str | Path | None = None,
                    tokens_per_s: float | None = None) -> Estimate:
    """The estimate of ``config``'s model calls from the design's ``counts`` (module docstring;
    ``context_effects.costs.design_counts`` builds them from a config's item tables).

    ``pilot``: a ledgers directory (a pilot run's ``results/ledgers``); ``tokens_per_s``:
    a GPU throughput that replaces both the pilot's and the assumption's.
    """
    measured = read_pilot(pilot) if pilot is not None else None
    assumed = dict(load_costs()["gpu_throughput"])

    # Output tokens per call of every (study, stage, model): what a later prompt carries too.
    per_call: dict[tuple[str, str, str], tuple[float, float, str]] = {}
    for sc in counts:
        got = measured.find(sc.study, sc.stage, sc.model) if measured else None
        if got is not None:
            per_call[(sc.study, sc.stage, sc.model)] = (got.out_per_call() or 0.0, got.calls_per_ask(), "pilot")
        else:
            per_call[(sc.study, sc.stage, sc.model)] = (sc.max_tokens / max(sc.requests, 1), 1.0, "max_tokens")

    grouped: dict[tuple[str, str, str], list[StageCount]] = defaultdict(list)
    for sc in counts:
        grouped[(sc.study, sc.kind, sc.model)].append(sc)
    rows = []
    for (study, kind, model), scs in grouped.items():
        cfg = config["models"][model]
        requests = calls = prompt = output = 0.0
        bases = set()
        for sc in scs:
            out, ratio, basis = per_call[(sc.study, sc.stage, sc.model)]
            bases.add(basis)
            carried = sum(n * per_call.get(src, (0.0, 1.0, ""))[0] for src, n in sc.carries.items())
            asks = sc.requests * ratio
            requests += sc.requests
            calls += asks
            prompt += (math.ceil(sc.prompt_chars / CHARS_PER_TOKEN) + carried) * ratio
            output += out * asks
        price, price_basis = model_price(cfg)
        cost = None
        if price is not None:
            cost = (prompt * price["input_per_mtok"] + output * price["output_per_mtok"]) / 1e6 * batch_factor(cfg)
        gpu_hours = None
        gpus = int((cfg.get("gpu") or {}).get("count", 0) or 0)
        if cfg["backend"] in LOCAL_GPU_BACKENDS and gpus > 0:
            rate = tokens_per_s or (measured.throughput(model) if measured else None) or assumed["tokens_per_s"]
            gpu_hours = (prompt + output) / float(rate) / 3600 * gpus
        rows.append(Row(study, kind, model, cfg["backend"], int(requests), calls, prompt, output,
                        "+".join(sorted(bases)), cost, price_basis, gpu_hours))
    rows.sort(key=lambda r: (list(config["models"]).index(r.model), r.study, r.stage))
    throughput = {"tokens_per_s": tokens_per_s, "source": "given on the command line"} if tokens_per_s else assumed
    if measured and not tokens_per_s and any(measured.throughput(r.model) for r in rows if r.gpu_hours):
        throughput = {**assumed, "pilot": "local models measured in the pilot use the pilot's throughput"}
    return Estimate(rows, prices_read(), throughput, str(pilot) if measured else None,
                    config["run"].get("budget_usd"))


# --------------------------------------------------------------------------- printing


def _int(x: float) -> str:
    return f"{round(x):,}"


def _usd(x: float | None) -> str:
    return "unknown" if x is None else f"{x:,.2f}"


def format_estimate(est: Estimate) -> str:
    """The estimate as a plain-text table with its totals and how each number was made."""
    head = ("model", "backend", "stage", "requests", "prompt tok", "output tok", "output from", "USD", "GPU-h")
    body = []
    for r in est.rows:
        basis = {"max_tokens": "max_tokens bound", "pilot": "pilot mean"}.get(r.output_basis, r.output_basis)
        body.append((r.model, r.backend, f"{r.study}/{r.stage}", _int(r.requests), _int(r.prompt_tokens),
                     _int(r.output_tokens), basis, _usd(r.cost_usd),
                     "-" if r.gpu_hours is None else f"{r.gpu_hours:,.1f}"))
    total = ("total", "", "", _int(sum(r.requests for r in est.rows)), _int(sum(r.prompt_tokens for r in est.rows)),
             _int(sum(r.output_tokens for r in est.rows)), "",
             _usd(est.cost_usd) + (" + unknown" if est.unpriced else ""),
             f"{est.gpu_hours:,.1f}" if any(r.gpu_hours is not None for r in est.rows) else "-")
    widths = [max(len(str(x[i])) for x in (head, *body, total)) for i in range(len(head))]
    numeric = {3, 4, 5, 7, 8}

    def line(cells: Sequence[str]) -> str:
        return "  ".join(str(c).rjust(w) if i in numeric else str(c).ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    rule = "  ".join("-" * w for w in widths)
    out = ["Cost estimate (nothing has been sent or paid)", "", line(head), rule, *map(line, body), rule,
           line(total), ""]
    priced = sorted({r.model for r in est.rows if r.price_basis == "config"})
    out.append(f"Prices: USD per million tokens from llm/costs.yaml, read {est.prices_read} (sources listed there)"
               + (f"; from the config's models.<name>.price: {', '.join(priced)}" if priced else "") + ".")
    if est.unpriced:
        out.append(f"Unknown price: {', '.join(est.unpriced)} (hosted, in no price table): set models.<name>.price; "
                   "the total counts them as unknown, not as 0.")
    out.append(f"Prompt tokens: characters / {CHARS_PER_TOKEN} of the rendered prompts (an estimate, no tokenizer), "
               "earlier answers inside a prompt at their output estimate.")
    if est.pilot:
        out.append(f"Output tokens: 'pilot mean' rows use the mean per answered call measured in {est.pilot} "
                   "(re-asks at the pilot's rate); 'max_tokens bound' rows the requests' max_tokens, one ask each.")
    else:
        out.append("Output tokens: each request's max_tokens, an upper bound for one ask; re-asks of invalid replies "
                   "are not counted. A pilot's ledgers give measured means (--pilot, docs/costs.md).")
    t = est.throughput
    if any(r.gpu_hours is not None for r in est.rows):
        out.append(f"GPU-hours: prompt and output tokens at {t['tokens_per_s']:,} tokens/s per GPU"
                   + (f" - an ASSUMPTION ({t.get('counts', '')}; {t.get('source', '')})" if "counts" in t else
                      f" ({t.get('source', '')})") + (f"; {t['pilot']}" if t.get("pilot") else "") + ".")
    if est.sizes:
        out += ["", "Beside the seed papers' printed sizes (docs/costs.md, \"The paper's size\"):", ""]
        rows = [("quantity", "seed", "this config", "ratio", "where", "why they differ")]
        rows += [(z.quantity, z.seed, f"{z.run:,.{z.decimals}f}", f"{z.ratio:.2f}", z.where,
                  f"docs/deviations.yaml#{z.ledger}" if z.ledger else "") for z in est.sizes]
        w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        out += ["  ".join(c.rjust(w[i]) if i in (1, 2, 3) else c.ljust(w[i]) for i, c in enumerate(r)).rstrip()
                for r in rows]
        out.append("")
    if est.budget_usd is not None:
        verdict = ("cannot be checked: a hosted model has no price" if est.unpriced
                   else "exceeds it" if est.cost_usd > est.budget_usd else "is within it")
        out.append(f"run.budget_usd = {est.budget_usd:,.2f}: the estimate {verdict}.")
    return "\n".join(out) + "\n"


