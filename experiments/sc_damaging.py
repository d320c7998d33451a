"""Study 5c: Score Centering under a sampler that hurts — the rollout copy chosen by its
measured drift, then PG / TIS / SC / TIS + SC / MIS + SC, on the rubric toy of study 5.

Study 5's W8A8 + int4-KV copy of the toy drifts by KL(q‖p) ≈ 0.015 nats/token, ≈ 40× less
than the same copy of SmolLM2, so naive PG barely suffered there. Here the copy is chosen
*before any training run* by its measured drift on the warm start: every candidate below is
sampled on 64 train prompts × 8 and scored by the trainer; the KL(q‖p) estimate is the mean
of log q − log p over the sampled tokens (and the k3 form beside it). The rule, fixed in
advance: the candidate whose drift is closest (in log) to 0.25 nats/token, the geometric
middle of the 0.1–0.6 band that SmolLM2's quantized copy falls in (0.64).

Training runs as in study 5: group-centered REINFORCE (dr_grpo advantage), one update per
rollout batch, 60 batches, the sampler re-built from the trainer at every update (the noise
copies draw new noise at every sync); the sampler records its whole q (96 tokens), which
exact SC reads. Arms: on-policy PG (the reference), and under the chosen copy PG, TIS, SC,
TIS + SC and MIS + SC.

Design, fixed before the runs: the SC paper's headline is SC > TIS in train accuracy under
an int8 W/A + int4-KV sampler (≈ 30 % vs ≈ 12 %: +18 pp). Study 5's spread of paired
last-10-batch train CSR (sd ≈ 2 pp) gives an MDE of ≈ 2.6 pp with 6 paired seeds; the MDE
at the spread measured here is reported beside each verdict.

    python -m experiments.sc_damaging [--quick] [--workers K --worker I]  # I of K: a share
    TOY_GRID_CACHED_ONLY=1 python -m experiments.sc_damaging           # tables of what ran
"""
from __future__ import annotations

import dataclasses
import math
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from experiments import common, stats, toy_grid, toy_rl
from experiments import rubric_toy as toy
from experiments.toy_rl import RunSpec, MODEL, SFT
from rljax.rollout import SamplerSync
from rljax.scoring import response_outputs
from rljax.train_step import StepConfig

STUDY = "sc_damaging"
STEPS, SEEDS = 60, tuple(range(6))
CANDIDATES = ("w8a8+kv4", "int4", "int4+kv4", "noise0.05", "noise0.1", "noise0.2", "noise0.3",
              "noise0.4")
TARGET_KL = 0.25
BASE = RunSpec(advantage="dr_grpo", loss="pg", steps=STEPS, prompts_per_step=16,
               num_generations=8, lr=1e-3, eval_every=10)
ESTIMATORS = {"PG": dict(), "TIS": dict(transforms=("tis",)),
              "SC": dict(loss="sc", record_topk=-1), "TIS+SC": dict(loss="sc_tis", record_topk=-1),
              "MIS+SC": dict(loss="sc_mis", record_topk=-1)}
# (claim, base, variant, claimed effect of variant − base in pp; sized: the paper states
# its size, else only its sign)
CLAIMS = [("mismatch hurts naive PG", "on-policy PG", "PG", -1.0, False),
          ("SC beats TIS (SC paper: ≈ 30 % vs ≈ 12 % train accuracy, +18)", "TIS", "SC", 18.0,
           True),
          ("SC beats naive PG", "PG", "SC", 1.0, False),
          ("TIS + SC beats SC", "SC", "TIS+SC", 1.0, False),
          ("MIS + SC beats SC", "SC", "MIS+SC", 1.0, False),
          ("the sampler still costs SC (its gap to on-policy PG; no paper claim)",
           "on-policy PG", "SC", -1.0, False)]
EVAL_KEYS = ["sampled/csr", "sampled/aon", "greedy/csr"]
PANELS = [("reward/csr", "train reward CSR (fraction)"),
          ("mismatch/kl_q_p", "drift KL(q‖p) on sampled tokens (k3, nats/token)"),
          ("actor/grad_norm", "actor grad norm (global L2)"),
          ("actor/entropy", "actor entropy (nats/token)")]


def copy_drift(copy: str, graphdef, params, n_prompts: int = 64, seed: int = 0) -> dict:
  """KL(q‖p) of a rollout copy of `params` on train prompts: mean of log q − log p (k1) and
  of the k3 form over the sampled tokens, and the mean |log p/q|."""
  rng = np.random.default_rng(seed)
  prompts = toy.prompts(rng, n_prompts, heldout=False)
  spec = dataclasses.replace(BASE, copy=copy)
  sampler = SamplerSync(copy, every=1).params(0, nnx.merge(graphdef, params))
  roll = toy_rl._rollout(sampler, prompts, jax.random.key(seed), toy_rl._sampler_cfg(spec),
                         False)
  r = roll.r
  g = spec.num_generations
  ids = np.concatenate([np.repeat(roll.prompts.plus_ids, g, 0), r.tokens_BxN], 1)
  mask = np.concatenate([np.repeat(roll.prompts.plus_mask, g, 0), r.mask_BxN], 1)
  sc = StepConfig(objective=None, response_len=toy_rl.N_NEW)
  logp = np.asarray(jax.jit(lambda p, i, m: response_outputs(
      graphdef, p, i, m, toy_rl.N_NEW, sc)["logp_BxT"])(params, ids, mask))
  m = np.asarray(r.mask_BxN) > 0
  lr = (logp - np.asarray(r.logq_BxN))[m]  # log p/q on the sampled tokens
  return {"copy": copy, "kl_k1": float(np.mean(-lr)), "kl_k3": float(np.mean(np.expm1(lr) - lr)),
          "abs_log_ratio": float(np.mean(np.abs(lr))), "tokens": int(m.sum()),
          "sampled_csr": float(roll.info["csr"].mean())}


def choose(drifts: list[dict]) -> dict:
  """The candidate whose k1 drift is closest in log to TARGET_KL."""
  ok = [d for d in drifts if d["kl_k1"] > 0]
  return min(ok, key=lambda d: abs(math.log(d["kl_k1"] / TARGET_KL)))


def arms_for(copy: str) -> dict:
  arms = {"on-policy PG": BASE}
  arms.update({e: dataclasses.replace(BASE, copy=copy, sync_every=1, **kw)
               for e, kw in ESTIMATORS.items()})
  return arms


def run(out_dir: str, quick: bool = False, seed: int = 0, workers: int = 1,
        worker: int = 0) -> dict:
  timer = common.Timer()
  graphdef, params, sft_info = toy_grid.warm_start(quick)
  cands = CANDIDATES[:2] if quick else CANDIDATES
  drifts = [copy_drift(c, graphdef, params, n_prompts=16 if quick else 64) for c in cands]
  chosen = choose(drifts)
  arms, seeds, n_held = arms_for(chosen["copy"]), [seed + s for s in SEEDS], 256
  if quick:  # smoke: exact SC under the chosen copy, 1 seed, 3 batches
    arms = {"SC": dataclasses.replace(arms["SC"], steps=3, eval_every=100, prompts_per_step=4)}
    seeds, n_held = [seed], 32
  held = toy_grid.heldout(n_held)
  runs = toy_grid.sweep(out_dir, arms, seeds, graphdef, params, held, workers, worker)
  if runs is None:  # a worker runs its share only; the summary reads every finished run
    return {"runtime_s": timer()}
  return summarize(out_dir, runs, arms, seeds, n_held, sft_info, drifts, chosen, quick, seed,
                   timer)


def summarize(out_dir, runs, arms, seeds, n_held, sft_info, drifts, chosen, quick, seed, timer):
  finals = toy_grid.final_evals(runs, EVAL_KEYS)
  curve = toy_grid.curves(runs)
  train_end = {arm: {k: toy_grid.mean_std(list(toy_grid.last10(runs, arm, k).values()))
                     for k in ("reward/csr", "reward/aon", "mismatch/kl_q_p")} for arm in runs}
  rows = toy_grid.claim_rows(runs, CLAIMS)
  figures = ["curves.png", "heldout_curves.png"]
  n = len(next(iter(runs.values())))
  toy_grid.plot_curves(os.path.join(out_dir, figures[0]), curve, list(runs), PANELS,
                       f"Sampler {chosen['copy']} (KL {chosen['kl_k1']:.2f} nats/token at the "
                       f"warm start): mean ± std over {n} seeds")
  toy_grid.plot_evals(os.path.join(out_dir, figures[1]), runs, list(runs),
                      [("sampled/csr", "held-out CSR, sampled (%)")],
                      f"Held-out CSR of the trainer ({n_held} prompts), mean ± std over {n} seeds")
  with open(os.path.join(out_dir, "table.md"), "w") as f:
    f.write(_table(drifts, chosen, finals, train_end, rows, n, n_held))
  res = {"study": STUDY, "config": {"seed": seed, "seeds": list(seeds), "quick": quick,
                                    "candidates": list(CANDIDATES), "target_kl": TARGET_KL,
                                    "arms": {k: dataclasses.asdict(v) for k, v in arms.items()},
                                    "model": MODEL, "warm_start": SFT, "heldout_prompts": n_held},
         "drift": drifts, "chosen": chosen, "warm_start": sft_info, "final": finals,
         "train_last10": train_end, "verdicts": rows, "curves": curve,
         "evals": {a: {s: r["evals"] for s, r in v.items()} for a, v in runs.items()},
         "run_runtime_s": {a: {s: r["runtime_s"] for s, r in v.items()} for a, v in runs.items()},
         "runs_runtime_total_s": sum(r["runtime_s"] for v in runs.values() for r in v.values()),
         "figures": figures, "environment": common.environment(), "runtime_s": timer()}
  common.write_json(os.path.join(out_dir, "results.json"), res)
  return res


def _table(drifts, chosen, finals, train_end, rows, n, n_held) -> str:
  out = ("Drift of each candidate rollout copy of the warm start (64 train prompts × 8, "
         "nats/token); the chosen copy is marked.\n\n")
  out += common.md_table(["copy", "KL(q‖p) (k1)", "KL (k3)", "mean |log p/q|",
                          "train CSR of its samples"],
                         [[("**" + d["copy"] + "**") if d is chosen else d["copy"],
                           f"{d['kl_k1']:.3f}", f"{d['kl_k3']:.3f}", f"{d['abs_log_ratio']:.3f}",
                           f"{d['sampled_csr']:.3f}"] for d in drifts])
  out += (f"\nTraining under {chosen['copy']}: mean ± std (ddof = 1) over {n} seeds, %. Train "
          "CSR and drift: the mean of the last 10 rollout batches; held-out: the trainer at the "
          f"last step ({n_held} prompts, 4 samples at T = 1, and greedy).\n\n")
  out += common.md_table(
      ["arm", "train CSR", "train AON", "held-out CSR", "held-out AON", "held-out CSR (greedy)",
       "KL(q‖p) k3"],
      [[a, toy_grid.pm(train_end[a]["reward/csr"]), toy_grid.pm(train_end[a]["reward/aon"]),
        toy_grid.pm(f["sampled/csr"]), toy_grid.pm(f["sampled/aon"]), toy_grid.pm(f["greedy/csr"]),
        toy_grid.pm(train_end[a]["mismatch/kl_q_p"], scale=1.0, digits=3)]
       for a, f in finals.items()])
  return out + stats.verdict_table(rows)


if __name__ == "__main__":
  common.sweep_main(STUDY, run, __doc__, sys.argv[1:])
