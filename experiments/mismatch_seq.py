"""Study 5b: sequence-level and geometric corrections under the samplers of study 5.

The same design as `mismatch_training` (group-centered REINFORCE, `dr_grpo` advantage,
one update per rollout batch, the tiny warm-started Decoder on the synthetic rubric
language, 60 batches of 16 prompts × 8, lr 1e-3, 3 seeds) and the same four samplers
(W8A8 + int4 KV re-quantized every update; exact copies re-synced every 4 / 16 / 64 updates).
Arms per sampler: naive PG and token-level TIS (the references, rerun here so that every
comparison is paired on seed), sequence-level TIS on the ratio product (`tis_seq_prod`,
C = 2) and on the geometric mean (`tis_seq_geo`), sequence rejection on the product
(`rej_seq_prod`, keep [1/2, 2]) and geometric rejection + veto (`rej_seq_geo` with u = 1.05,
the `configs/geo_rs.py` preset, + `rej_veto` at 1e-4; rejected responses are out of the
loss and the group baseline). Thresholds were fixed before any run.

Power, stated before running: n = 3 seeds, paired on seed. Study 5's paired held-out CSR
differences had sd 1.6–4.1 pp, so a paired t-test (df = 2, two-sided 5 %) detects a
difference of 4.30 · sd / √3 ≈ 4–10 pp. No source paper gives a number for sequence- vs
token-level correction, so the verdicts are "a difference detectable at this power" or not.

    python -m experiments.mismatch_seq [--quick]
"""
from __future__ import annotations

import dataclasses
import os

from experiments import common, toy_grid
from experiments.mismatch_training import BASE, EVAL_KEYS, PANELS, SAMPLERS, SEEDS
from experiments.toy_rl import MODEL, SFT

STUDY = "mismatch_seq"
ESTIMATORS = {
    "PG": dict(),
    "TIS": dict(transforms=("tis",)),
    "TIS-seq": dict(transforms=("tis_seq_prod",)),
    "TIS-geo": dict(transforms=("tis_seq_geo",)),
    "RS-seq": dict(transforms=("rej_seq_prod",)),
    "RS-geo": dict(transforms=("rej_seq_geo", "rej_veto"),
                   transform_kwargs=(("rej_seq_geo", (("high", 1.05),)),)),
}
# the samplers where study 5 saw mismatch hurt come first (a cut-short sweep keeps them)
ORDER = ("stale-16", "stale-64", "W8A8+KV4", "stale-4")
ARMS = {"on-policy PG": BASE}
ARMS.update({f"{s} / {e}": dataclasses.replace(BASE, **SAMPLERS[s], **ek)
             for s in ORDER for e, ek in ESTIMATORS.items()})
PAIRS = (("PG", "TIS"), ("TIS", "TIS-seq"), ("TIS", "TIS-geo"), ("PG", "RS-seq"),
         ("PG", "RS-geo"), ("TIS", "RS-geo"))
REJECT_KEYS = ("transform/rej_seq_prod/frac_seqs_rejected",
               "transform/rej_seq_geo/frac_seqs_rejected")


def curve_figures(out_dir: str, curve: dict, arms: list, n_seeds: int) -> list[str]:
  """One training-curve figure per sampler (from `results.json`'s curves:
  `experiments.redraw`)."""
  figures = []
  for s in ORDER:
    names = [a for a in arms if a.startswith(s + " /")] + [a for a in arms if a == "on-policy PG"]
    if len(names) > 1:
      fig = f"curves_{s.replace('+', '_').lower()}.png"
      toy_grid.plot_curves(os.path.join(out_dir, fig), curve, names, PANELS,
                           f"Sampler {s}: reward and drift (mean ± std over {n_seeds} seeds)")
      figures.append(fig)
  return figures


def run(out_dir: str, quick: bool = False, seed: int = 0) -> dict:
  timer = common.Timer()
  arms, seeds, n_held = ARMS, [seed + s for s in SEEDS], 256
  if quick:  # smoke: stale-16 with geometric rejection, 1 seed, 3 batches
    arms = {k: dataclasses.replace(ARMS[k], steps=3, eval_every=100, prompts_per_step=4)
            for k in ("stale-16 / RS-geo",)}
    seeds, n_held = [seed], 32
  runs, sft_info = toy_grid.run_arms(out_dir, arms, seeds, n_held, quick)
  finals = toy_grid.final_evals(runs, EVAL_KEYS)
  curve = toy_grid.curves(runs)
  last = lambda arm, k, n=10: [float(sum(c[-n:]) / n) for c in curve[arm][k]]
  train_end = {arm: {k: toy_grid.mean_std(last(arm, k)) for k in
                     ("reward/csr", "mismatch/kl_q_p")} for arm in runs}
  rejected = {arm: {k: toy_grid.mean_std([_mean_over_run(r, k) for r in by_seed.values()])
                    for k in REJECT_KEYS if any(k in h for r in by_seed.values()
                                                for h in r["history"])}
              for arm, by_seed in runs.items()}
  pairs = [toy_grid.paired(runs, f"{s} / {a}", f"{s} / {b}", "sampled/csr")
           for s in ORDER for a, b in PAIRS if f"{s} / {a}" in runs and f"{s} / {b}" in runs]
  figures = []
  groups = [(f"sampler {s}", [a for a in runs if a.startswith(s + " /")] +
             [a for a in runs if a == "on-policy PG"]) for s in ORDER]
  groups = [(t, g) for t, g in groups if g]
  fig = "heldout_curves.png"
  toy_grid.plot_evals(os.path.join(out_dir, fig), runs, list(runs),
                      [("sampled/csr", "held-out CSR, sampled (%)")],
                      f"Held-out CSR of the trainer ({n_held} prompts), mean ± std over "
                      f"{len(seeds)} seeds", groups=groups)
  figures.append(fig)
  figures.append(toy_grid.final_figure(out_dir, finals, list(runs), len(seeds), n_held))
  figures += curve_figures(out_dir, curve, list(runs), len(seeds))
  with open(os.path.join(out_dir, "table.md"), "w") as f:
    f.write(_table(finals, train_end, rejected, pairs, seeds, n_held))
  res = {"study": STUDY, "config": {"seed": seed, "seeds": seeds, "quick": quick,
                                    "arms": {k: dataclasses.asdict(v) for k, v in arms.items()},
                                    "model": MODEL, "warm_start": SFT, "heldout_prompts": n_held,
                                    "heldout_seed": 7, "eval_samples_per_prompt": 4},
         "warm_start": sft_info, "final": finals, "train_last10": train_end,
         "rejected_mean_over_run": rejected, "paired": pairs, "curves": curve,
         "evals": {a: {s: r["evals"] for s, r in v.items()} for a, v in runs.items()},
         "run_runtime_s": {a: {s: r["runtime_s"] for s, r in v.items()} for a, v in runs.items()},
         "runs_runtime_total_s": sum(r["runtime_s"] for v in runs.values() for r in v.values()),
         "summary_only": bool(os.environ.get("TOY_GRID_CACHED_ONLY")),
         "figures": figures, "environment": common.environment(), "runtime_s": timer()}
  common.write_json(os.path.join(out_dir, "results.json"), res)
  return res


def _mean_over_run(run: dict, key: str) -> float:
  vals = [h[key] for h in run["history"] if isinstance(h.get(key), (int, float))]
  return float(sum(vals) / len(vals)) if vals else float("nan")


def _table(finals, train_end, rejected, pairs, seeds, n_held) -> str:
  n = len(seeds)
  out = (f"Mean ± std over {n} seeds, in %. Train reward and drift: mean of the last 10 "
         f"rollout batches; held-out ({n_held} prompts, 4 samples at T = 1, and greedy): the "
         "trainer policy at the last step. KL(q‖p): k3, nats/token (×1). Rejected: the "
         "fraction of responses a rejection removed, mean over the run.\n\n")
  rows = []
  for arm, f in finals.items():
    rej = rejected.get(arm, {})
    rows.append([arm, toy_grid.pm(train_end[arm]["reward/csr"]), toy_grid.pm(f["sampled/csr"]),
                 toy_grid.pm(f["sampled/aon"]), toy_grid.pm(f["greedy/csr"]),
                 toy_grid.pm(train_end[arm]["mismatch/kl_q_p"], scale=1.0, digits=4),
                 " / ".join(toy_grid.pm(v) for v in rej.values()) or "–"])
  out += common.md_table(["sampler / estimator", "train CSR", "held-out CSR", "held-out AON",
                          "held-out CSR (greedy)", "KL(q‖p)", "rejected"], rows)
  return out + toy_grid.paired_table(pairs)


if __name__ == "__main__":
  common.study_main(STUDY, run, __doc__)
