"""Study 5d: a stale sampler in the asynchronous loop — naive PG, TIS, SC, TIS + SC and
MIS + SC when every rollout batch comes from the policy k updates behind, on the rubric toy
of study 5.

Study 5's stale samplers are re-synced every N updates, so a batch lags the learner by 0 to
N − 1 updates. Here the batches come from `rljax.loop.RolloutPipeline(lag=k, overlap=True)`,
the class behind the trainer's disaggregated placement (`rollout.max_staleness = k`): at
step t a sampler thread launches batch t + k with the current policy (version t) while the
learner trains on batch t, drawn k steps earlier. Every batch after the first k is exactly
k versions old; the first k + 1 come from the warm start. Lags: 4 (a pod's asynchronous
setting is 1–2) and 16 (study 5's stale-16 averages 7.5).

Training as in study 5: group-centered REINFORCE (dr_grpo advantage), one update per
rollout batch, 60 batches of 16 prompts × 8, lr 1e-3, the sampler's whole q recorded (exact
SC). Arms: on-policy PG (lag 0, the reference) and, at each lag, PG, TIS, SC, TIS + SC and
MIS + SC.

Design, fixed before the runs: the SC paper's staleness claim (a sampler synced every 64
steps: SC combined with TIS or MIS beats SC alone) states no size, so it can reproduce or be
contradicted, and a null result is "not testable at this power". 6 paired seeds: study
5c's sd of paired differences (1.3–3.4 pp) gives an MDE of 1.9–4.9 pp at n = 6.

    python -m experiments.async_staleness [--quick] [--workers K --worker I]
    TOY_GRID_CACHED_ONLY=1 python -m experiments.async_staleness      # tables of what ran
"""
from __future__ import annotations

import dataclasses
import os
import sys

from experiments import common, stats, toy_grid
from experiments.toy_rl import RunSpec, MODEL, SFT

STUDY = "async_staleness"
STEPS, SEEDS, LAGS = 60, tuple(range(6)), (4, 16)
BASE = RunSpec(advantage="dr_grpo", loss="pg", steps=STEPS, prompts_per_step=16,
               num_generations=8, lr=1e-3, eval_every=10)
ESTIMATORS = {"PG": dict(), "TIS": dict(transforms=("tis",)),
              "SC": dict(loss="sc", record_topk=-1), "TIS+SC": dict(loss="sc_tis", record_topk=-1),
              "MIS+SC": dict(loss="sc_mis", record_topk=-1)}
ARMS = {"on-policy PG": BASE}
ARMS.update({f"lag {k} / {e}": dataclasses.replace(BASE, async_lag=k, **kw)
             for k in LAGS for e, kw in ESTIMATORS.items()})
# (claim, base, variant, claimed effect of variant − base in pp, sized): directions only
CLAIMS = [c for k in LAGS for c in (
    (f"staleness hurts naive PG (lag {k})", "on-policy PG", f"lag {k} / PG", -1.0, False),
    (f"SC trains better than naive PG (lag {k})", f"lag {k} / PG", f"lag {k} / SC", 1.0, False),
    (f"TIS + SC beats SC (lag {k}; the paper: synced every 64)", f"lag {k} / SC",
     f"lag {k} / TIS+SC", 1.0, False),
    (f"MIS + SC beats SC (lag {k}; the paper: synced every 64)", f"lag {k} / SC",
     f"lag {k} / MIS+SC", 1.0, False))]
EVAL_KEYS = ["sampled/csr", "sampled/aon", "greedy/csr"]
PANELS = [("reward/csr", "train reward CSR (fraction)"),
          ("mismatch/kl_q_p", "drift KL(q‖p) on sampled tokens (k3, nats/token)"),
          ("actor/grad_norm", "actor grad norm (global L2)"),
          ("actor/entropy", "actor entropy (nats/token)")]


def run(out_dir: str, quick: bool = False, seed: int = 0, workers: int = 1,
        worker: int = 0) -> dict:
  timer = common.Timer()
  graphdef, params, sft_info = toy_grid.warm_start(quick)
  arms, seeds, n_held = ARMS, [seed + s for s in SEEDS], 256
  if quick:  # smoke: exact SC at lag 2 through the threaded pipeline, 1 seed, 4 batches
    arms = {"lag 2 / SC": dataclasses.replace(ARMS[f"lag {LAGS[0]} / SC"], async_lag=2,
                                              steps=4, eval_every=100, prompts_per_step=4)}
    seeds, n_held = [seed], 32
  held = toy_grid.heldout(n_held)
  runs = toy_grid.sweep(out_dir, arms, seeds, graphdef, params, held, workers, worker)
  if runs is None:  # a worker runs its share only; the summary reads every finished run
    return {"runtime_s": timer()}
  return summarize(out_dir, runs, arms, seeds, n_held, sft_info, quick, seed, timer)


def summarize(out_dir, runs, arms, seeds, n_held, sft_info, quick, seed, timer) -> dict:
  finals = toy_grid.final_evals(runs, EVAL_KEYS)
  curve = toy_grid.curves(runs)
  train_end = {arm: {k: toy_grid.mean_std(list(toy_grid.last10(runs, arm, k).values()))
                     for k in ("reward/csr", "reward/aon", "mismatch/kl_q_p", "rollout/lag")}
               for arm in runs}
  rows = toy_grid.claim_rows(runs, CLAIMS)
  n = len(next(iter(runs.values())))
  figures = []
  for k in sorted({a.async_lag for a in arms.values()} - {0}):
    names = [a for a in runs if a.startswith(f"lag {k} /")] + \
        [a for a in runs if a == "on-policy PG"]
    figures.append(f"curves_lag{k}.png")
    toy_grid.plot_curves(os.path.join(out_dir, figures[-1]), curve, names, PANELS,
                         f"Asynchronous loop, lag {k}: reward and drift (mean ± std over "
                         f"{n} seeds)")
  figures.append("heldout_curves.png")
  toy_grid.plot_evals(os.path.join(out_dir, figures[-1]), runs, list(runs),
                      [("sampled/csr", "held-out CSR, sampled (%)")],
                      f"Held-out CSR of the trainer ({n_held} prompts), mean ± std over {n} "
                      "seeds")
  with open(os.path.join(out_dir, "table.md"), "w") as f:
    f.write(_table(finals, train_end, rows, n, n_held))
  res = {"study": STUDY, "config": {"seed": seed, "seeds": list(seeds), "quick": quick,
                                    "lags": list(LAGS),
                                    "arms": {k: dataclasses.asdict(v) for k, v in arms.items()},
                                    "model": MODEL, "warm_start": SFT, "heldout_prompts": n_held},
         "warm_start": sft_info, "final": finals, "train_last10": train_end, "verdicts": rows,
         "curves": curve, "evals": {a: {s: r["evals"] for s, r in v.items()}
                                    for a, v in runs.items()},
         "run_runtime_s": {a: {s: r["runtime_s"] for s, r in v.items()} for a, v in runs.items()},
         "runs_runtime_total_s": sum(r["runtime_s"] for v in runs.values() for r in v.values()),
         "figures": figures, "environment": common.environment(), "runtime_s": timer()}
  common.write_json(os.path.join(out_dir, "results.json"), res)
  return res


def _table(finals, train_end, rows, n, n_held) -> str:
  out = (f"Training through the asynchronous loop: mean ± std (ddof = 1) over {n} seeds, %. "
         "Train CSR, drift and lag: the mean of the last 10 rollout batches; held-out: the "
         f"trainer at the last step ({n_held} prompts, 4 samples at T = 1, and greedy).\n\n")
  out += common.md_table(
      ["arm", "train CSR", "train AON", "held-out CSR", "held-out AON", "held-out CSR (greedy)",
       "KL(q‖p) k3", "lag"],
      [[a, toy_grid.pm(train_end[a]["reward/csr"]), toy_grid.pm(train_end[a]["reward/aon"]),
        toy_grid.pm(f["sampled/csr"]), toy_grid.pm(f["sampled/aon"]), toy_grid.pm(f["greedy/csr"]),
        toy_grid.pm(train_end[a]["mismatch/kl_q_p"], scale=1.0, digits=3),
        f"{train_end[a]['rollout/lag']['mean']:.0f}"]
       for a, f in finals.items()])
  return out + stats.verdict_table(rows)


if __name__ == "__main__":
  common.sweep_main(STUDY, run, __doc__, sys.argv[1:])
