"""Benchmark summary: how the measurement fit's cost grows with the data (a scaling curve).

Reads the run files ``bench/measurement_speed.py --json`` wrote at several scales (same
sampler settings at every scale: one chain of 400 warm-up + 400 draws per run, float64)
and prints, per variant and scale, the medians over repeats of: whole-fit wall time, its
parts (start, warm-up incl. compile, sampling), leapfrog steps per draw and per warm-up
iteration, milliseconds per leapfrog step, and the weakest η and γ bulk ESS per second;
and, at each scale with runs of the straightforward model (a), every variant's ratio to it
per wall- and per CPU-second. Files are pooled by scale, so repeats run in separate
invocations (e.g. two cores at once) count together.

Then, per variant, a least-squares line through log(wall seconds per iteration) against
log(ratings) gives the exponent p of ``seconds per iteration ∝ ratings^p``; with it,
``--predict-ratings N`` prints the predicted wall time of one chain of the paper's length
(1,500 + 1,500) at N ratings. The prediction covers the sampler only (set-up and compile
are a fixed cost of tens of seconds) and assumes steps per draw keep the trend measured
here; a different design (more judges, longer scales) moves the curve, so measure one
point at the new design before trusting it.

Usage::

    .venv/bin/python bench/measurement_scaling.py bench/results/speed_tenth.json \\
        bench/results/speed_quarter.json bench/results/speed_half.json bench/results/speed_full.json \\
        [--predict-ratings 232000]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

PAPER_ITEMS = 500
PAPER_ITERATIONS = 3000  # 1,500 warm-up + 1,500 draws


def load_runs(paths: list[str]) -> dict[str, dict[int, list[dict]]]:
    """variant -> items -> runs (every file's runs, pooled by scale)."""
    out: dict[str, dict[int, list[dict]]] = {}
    for path in paths:
        doc = json.loads(Path(path).read_text())
        for variant, runs in doc["runs"].items():
            for r in runs:
                out.setdefault(variant, {}).setdefault(int(r["items"]), []).append(r)
    return out


def curve_rows(runs: dict[str, dict[int, list[dict]]]) -> list[dict]:
    rows = []
    for variant, by_items in runs.items():
        for items, rs in sorted(by_items.items()):
            med = lambda key: float(np.median([r[key] for r in rs]))  # noqa: E731
            iters = med("warmup") + med("samples")
            rows.append({
                "variant": variant,
                "items": items,
                "scale": items / PAPER_ITEMS,
                "ratings": int(rs[0]["ratings"]),
                "n": len(rs),
                "wall_s": med("wall_s"),
                "start_s": med("start_s"),
                "warmup_s": med("warmup_s"),
                "sampling_s": med("sampling_s"),
                "steps_per_draw": med("steps_per_draw"),
                "steps_per_warmup_iteration": float(np.median([r["warmup_steps"] / r["warmup"] for r in rs])),
                "ms_per_step": float(np.median([1e3 * r["sampling_s"] / max(r["sample_steps"], 1) for r in rs])),
                "ess_s_eta": float(np.median([r["ess_eta_min"] / r["wall_s"] for r in rs])),
                "ess_s_gamma": float(np.median([r["ess_gamma_min"] / r["wall_s"] for r in rs])),
                "ess_cpu_s_eta": float(np.median([r["ess_eta_min"] / r["cpu_s"] for r in rs])),
                "ess_cpu_s_gamma": float(np.median([r["ess_gamma_min"] / r["cpu_s"] for r in rs])),
                "s_per_iteration": float(np.median([(r["warmup_s"] + r["sampling_s"]) / iters for r in rs])),
            })
    return rows


def power_law(rows: list[dict], variant: str) -> tuple[float, float] | None:
    """(p, c) of seconds per iteration = c · ratings^p, least squares on the log scale."""
    pts = [(r["ratings"], r["s_per_iteration"]) for r in rows if r["variant"] == variant]
    if len(pts) < 2:
        return None
    x, y = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
    p, logc = np.polyfit(x, y, 1)
    return float(p), float(np.exp(logc))


def print_markdown(rows: list[dict]) -> None:
    base = {r["items"]: r for r in rows if r["variant"] == "a"}
    print("| variant | scale | ratings | runs | wall s | warm-up s (incl. compile) | sampling s | steps per draw | "
          "steps per warm-up iteration | ms per step | ESS/s η | ESS/s γ | ratio to (a) η / γ, wall | "
          "ratio to (a) η / γ, CPU |")
    print("|" + "---|" * 14)
    for r in rows:
        a = base.get(r["items"])
        wall = cpu = "1 / 1" if r["variant"] == "a" else "–"
        if a is not None and r["variant"] != "a":
            wall = f"×{r['ess_s_eta'] / a['ess_s_eta']:.1f} / ×{r['ess_s_gamma'] / a['ess_s_gamma']:.1f}"
            cpu = f"×{r['ess_cpu_s_eta'] / a['ess_cpu_s_eta']:.1f} / ×{r['ess_cpu_s_gamma'] / a['ess_cpu_s_gamma']:.1f}"
        print(f"| {r['variant']} | {r['scale']:g} | {r['ratings']:,} | {r['n']} | {r['wall_s']:.0f} | "
              f"{r['warmup_s']:.0f} | {r['sampling_s']:.0f} | {r['steps_per_draw']:.0f} | "
              f"{r['steps_per_warmup_iteration']:.0f} | {r['ms_per_step']:.2f} | {r['ess_s_eta']:.3f} | "
              f"{r['ess_s_gamma']:.3f} | {wall} | {cpu} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="run files of bench/measurement_speed.py --json")
    ap.add_argument("--predict-ratings", type=int, default=None, help="predict one paper-length chain at N ratings")
    ap.add_argument("--markdown", action="store_true", help="print the curve as a Markdown table (for docs/benchmarks.md)")
    args = ap.parse_args()
    rows = sorted(curve_rows(load_runs(args.runs)), key=lambda r: (r["variant"] != "a", r["variant"], r["items"]))
    if args.markdown:
        print_markdown(rows)
        return
    print("# scaling curve: medians over repeats; one chain of 400 + 400 per run, float64; ESS/s of the whole fit")
    print(f"{'variant':8s} {'scale':>6s} {'ratings':>8s} {'n':>2s} {'wall s':>7s} {'start':>6s} {'warm-up':>8s} "
          f"{'sampling':>8s} {'steps/draw':>10s} {'steps/warm-up it':>16s} {'ms/step':>7s} {'ESS/s eta':>9s} "
          f"{'ESS/s gamma':>11s}")
    for r in rows:
        print(f"{r['variant']:8s} {r['scale']:6.2f} {r['ratings']:8d} {r['n']:2d} {r['wall_s']:7.1f} "
              f"{r['start_s']:6.1f} {r['warmup_s']:8.1f} {r['sampling_s']:8.1f} {r['steps_per_draw']:10.1f} "
              f"{r['steps_per_warmup_iteration']:16.1f} {r['ms_per_step']:7.2f} {r['ess_s_eta']:9.3f} "
              f"{r['ess_s_gamma']:11.3f}")
    base = {r["items"]: r for r in rows if r["variant"] == "a"}
    if base:
        print("\n# ratio to (a) at the same scale (medians over each variant's repeats), ESS/s of the whole fit:"
              " eta / gamma per wall-second; per CPU-second")
        for r in rows:
            a = base.get(r["items"])
            if a is None or r["variant"] == "a":
                continue
            print(f"{r['variant']:8s} {r['scale']:6.2f}  x{r['ess_s_eta'] / a['ess_s_eta']:.1f} / "
                  f"x{r['ess_s_gamma'] / a['ess_s_gamma']:.1f};  x{r['ess_cpu_s_eta'] / a['ess_cpu_s_eta']:.1f} / "
                  f"x{r['ess_cpu_s_gamma'] / a['ess_cpu_s_gamma']:.1f}  (repeats: {r['n']} vs {a['n']})")
    print("\n# seconds per iteration (warm-up + sampling, compile included) = c * ratings^p")
    for variant in dict.fromkeys(r["variant"] for r in rows):
        fit = power_law(rows, variant)
        if fit is None:
            continue
        p, c = fit
        line = f"{variant:8s} p = {p:.2f}"
        if args.predict_ratings:
            chain_h = c * args.predict_ratings**p * PAPER_ITERATIONS / 3600
            line += (f"; one chain of 1,500 + 1,500 at {args.predict_ratings:,} ratings: ~{chain_h:.2f} h "
                     f"(4 chains: {4 * chain_h:.2f} h on one core, {chain_h:.2f} h on 4)")
        print(line)


if __name__ == "__main__":
    main()
