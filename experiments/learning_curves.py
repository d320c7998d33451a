"""Study 4: learning curves at CPU scale — GRPO, CoRT-GRPO, the 3 CoRT ablations, DAPO ± CoRT,
GSPO ± CoRT and REAL, several seeds, on the synthetic rubric language (`rubric_toy`) with a
tiny rljax Decoder warm-started on it (`toy_rl.warm_start`).

Every arm starts from the same warm start; seed s fixes the prompt stream and the sampler
keys, so arms with the same seed are paired. μ = 4 mini-batch updates per rollout batch (the
papers' multi-update PPO: the clip is active). The CoRT ramp is K = `RAMP` rollout batches,
and the runs go `STEPS` batches (twice the ramp). Held-out evaluation: 256 prompts never
trained on, 4 samples each at temperature 1 (fixed keys) and greedy.

    python -m experiments.learning_curves [--quick]
"""
from __future__ import annotations

import dataclasses
import os

from experiments import common, toy_grid
from experiments.toy_rl import RunSpec, SFT, MODEL

STUDY = "learning_curves"
STEPS, RAMP, SEEDS = 100, 40, (0, 1, 2)
BASE = RunSpec(steps=STEPS, prompts_per_step=16, num_generations=8, lr=1e-3, epochs=1,
               num_minibatches=4, eval_every=10)
CORT = (("cort", (("ramp_steps", RAMP),)),)


def _cort(name: str, loss: str = "grpo", **kw) -> RunSpec:
  kwargs = () if name in ("cort_no_ramp", "cort_no_norm_no_ramp") else \
      ((name, (("ramp_steps", RAMP),)),)
  return dataclasses.replace(BASE, loss=loss, transforms=(name,), transform_kwargs=kwargs, **kw)


ARMS = {
    "GRPO": BASE,
    "CoRT-GRPO": _cort("cort"),
    "CoRT w/o norm": _cort("cort_no_norm"),
    "CoRT w/o ramp": _cort("cort_no_ramp"),
    "CoRT w/o both": _cort("cort_no_norm_no_ramp"),
    "DAPO": dataclasses.replace(BASE, loss="dapo", dynamic_sampling=True),
    "CoRT-DAPO": _cort("cort", loss="dapo", dynamic_sampling=True),
    # GSPO's sequence ratio cancels any per-response-mean-1 weight; CoRT needs GSPO-token
    # (same value and, with uniform weights, the same gradient as GSPO)
    "GSPO": dataclasses.replace(BASE, loss="gspo"),
    "CoRT-GSPO": _cort("cort", loss="gspo_token"),
    "REAL": dataclasses.replace(BASE, loss="real", advantage_kwargs=(("scale_rewards", "none"),)),
}
PAIRS = [("GRPO", "CoRT-GRPO"), ("DAPO", "CoRT-DAPO"), ("GSPO", "CoRT-GSPO"),
         ("CoRT-GRPO", "CoRT w/o norm"), ("CoRT-GRPO", "CoRT w/o ramp"),
         ("CoRT-GRPO", "CoRT w/o both"), ("GRPO", "REAL")]
EVAL_KEYS = [f"{m}/{k}" for m in ("sampled", "greedy")
             for k in ("csr", "aon", "instruction_acc")]
FINAL_KEYS = [("sampled/csr", "held-out CSR, sampled (%)"),
              ("sampled/aon", "held-out AON, sampled (%)"),
              ("greedy/csr", "held-out CSR, greedy (%)")]
FIG3 = [("actor/grad_norm", "actor grad norm (global L2)"),
        ("loss/ppo/clip_frac", "PPO clip ratio (fraction of tokens)"),
        ("response/length_clip_ratio", "length clip ratio (fraction of responses)"),
        ("transform/cort/weight_mean", "mean token weight w"),
        ("actor/entropy", "actor entropy (nats/token)"),
        ("reward/csr", "train reward CSR (fraction)")]


def curve_figures(out_dir: str, curve: dict, names: list, n_seeds: int) -> list[str]:
  """The training-curve figures (from `results.json`'s curves: `experiments.redraw`)."""
  figures = ["fig3_cort_ablations.png", "fig3_objectives.png"]
  abl = [a for a in ("GRPO", "CoRT-GRPO", "CoRT w/o norm", "CoRT w/o ramp", "CoRT w/o both")
         if a in names]
  objs = [a for a in names if a not in abl[2:]]
  toy_grid.plot_curves(os.path.join(out_dir, figures[0]), curve, abl, FIG3,
                       f"CoRT ablations (Figure 3 analogue; mean ± std over {n_seeds} seeds, "
                       f"ramp K = {RAMP} batches)", order=names)
  toy_grid.plot_curves(os.path.join(out_dir, figures[1]), curve, objs, FIG3,
                       f"Objectives ± CoRT (mean ± std over {n_seeds} seeds)", order=names)
  return figures


def run(out_dir: str, quick: bool = False, seed: int = 0) -> dict:
  timer = common.Timer()
  arms, seeds, n_held = ARMS, [seed + s for s in SEEDS], 256
  if quick:  # smoke: CoRT-GRPO (the fused replay step), 1 seed, 3 batches, 32 held-out prompts
    arms = {"CoRT-GRPO": dataclasses.replace(ARMS["CoRT-GRPO"], steps=3, eval_every=100,
                                             prompts_per_step=4, num_minibatches=1)}
    seeds, n_held = [seed], 32
  runs, sft_info = toy_grid.run_arms(out_dir, arms, seeds, n_held, quick)
  finals = toy_grid.final_evals(runs, EVAL_KEYS)
  aucs = toy_grid.final_evals(runs, EVAL_KEYS, auc=True)
  per_criterion = toy_grid.final_evals(runs, [f"{m}/acc/{t}" for m in ("sampled", "greedy")
                                              for t in ("start", "end", "contain", "exclude")])
  pairs = [toy_grid.paired(runs, a, b, k, auc) for a, b in PAIRS if a in runs and b in runs
           for k in EVAL_KEYS[:3] for auc in (False, True)]
  init_eval = {k: v for k, v in next(iter(next(iter(runs.values())).values()))["evals"][0].items()}
  curve = toy_grid.curves(runs)
  names = list(runs)
  figures = curve_figures(out_dir, curve, names, len(seeds)) + ["heldout_curves.png"]
  toy_grid.plot_evals(os.path.join(out_dir, figures[2]), runs, names,
                      [("sampled/csr", "held-out CSR, sampled (%)"),
                       ("sampled/aon", "held-out AON = prompt acc., sampled (%)"),
                       ("greedy/csr", "held-out CSR, greedy (%)")],
                      f"Held-out metrics ({n_held} prompts), mean ± std over {len(seeds)} seeds")
  figures.append(toy_grid.final_figure(out_dir, finals, names, len(seeds), n_held, FINAL_KEYS))
  panels = toy_grid.curve_summary(curve, [k for k, _ in FIG3])
  table = _table(finals, aucs, pairs, init_eval, seeds, n_held) + _panel_table(panels)
  with open(os.path.join(out_dir, "table.md"), "w") as f:
    f.write(table)
  res = {"study": STUDY, "config": {"seed": seed, "seeds": seeds, "quick": quick,
                                    "arms": {k: dataclasses.asdict(v) for k, v in arms.items()},
                                    "model": MODEL, "warm_start": SFT, "heldout_prompts": n_held,
                                    "heldout_seed": 7, "eval_samples_per_prompt": 4},
         "warm_start": sft_info, "initial_eval": init_eval, "final": finals, "auc": aucs,
         "final_per_criterion": per_criterion,
         "paired": pairs, "panel_summary": panels,
         "curves": curve,
         "evals": {a: {s: r["evals"] for s, r in v.items()} for a, v in runs.items()},
         "run_runtime_s": {a: {s: r["runtime_s"] for s, r in v.items()}
                                            for a, v in runs.items()},
         "runs_runtime_total_s": sum(r["runtime_s"] for v in runs.values() for r in v.values()),
         "summary_only": bool(os.environ.get("TOY_GRID_CACHED_ONLY")),
         "figures": figures, "environment": common.environment(), "runtime_s": timer()}
  common.write_json(os.path.join(out_dir, "results.json"), res)
  return res


def _table(finals, aucs, pairs, init_eval, seeds, n_held) -> str:
  n = len(seeds)
  head = (f"Held-out ({n_held} prompts; sampled = 4 samples per prompt at T = 1), last "
          f"evaluation, mean ± std over {n} seeds, in %. Warm start (step 0): sampled CSR "
          f"{init_eval['sampled/csr'] * 100:.1f}, AON {init_eval['sampled/aon'] * 100:.1f}, "
          f"instruction acc. {init_eval['sampled/instruction_acc'] * 100:.1f}; greedy CSR "
          f"{init_eval['greedy/csr'] * 100:.1f}.\n\n")
  rows = [[arm] + [toy_grid.pm(f[k]) for k in EVAL_KEYS] + [toy_grid.pm(aucs[arm][k])
                                                             for k in EVAL_KEYS[:2]]
          for arm, f in finals.items()]
  out = head + common.md_table(["arm", "CSR (sampled)", "AON / prompt acc. (sampled)",
                                "instruction acc. (sampled)", "CSR (greedy)", "AON (greedy)",
                                "instruction acc. (greedy)", "CSR AUC (sampled)",
                                "AON AUC (sampled)"], rows)
  out += ("\nAUC = the mean of the held-out metric over every evaluation (steps 0, 10, ..., "
          "100): the area under the learning curve per step, which separates arms before the "
          "final metrics saturate.\n")
  out += ("\nPaired differences (variant − base, same seed), percentage points: mean ± std "
          "over seeds, wins / losses.\n\n")
  prow = [[p["variant"], p["base"], p["metric"],
           f"{p['mean'] * 100:+.1f} ± {p['std'] * 100:.1f}", f"{p['wins']} / {p['losses']}"]
          for p in pairs]
  return out + common.md_table(["variant", "base", "metric", "Δ (pp)", "wins / losses"], prow)


def _panel_table(panels) -> str:
  """The Figure 3 panels in numbers: last-10-step mean and peak, mean ± std over seeds."""
  keys = [k for k, _ in FIG3]
  cell = lambda p, k, f: (f"{p[k]['last']['mean']:{f}} / {p[k]['peak']['mean']:{f}}"
                          if k in p else "-")
  fmt = {"actor/grad_norm": ".2f", "loss/ppo/clip_frac": ".3f",
         "response/length_clip_ratio": ".3f", "transform/cort/weight_mean": ".3f",
         "actor/entropy": ".2f", "reward/csr": ".3f"}
  rows = [[arm] + [cell(p, k, fmt[k]) for k in keys] for arm, p in panels.items()]
  return ("\nFigure 3 panels in numbers: mean of the last 10 steps / peak over the run "
          "(each the mean over seeds; std in results.json `panel_summary`).\n\n"
          + common.md_table(["arm", "grad norm", "PPO clip ratio", "length clip ratio",
                             "mean token weight", "entropy (nats)", "train CSR"], rows))


if __name__ == "__main__":
  common.study_main(STUDY, run, __doc__)
