"""Benchmark: how wide the card's intervals are at a few design sizes, and what each size costs.

`snakemake card` on the synthetic backend (config/synthetic.yaml: its two simulated models
and their planted values, its fit settings: 2 sequential chains of 150 warm-up + 150 draws),
once per size, each from scratch in a fresh temporary copy of the repository (what
tests/conftest.py `copy_repo` copies, data/ linked; cold JAX compilation cache), with
`--cores 2 --workflow-profile none` and OMP_NUM_THREADS=1. One dataset throughout:
TruthfulQA, `n` items, feeds all three studies, so every study grows with the one knob:

- Study C (conformity): `conformity.datasets: [truthfulqa]`, `datasets.truthfulqa.n_items: n`;
- Study A (AMEL): `amel.benchmark_datasets: [truthfulqa]` beside code_review, `items_per_domain`
  from `--amel-items` (default 16 at the smallest size, 56, all of data/amel/code_review.jsonl,
  above it), `n_samples` from `--amel-samples` (2, as tests/test_card.py);
- Study H (anchoring): `anchoring.benchmark_datasets: [truthfulqa]`, `tasks_per_dataset: n` (one
  task per item) beside data/anchoring/tasks.jsonl, 3 repetitions.

MMLU-Pro and ARC are left out (`anchoring.tasks_per_dataset` may not exceed any benchmark's
n_items, and their demo files hold 8 items). Sizes up to the demo file's 8 rows read
data/demo/truthfulqa.jsonl; larger ones a TruthfulQA generation JSONL (`--truthfulqa`, the
format of data/demo/release/truthfulqa_generation.demo.jsonl), copied into the run's copy and
sampled by the pipeline's seeded draw (no `sample:` key). Without `--truthfulqa` only sizes
up to 8 run.

Per size it records: wall time of the `snakemake card` run (and CPU seconds of its process
tree, the load average before and after: the wall time is only as quiet as the machine),
each study's n read back from the run (the TruthfulQA item table and ratings, AMEL's test
items per domain, Study H's tasks and judgments), and per card headline quantity (each model's
results/card/<model>.csv) both models' value, 95% interval and half-width, and the mean
half-width of the two. Untimed, after the card, `results/synthetic/planted.json` is built and
each interval is checked against its planted value (tests/test_card.py `planted_values`).
Sizes run smallest first; a size whose wall time, extrapolated linearly in n from the two
largest finished sizes, exceeds `--max-minutes` is skipped and recorded as such.
Results are rewritten after every size (`--json`, `--md`: the half-width table for docs).

    OMP_NUM_THREADS=1 .venv/bin/python bench/card_sizes.py --truthfulqa <TruthfulQA generation JSONL> \\
        [--sizes 8,32,100] [--amel-items 16,56,56] --json bench/results/card_sizes.json \\
        --md bench/results/card_sizes.md

It is not a test. Run it on a quiet machine: a run takes both cores.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

from conftest import copy_repo  # noqa: E402
from demo_wall import parse_log, summarise_jobs  # noqa: E402

MODELS = ("qwen-sim", "llama-sim")
DATASET = "truthfulqa"
DEMO_FILE = "data/demo/truthfulqa.jsonl"
INPUT_DIR = "inputs"  # where a run's copy holds the --truthfulqa file (relative to the copy)
CONFIG = "config/card-sizes.yaml"
SNAKEMAKE_ARGS = ["--configfile", CONFIG, "--workflow-profile", "none", "--cores", "2"]
#: The card's headline quantities, in the card's order (the rows of the Markdown table).
QUANTITIES = (
    ("conformity", "gamma"),
    *(("conformity", f"eta_{w}_{DATASET}") for w in ("all-correct", "mixed", "all-wrong")),
    ("conformity", f"asym_total_{DATASET}"),
    ("amel", "d"), ("amel", "asymmetry"), ("amel", "d_uncertain"), ("amel", "d_deterministic"),
    ("anchoring", "pull"),
)
STUDY = {"conformity": "C", "amel": "A", "anchoring": "H"}


def _rows(path: Path) -> int:
    with open(path, "rb") as fh:
        return sum(1 for line in fh if line.strip())


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def size_config(n: int, amel_items: int, amel_samples: int, local_path: str) -> dict:
    """config/synthetic.yaml at one design size (module docstring)."""
    cfg = yaml.safe_load((REPO / "config" / "synthetic.yaml").read_text())
    cfg["datasets"] = {DATASET: {**cfg["datasets"][DATASET], "local_path": local_path, "n_items": n}}
    cfg["conformity"]["datasets"] = [DATASET]
    cfg["amel"].update(benchmark_datasets=[DATASET], items_per_domain=amel_items, n_samples=amel_samples)
    cfg["anchoring"].update(benchmark_datasets=[DATASET], tasks_per_dataset=n, repetitions=3)
    cfg["card"] = {"models": list(MODELS)}
    return cfg


def _cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def snakemake(repo: Path, *targets: str, timeout: float) -> tuple[int, float, float, str]:
    """Run Snakemake in ``repo``: exit status (None when killed at ``timeout``), wall and CPU
    seconds of its process tree, and the tail of its output. On time-out its process group
    (Snakemake and its jobs, nothing else) is stopped."""
    exe = REPO / ".venv" / "bin" / "snakemake"
    cmd = [str(exe) if exe.exists() else "snakemake", *SNAKEMAKE_ARGS, *targets]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cpu0, t0 = _cpu_children(), time.monotonic()
    proc = subprocess.Popen(cmd, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        rc = None
    return rc, time.monotonic() - t0, _cpu_children() - cpu0, out[-6000:]


def design_n(repo: Path) -> dict:
    """Each study's size, read back from the run's own tables."""
    res = repo / "results"
    items = pd.read_parquet(res / "items" / f"{DATASET}.parquet")
    ratings = pd.read_parquet(res / "conformity" / "ratings" / f"{DATASET}.parquet")
    answers = pd.read_parquet(res / "conformity" / "answers" / f"{DATASET}.parquet")
    bias = pd.read_parquet(res / "amel" / "bias_scores.parquet")
    single = bias[bias["method"] == "single_call"]
    per_model = single.groupby("model")["item_id"].nunique()
    by_domain = single[single["model"] == MODELS[0]].groupby("domain")["item_id"].nunique()
    tasks = pd.read_parquet(res / "anchoring" / "tasks.parquet")
    judgments = {}
    for m in MODELS:
        run = json.loads((res / "anchoring" / "runs" / f"{m}.json").read_text())
        judgments[m] = len(run["judgments"]) if isinstance(run.get("judgments"), list) else None
    return {
        "conformity": {"items": int(len(items)), "answers": int(len(answers)), "ratings": int(len(ratings))},
        "amel": {"test_items": int(per_model.max()), "test_items_per_model": {k: int(v) for k, v in per_model.items()},
                 "test_items_per_domain": {k: int(v) for k, v in by_domain.items()},
                 "single_call_rows": int(len(single))},
        "anchoring": {"tasks": int(len(tasks)), "tasks_per_source": {k: int(v) for k, v in
                                                                     tasks.groupby("source").size().items()},
                      "judgments_per_model": judgments},
    }


def card_numbers(repo: Path) -> dict:
    """(study, quantity) -> per model value, interval, half-width, status; and their mean half-width."""
    frames = {m: pd.read_csv(repo / "results" / "card" / f"{m}.csv") for m in MODELS}
    out = {}
    for study, quantity in QUANTITIES:
        per = {}
        for m, df in frames.items():
            row = df[(df["study"] == study) & (df["quantity"] == quantity)]
            if row.empty:
                per[m] = {"status": "missing from the card"}
                continue
            r = row.iloc[0]
            per[m] = {k: (None if pd.isna(r[k]) else float(r[k])) for k in ("value", "lower", "upper", "half_width")}
            per[m]["status"] = str(r["status"])
        hws = [p["half_width"] for p in per.values() if p.get("half_width") is not None]
        out[f"{study}/{quantity}"] = {
            "study": study, "quantity": quantity, "models": per,
            # Over the models with an interval; "models_in_mean" says how many had one.
            "mean_half_width": sum(hws) / len(hws) if hws else None, "models_in_mean": len(hws)}
    return out


def coverage(repo: Path, numbers: dict, timeout: float) -> dict:
    """Untimed: build planted.json and say, per model and quantity, whether the interval covers it."""
    rc, wall, _, tail = snakemake(repo, "results/synthetic/planted.json", timeout=timeout)
    if rc != 0:
        return {"error": f"planted.json not built (exit {rc}): {tail[-500:]}"}
    from test_card import planted_values

    planted = planted_values(repo)
    out = {}
    for key, q in numbers.items():
        for m, p in q["models"].items():
            if (m, q["quantity"]) in planted and p.get("lower") is not None:
                v = planted[(m, q["quantity"])]
                out.setdefault(key, {})[m] = {"planted": v, "covered": bool(p["lower"] <= v <= p["upper"])}
    return out


def predicted_wall(done: list[dict], n: int) -> float | None:
    """Wall seconds at ``n`` on the line through the two largest finished sizes (None with fewer)."""
    pts = sorted((r["n"], r["wall_seconds"]) for r in done if r.get("status") == "ok")
    if len(pts) < 2:
        return None
    (n1, w1), (n2, w2) = pts[-2:]
    if n2 == n1:
        return w2
    return w2 + (w2 - w1) / (n2 - n1) * (n - n2)


def bench_command(args, n: int, amel_items: int) -> str:
    parts = ["OMP_NUM_THREADS=1 .venv/bin/python bench/card_sizes.py"]
    if n > args.demo_rows:
        parts.append("--truthfulqa <TruthfulQA generation JSONL>")
    parts += [f"--sizes {n}", f"--amel-items {amel_items}"]
    if args.amel_samples != 2:
        parts.append(f"--amel-samples {args.amel_samples}")
    return " ".join(parts)


def one_size(args, n: int, amel_items: int) -> dict:
    if n <= args.demo_rows:
        local_path, source = DEMO_FILE, DEMO_FILE
    else:
        local_path, source = f"{INPUT_DIR}/{args.truthfulqa.name}", "--truthfulqa"
    cfg = size_config(n, amel_items, args.amel_samples, local_path)
    record = {"n": n, "amel_items_per_domain": amel_items, "truthfulqa_source": source, "config": cfg,
              "command": bench_command(args, n, amel_items),
              "snakemake": "OMP_NUM_THREADS=1 snakemake " + " ".join(SNAKEMAKE_ARGS) + " card",
              "started": datetime.now().isoformat(timespec="seconds")}
    work = Path(tempfile.mkdtemp(prefix=f"card-sizes-{n}-"))
    try:
        repo = copy_repo(work / "repo")
        if source == "--truthfulqa":
            (repo / INPUT_DIR).mkdir()
            shutil.copy(args.truthfulqa, repo / local_path)
        (repo / CONFIG).write_text(yaml.safe_dump(cfg, sort_keys=False))
        record["load_before"] = list(os.getloadavg())
        rc, wall, cpu, tail = snakemake(repo, "card", timeout=args.timeout_minutes * 60)
        record.update(load_after=list(os.getloadavg()), wall_seconds=wall, cpu_seconds=cpu, exit_status=rc)
        logs = sorted((repo / ".snakemake" / "log").glob("*.snakemake.log"))
        if logs:
            summary = summarise_jobs(parse_log(logs[-1].read_text()))
            record["jobs"] = summary["jobs"]
            record["per_rule"] = summary["per_rule"]
        if rc != 0:
            record["status"] = "timed out" if rc is None else f"failed (exit {rc})"
            record["output_tail"] = tail
            return record
        record["status"] = "ok"
        record["design_n"] = design_n(repo)
        record["quantities"] = card_numbers(repo)
        if not args.no_coverage:
            record["coverage"] = coverage(repo, record["quantities"], timeout=args.timeout_minutes * 60)
        return record
    finally:
        if args.keep:
            record["kept"] = str(work)
        else:
            shutil.rmtree(work, ignore_errors=True)


def n_text(rec: dict) -> str:
    d = rec["design_n"]
    dom = ", ".join(f"{v} {k}" for k, v in d["amel"]["test_items_per_domain"].items())
    src = ", ".join(f"{v} {k}" for k, v in d["anchoring"]["tasks_per_source"].items())
    return (f"Study C {d['conformity']['items']} TruthfulQA items ({d['conformity']['ratings']} ratings); "
            f"Study A {d['amel']['test_items']} test items ({dom}); Study H {d['anchoring']['tasks']} tasks ({src}) "
            f"x 3 repetitions")


def ratios(runs: list[dict]) -> dict:
    """Per quantity, from the smallest to each larger finished size: half-width ratio and the
    1/sqrt(n) prediction, with n the quantity's own study size."""
    ok = sorted((r for r in runs if r.get("status") == "ok"), key=lambda r: r["n"])
    if len(ok) < 2:
        return {}
    size_of = {"conformity": lambda r: r["design_n"]["conformity"]["items"],
               "amel": lambda r: r["design_n"]["amel"]["test_items"],
               "anchoring": lambda r: r["design_n"]["anchoring"]["tasks"]}
    base = ok[0]
    out = {}
    for key, q in base["quantities"].items():
        h0 = q["mean_half_width"]
        for r in ok[1:]:
            h = r["quantities"][key]["mean_half_width"]
            n0, n1 = size_of[q["study"]](base), size_of[q["study"]](r)
            both = q["models_in_mean"] == r["quantities"][key]["models_in_mean"] == len(MODELS)
            out.setdefault(key, {})[str(r["n"])] = {
                "ratio": None if not (h0 and h is not None) else h / h0, "both_models": both,
                "sqrt_n_ratio": math.sqrt(n0 / n1), "n_from": n0, "n_to": n1}
    return out


def full_command(args) -> str:
    parts = ["OMP_NUM_THREADS=1 .venv/bin/python bench/card_sizes.py"]
    if args.truthfulqa:
        parts.append("--truthfulqa <TruthfulQA generation JSONL>")
    parts += [f"--sizes {args.sizes}"] + ([f"--amel-items {args.amel_items}"] if args.amel_items else [])
    if args.amel_samples != 2:
        parts.append(f"--amel-samples {args.amel_samples}")
    parts += [f"--{k} {getattr(args, k).as_posix()}" for k in ("json", "md") if getattr(args, k)]
    return " ".join(parts)


def markdown(runs: list[dict], ratio: dict, command: str) -> str:
    ok = [r for r in sorted(runs, key=lambda r: r["n"]) if r.get("status") == "ok"]
    lines = ["Mean 95% half-width of each card number over the two synthetic models (config/synthetic.yaml's "
             "planted values), by design size (TruthfulQA items n; every study draws on them):", ""]
    lines.append("| study | quantity | " + " | ".join(f"n = {r['n']}" for r in ok) + " |")
    lines.append("|---|---|" + "---:|" * len(ok))
    for study, quantity in QUANTITIES:
        key = f"{study}/{quantity}"
        cells = []
        for r in ok:
            q = r["quantities"][key]
            h = q["mean_half_width"]
            cells.append("-" if h is None else f"{h:.3f}" + ("*" if q["models_in_mean"] < len(MODELS) else ""))
        lines.append(f"| {STUDY[study]} | {quantity} | " + " | ".join(cells) + " |")
    if any(r["quantities"][k]["models_in_mean"] < len(MODELS) for r in ok for k in r["quantities"]):
        lines += ["", "\\* one model's number only: the other's card cell holds no number at this size (its "
                  "`status` in the JSON)."]
    if ratio:
        last = str(ok[-1]["n"])
        lines += ["", f"Half-width ratio from n = {ok[0]['n']} to n = {last} against 1/sqrt(n) (each study's own n):",
                  "", "| study | quantity | measured | 1/sqrt(n) |", "|---|---|---:|---:|"]
        for study, quantity in QUANTITIES:
            c = ratio.get(f"{study}/{quantity}", {}).get(last)
            if c:
                meas = "-" if c["ratio"] is None else f"{c['ratio']:.2f}" + ("" if c["both_models"] else "*")
                lines.append(f"| {STUDY[study]} | {quantity} | {meas} | {c['sqrt_n_ratio']:.2f} "
                             f"({c['n_from']} to {c['n_to']}) |")
    lines += ["", f"Made by `{command}`; each size alone by the command on its line. Runs (`snakemake card` "
              "from scratch in a fresh copy, `--cores 2 --workflow-profile none`, OMP_NUM_THREADS=1):", ""]
    for r in sorted(runs, key=lambda r: r["n"]):
        if r.get("status") == "ok":
            load = r["load_before"][0]
            lines.append(f"- n = {r['n']}: {r['wall_seconds'] / 60:.1f} min wall, {r['cpu_seconds'] / 60:.1f} CPU-min, "
                         f"{r.get('jobs', '?')} jobs (load average {load:.1f} before); {n_text(r)}. "
                         f"`{r['command']}`")
        else:
            lines.append(f"- n = {r['n']}: {r['status']}. `{r['command']}`")
    return "\n".join(lines) + "\n"


def print_run(r: dict) -> None:
    if r.get("status") != "ok":
        wall = f" after {r['wall_seconds'] / 60:.1f} min" if "wall_seconds" in r else ""
        print(f"n = {r['n']}: {r['status']}{wall}")
        if r.get("output_tail"):
            print(r["output_tail"][-2000:])
        return
    print(f"n = {r['n']}: {r['wall_seconds'] / 60:.1f} min wall, {r['cpu_seconds'] / 60:.1f} CPU-min; {n_text(r)}")
    print(f"  {'quantity':34s} {MODELS[0]:>10s} {MODELS[1]:>10s} {'mean':>8s}  covers planted")
    for key, q in r["quantities"].items():
        hw = [q["models"][m].get("half_width") for m in MODELS]
        cov = r.get("coverage", {}).get(key, {})
        cov_text = " ".join(f"{m}:{'yes' if c['covered'] else 'NO'}" for m, c in cov.items())
        mean = q["mean_half_width"] if q["models_in_mean"] == len(MODELS) else None
        print(f"  {key:34s} " + " ".join("         -" if h is None else f"{h:10.3f}" for h in hw)
              + ("        -" if mean is None else f" {mean:8.3f}") + f"  {cov_text}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--truthfulqa", type=Path, help="a TruthfulQA generation JSONL (needed for sizes above the "
                    "demo file's rows)")
    ap.add_argument("--sizes", default="8,32,100", help="TruthfulQA items per size, comma-separated")
    ap.add_argument("--amel-items", default=None, help="amel.items_per_domain per size (default: 16 at sizes up "
                    "to the demo file's rows, 56 above)")
    ap.add_argument("--amel-samples", type=int, default=2, help="amel.n_samples (2, as tests/test_card.py)")
    ap.add_argument("--max-minutes", type=float, default=25.0, help="skip a size predicted to take longer")
    ap.add_argument("--timeout-minutes", type=float, default=40.0, help="stop a run that takes longer")
    ap.add_argument("--no-coverage", action="store_true", help="skip the untimed planted.json check")
    ap.add_argument("--keep", action="store_true", help="keep each run's temporary copy")
    ap.add_argument("--json", type=Path, help="write the runs here (rewritten after each size)")
    ap.add_argument("--md", type=Path, help="write the half-width table for docs here")
    args = ap.parse_args()

    args.demo_rows = _rows(REPO / DEMO_FILE)
    sizes = [int(s) for s in args.sizes.split(",")]
    amel = ([int(s) for s in args.amel_items.split(",")] if args.amel_items else
            [16 if n <= args.demo_rows else 56 for n in sizes])
    if len(amel) != len(sizes):
        sys.exit("--amel-items needs one value per size")
    truthfulqa = None
    if args.truthfulqa:
        args.truthfulqa = args.truthfulqa.resolve()
        truthfulqa = {"file": args.truthfulqa.name, "rows": _rows(args.truthfulqa),
                      "sha256": _sha256(args.truthfulqa)}
    plan = sorted(zip(sizes, amel))
    runs: list[dict] = []

    def save() -> None:
        ratio = ratios(runs)
        if args.json:
            args.json.write_text(json.dumps({"truthfulqa": truthfulqa, "models": list(MODELS), "runs": runs,
                                             "ratios": ratio}, indent=1) + "\n")
        if args.md:
            args.md.write_text(markdown(runs, ratio, full_command(args)))

    for n, amel_items in plan:
        if n > args.demo_rows and args.truthfulqa is None:
            print(f"n = {n}: skipped, the demo file has {args.demo_rows} items (pass --truthfulqa)")
            continue
        if truthfulqa and n > args.demo_rows and n > truthfulqa["rows"]:
            sys.exit(f"n = {n}: the --truthfulqa file has only {truthfulqa['rows']} rows")
        guess = predicted_wall(runs, n)
        if guess is not None and guess > args.max_minutes * 60:
            runs.append({"n": n, "amel_items_per_domain": amel_items, "status":
                         f"skipped: predicted {guess / 60:.0f} min > --max-minutes {args.max_minutes:g}",
                         "command": bench_command(args, n, amel_items)})
            print(f"n = {n}: {runs[-1]['status']}")
            save()
            continue
        print(f"n = {n}: running (amel.items_per_domain {amel_items}) ...", flush=True)
        runs.append(one_size(args, n, amel_items))
        print_run(runs[-1])
        save()
    for key, per in ratios(runs).items():
        text = ", ".join(f"n={k}: {c['ratio']:.2f} (1/sqrt(n) {c['sqrt_n_ratio']:.2f})" for k, c in per.items()
                         if c["ratio"] is not None)
        print(f"  ratio {key:34s} {text}")


if __name__ == "__main__":
    main()
