"""Study 5: training stability under a training–inference mismatch — naive PG, TIS, SC, TIS+SC
and BPO with a W8A8 + int4-KV sampler and with stale samplers (re-synced every `STALE`, 16
or 64 updates), several seeds, on the synthetic rubric language (`rubric_toy`) with the tiny
warm-started Decoder of study 4.

As in the SC paper's main comparison: the same group-centered REINFORCE objective
(advantage r − mean_group, no std), one optimizer update per rollout batch, only the
correction rule changes. The sampler is a rollout copy of the trainer
(`rljax.rollout.SamplerSync`): re-quantized at every sync (W8A8 + int4 KV, synced every
update) or an exact copy held for `STALE` (or 16, 64) updates. The sampler records its whole q (the
vocabulary is 96 tokens), which exact SC needs. An on-policy PG run (sampler = trainer) is
the reference. Reported: train reward, held-out CSR / AON of the trainer policy, and the
sampler–trainer drift KL(q‖p) on the sampled tokens.

    python -m experiments.mismatch_training [--quick]
"""
from __future__ import annotations

import dataclasses
import os

from experiments import common, toy_grid
from experiments.toy_rl import RunSpec, SFT, MODEL

STUDY = "mismatch_training"
STEPS, STALE, SEEDS = 60, 4, (0, 1, 2)
BASE = RunSpec(advantage="dr_grpo", loss="pg", steps=STEPS, prompts_per_step=16,
               num_generations=8, lr=1e-3, eval_every=10)
ESTIMATORS = {
    "PG": dict(),
    "TIS": dict(transforms=("tis",)),
    "SC": dict(loss="sc", record_topk=-1),
    "TIS+SC": dict(loss="sc_tis", record_topk=-1),
    "BPO": dict(transforms=("bpo",)),
}
SAMPLERS = {"W8A8+KV4": dict(copy="w8a8+kv4", sync_every=1),
            f"stale-{STALE}": dict(copy="none", sync_every=STALE),
            # added after the first two showed no effect: staler samplers; with 60 batches
            # stale-64 is the warm start itself, never re-synced (the SC paper's sync period)
            "stale-16": dict(copy="none", sync_every=16),
            "stale-64": dict(copy="none", sync_every=64)}
ARMS = {"on-policy PG": BASE}
ARMS.update({f"{s} / {e}": dataclasses.replace(BASE, **sk, **ek)
             for s, sk in SAMPLERS.items() for e, ek in ESTIMATORS.items()})
EVAL_KEYS = ["sampled/csr", "sampled/aon", "sampled/instruction_acc", "greedy/csr"]
PANELS = [("reward/csr", "train reward CSR (fraction)"),
          ("mismatch/kl_q_p", "drift KL(q‖p) on sampled tokens (nats/token)"),
          ("mismatch/abs_log_ratio_mean", "mean |log p/q| (nats)"),
          ("actor/grad_norm", "actor grad norm (global L2)"),
          ("actor/entropy", "actor entropy (nats/token)"),
          ("response/length_mean", "response length (tokens)")]


def curve_figures(out_dir: str, curve: dict, arms: list, n_seeds: int) -> list[str]:
  """One training-curve figure per sampler (from `results.json`'s curves:
  `experiments.redraw`)."""
  figures = []
  for s in SAMPLERS:
    names = [a for a in arms if a.startswith(s)] + [a for a in arms if a == "on-policy PG"]
    if not names:
      continue
    fig = f"curves_{s.replace('+', '_').lower()}.png"
    toy_grid.plot_curves(os.path.join(out_dir, fig), curve, names, PANELS,
                         f"Sampler {s}: reward and drift (mean ± std over {n_seeds} seeds)")
    figures.append(fig)
  return figures


def run(out_dir: str, quick: bool = False, seed: int = 0) -> dict:
  timer = common.Timer()
  arms, seeds, n_held = ARMS, [seed + s for s in SEEDS], 256
  if quick:  # smoke: the quantized sampler with exact SC (full recorded q), 1 seed, 3 batches
    arms = {k: dataclasses.replace(ARMS[k], steps=3, eval_every=100, prompts_per_step=4)
            for k in ("W8A8+KV4 / SC",)}
    seeds, n_held = [seed], 32
  runs, sft_info = toy_grid.run_arms(out_dir, arms, seeds, n_held, quick)
  finals = toy_grid.final_evals(runs, EVAL_KEYS)
  curve = toy_grid.curves(runs)
  last = lambda arm, k, n=10: [float(sum(c[-n:]) / n) for c in curve[arm][k]]
  train_end = {arm: {k: toy_grid.mean_std(last(arm, k)) for k in
                     ("reward/csr", "reward/aon", "mismatch/kl_q_p")} for arm in runs}
  pairs = [toy_grid.paired(runs, f"{s} / {a}", f"{s} / {b}", "sampled/csr")
           for s in SAMPLERS for a, b in (("PG", "SC"), ("TIS", "SC"), ("TIS", "TIS+SC"),
                                          ("SC", "TIS+SC"), ("PG", "BPO"))
           if f"{s} / {a}" in runs and f"{s} / {b}" in runs]
  figures = curve_figures(out_dir, curve, list(runs), len(seeds))
  fig = "heldout_curves.png"
  groups = [(f"sampler {s}", [a for a in runs if a.startswith(s + " /")] +
             [a for a in runs if a == "on-policy PG"]) for s in SAMPLERS]
  groups = [(t, g) for t, g in groups if g]
  toy_grid.plot_evals(os.path.join(out_dir, fig), runs, list(runs),
                      [("sampled/csr", "held-out CSR, sampled (%)")],
                      f"Held-out CSR of the trainer ({n_held} prompts), mean ± std over "
                      f"{len(seeds)} seeds", groups=groups)
  figures.append(fig)
  figures.append(toy_grid.final_figure(out_dir, finals, list(runs), len(seeds), n_held))
  with open(os.path.join(out_dir, "table.md"), "w") as f:
    f.write(_table(finals, train_end, pairs, seeds, n_held))
  res = {"study": STUDY, "config": {"seed": seed, "seeds": seeds, "quick": quick,
                                    "arms": {k: dataclasses.asdict(v) for k, v in arms.items()},
                                    "model": MODEL, "warm_start": SFT, "heldout_prompts": n_held,
                                    "heldout_seed": 7, "eval_samples_per_prompt": 4},
         "warm_start": sft_info, "final": finals, "train_last10": train_end, "paired": pairs,
         "curves": curve,
         "evals": {a: {s: r["evals"] for s, r in v.items()} for a, v in runs.items()},
         "run_runtime_s": {a: {s: r["runtime_s"] for s, r in v.items()}
                                            for a, v in runs.items()},
         "runs_runtime_total_s": sum(r["runtime_s"] for v in runs.values() for r in v.values()),
         "summary_only": bool(os.environ.get("TOY_GRID_CACHED_ONLY")),
         "figures": figures, "environment": common.environment(), "runtime_s": timer()}
  common.write_json(os.path.join(out_dir, "results.json"), res)
  return res


def _table(finals, train_end, pairs, seeds, n_held) -> str:
  n = len(seeds)
  out = (f"Mean ± std over {n} seeds, in %. Train reward and drift: mean of the last 10 "
         f"rollout batches; held-out ({n_held} prompts, 4 samples at T = 1, and greedy): the "
         "trainer policy at the last step. KL(q‖p): sampler vs trainer on the sampled tokens "
         "(k3, nats/token, ×1 — not in %).\n\n")
  rows = [[arm, toy_grid.pm(train_end[arm]["reward/csr"]), toy_grid.pm(train_end[arm]["reward/aon"]),
           toy_grid.pm(f["sampled/csr"]), toy_grid.pm(f["sampled/aon"]), toy_grid.pm(f["greedy/csr"]),
           toy_grid.pm(train_end[arm]["mismatch/kl_q_p"], scale=1.0, digits=4)]
          for arm, f in finals.items()]
  out += common.md_table(["sampler / estimator", "train CSR", "train AON", "held-out CSR",
                          "held-out AON", "held-out CSR (greedy)", "KL(q‖p)"], rows)
  return out + toy_grid.paired_table(pairs)


if __name__ == "__main__":
  common.study_main(STUDY, run, __doc__)
