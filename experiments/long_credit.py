"""Study 4b: can token credit help at all, and does CoRT's find it? Long answers, an oracle arm.

The rubric toy of study 4 with answers of 40–56 content tokens (a warm start trained on
such answers), so that the tokens that decide a criterion are a few per cent of an answer,
as in an LLM's answers (`rubric_toy.credit_labels`: the first token for `start`, the last
content token and the `<eos>` after it for `end`, every occurrence of k for `contain k` /
`exclude k`). Arms, all GRPO with μ = 4 mini-batch updates per rollout batch:

  GRPO           no token credit
  CoRT-GRPO      CoRT's w̃ from the counterfactual replay (η = 0.5, τ = 1, ramp K = 40)
  CoRT strong    η = 1.5, τ = 0.25 (the dose-response: larger, sharper weights)
  Oracle x2      `oracle_credit`: the ground-truth decisive tokens weighted ×2 before the
                 per-response normalization, the same ramp (the upper bound of token credit)
  Oracle x4      ×4 (the dose-response of the oracle)

If the oracle does not beat GRPO, the toy cannot judge any token-credit method. Every step
logs where the credit went (`transform/credit/*`): the decisive tokens' share of the loss
tokens and of Σ|Â|, and the mean weight |Â|/|A| on them and on the rest.

The learning rate, 1e-4 (study 4 used 1e-3), was set by a pilot of GRPO alone on seed 0
(`results/long_credit/pilot/results.json`): at 1e-3 the answers ran to the length cap (clip
ratio 0.9) and held-out CSR never rose; at 3e-4 it rose by 3 pp, then fell back as the clip
ratio rose; at 1e-4 it rose by 3 pp and stayed. The only other run before the choice was
CoRT-GRPO at 1e-3 (seed 0), which collapsed the same way; it is in the pilot file.

Design, fixed before the runs: the primary metric is the held-out sampled CSR AUC (the mean
over the 11 evaluations, steps 0..100). At study 4's spread of its paired AUC difference
(sd 1.06 pp), 8 paired seeds give an MDE of 1.2 pp at α = 0.05 and 80 % power
(`experiments.stats.mde`); the MDE at the spread measured here is reported beside each
verdict. Seeds run seed-major (every arm of seed s before seed s + 1), so a stopped sweep
still holds paired seeds.

    python -m experiments.long_credit [--quick] [--workers K --worker I]  # I of K run a share
    TOY_GRID_CACHED_ONLY=1 python -m experiments.long_credit            # tables of what ran
"""
from __future__ import annotations

import dataclasses
import os
import sys

import numpy as np

from experiments import common, stats, toy_grid, toy_rl
from experiments.toy_rl import RunSpec, MODEL, SFT

STUDY = "long_credit"
STEPS, RAMP, SEEDS = 100, 40, tuple(range(8))
LENGTHS = dict(min_len=40, max_len=56)
BASE = RunSpec(steps=STEPS, prompts_per_step=16, num_generations=8, lr=1e-4, epochs=1,
               num_minibatches=4, eval_every=10, max_len=LENGTHS["max_len"], credit_labels=True)


def _with(name: str, **kw) -> RunSpec:
  return dataclasses.replace(BASE, transforms=(name,), transform_kwargs=(
      (name, tuple(sorted(dict(ramp_steps=RAMP, **kw).items()))),))


ARMS = {
    "GRPO": BASE,
    "CoRT-GRPO": _with("cort"),
    "CoRT strong": _with("cort", eta=1.5, tau=0.25),
    "Oracle x2": _with("oracle_credit", factor=2.0),
    "Oracle x4": _with("oracle_credit", factor=4.0),
}
# (claim, base, variant, claimed effect of variant − base in pp, sized: the paper states
# its size, else only its sign, note)
CLAIMS = [
    ("ground-truth token credit helps (the toy can judge token credit)", "GRPO", "Oracle x2",
     1.0, False, "validity check of the design"),
    ("CoRT-GRPO beats GRPO (CoRT: IFEval-I +1.27)", "GRPO", "CoRT-GRPO", 1.27, True, ""),
    ("stronger CoRT weights help more (dose-response)", "CoRT-GRPO", "CoRT strong", 1.0, False,
     ""),
    ("a stronger oracle helps more (dose-response)", "Oracle x2", "Oracle x4", 1.0, False, ""),
    ("CoRT falls short of the oracle (its gap to the upper bound; no paper claim)",
     "Oracle x2", "CoRT-GRPO", -1.0, False, "a measurement"),
]
METRICS = [("sampled/csr", True), ("sampled/csr", False), ("sampled/aon", True),
           ("sampled/aon", False), ("greedy/csr", False)]
CREDIT = ("transform/credit/label_token_frac", "transform/credit/label_adv_share",
          "transform/credit/label_weight", "transform/credit/other_weight",
          "transform/cort/weight_std", "transform/oracle/weight_max")
DESIGN_SD = 0.0106  # study 4's sd of the paired CSR AUC difference (GRPO vs CoRT-GRPO)


def warm_start(quick: bool):
  cache = os.path.join(common.RESULTS, "warm_start")
  if quick and not os.path.exists(toy_rl.warm_start_path(cache, **LENGTHS)):
    return toy_rl.warm_start(None, steps=40, **LENGTHS)
  return toy_rl.warm_start(cache, **LENGTHS)


def run(out_dir: str, quick: bool = False, seed: int = 0, workers: int = 1,
        worker: int = 0) -> dict:
  timer = common.Timer()
  arms, seeds, n_held = ARMS, [seed + s for s in SEEDS], 256
  if quick:  # smoke: the oracle and CoRT arms, 1 seed, 3 batches, 32 held-out prompts
    arms = {k: dataclasses.replace(ARMS[k], steps=3, eval_every=100, prompts_per_step=4,
                                   num_minibatches=1) for k in ("CoRT-GRPO", "Oracle x2")}
    seeds, n_held = [seed], 32
  graphdef, params, sft_info = warm_start(quick)
  held = toy_grid.heldout(n_held)
  runs = toy_grid.sweep(out_dir, arms, seeds, graphdef, params, held, workers, worker)
  if runs is None:  # a worker runs its share only; the summary reads every finished run
    return {"runtime_s": timer()}
  return summarize(out_dir, runs, arms, seeds, n_held, sft_info, quick, seed, timer)


def _stat(run: dict, key: str, auc: bool) -> float:
  return float(np.mean([e[key] for e in run["evals"]]) if auc else run["evals"][-1][key])


def summarize(out_dir, runs, arms, seeds, n_held, sft_info, quick, seed, timer) -> dict:
  finals = toy_grid.final_evals(runs, [k for k, _ in METRICS])
  aucs = toy_grid.final_evals(runs, [k for k, _ in METRICS], auc=True)
  rows = []
  for claim, a, b, effect, sized, note in CLAIMS:
    if a not in runs or b not in runs:
      continue
    common_seeds = [s for s in runs[a] if s in runs[b]]
    for key, auc in METRICS:
      cmp = stats.paired([_stat(runs[a][s], key, auc) * 100 for s in common_seeds],
                         [_stat(runs[b][s], key, auc) * 100 for s in common_seeds])
      v = stats.verdict(cmp, effect, sized=sized)
      v["claim_pp"] = v.pop("claim")
      rows.append({**cmp, **v, "claim": claim, "base": a, "variant": b,
                   "metric": key + (" AUC" if auc else " final"), "seeds": common_seeds,
                   "note": note})
  credit = {}
  for arm, by_seed in runs.items():  # per run: the mean over its steps; then over seeds
    credit[arm] = {}
    for k in CREDIT:
      hist = [[h[k] for h in r["history"] if k in h] for r in by_seed.values()]
      if all(hist):
        per = [float(np.mean(x)) for x in hist]
        credit[arm][k] = toy_grid.mean_std(per)
  init_eval = next(iter(next(iter(runs.values())).values()))["evals"][0]
  curve = {arm: {k: [[float(h.get(k, np.nan)) for h in r["history"]] for r in by_seed.values()]
                 for k in ("reward/csr", "transform/credit/label_adv_share",
                           "transform/credit/label_weight", "response/length_mean")}
           for arm, by_seed in runs.items()}
  figures = ["heldout_curves.png", "credit_curves.png"]
  n = len(next(iter(runs.values())))
  toy_grid.plot_evals(os.path.join(out_dir, figures[0]), runs, list(runs),
                      [("sampled/csr", "held-out CSR, sampled (%)"),
                       ("sampled/aon", "held-out AON, sampled (%)")],
                      f"Long-answer toy: held-out metrics ({n_held} prompts), mean ± std over "
                      f"{n} seeds")
  toy_grid.plot_curves(os.path.join(out_dir, figures[1]), curve, list(runs),
                       [("reward/csr", "train CSR"),
                        ("transform/credit/label_adv_share",
                         "decisive tokens' share of Σ|Â|"),
                        ("transform/credit/label_weight", "mean weight on decisive tokens")],
                       f"Where the credit goes (mean ± std over {n} seeds)")
  table = _table(finals, aucs, rows, credit, init_eval, sft_info, n, n_held)
  with open(os.path.join(out_dir, "table.md"), "w") as f:
    f.write(table)
  res = {"study": STUDY, "config": {"seed": seed, "seeds": list(seeds), "quick": quick,
                                    "arms": {k: dataclasses.asdict(v) for k, v in arms.items()},
                                    "model": MODEL, "warm_start": dict(SFT, **LENGTHS),
                                    "heldout_prompts": n_held, "heldout_seed": 7,
                                    "eval_samples_per_prompt": 4, "design_sd_pp": DESIGN_SD * 100,
                                    "design_mde_pp": stats.mde(DESIGN_SD * 100, len(SEEDS))},
         "warm_start": sft_info, "initial_eval": init_eval, "final": finals, "auc": aucs,
         "verdicts": rows, "credit": credit, "curves": curve,
         "evals": {a: {s: r["evals"] for s, r in v.items()} for a, v in runs.items()},
         "run_runtime_s": {a: {s: r["runtime_s"] for s, r in v.items()} for a, v in runs.items()},
         "runs_runtime_total_s": sum(r["runtime_s"] for v in runs.values() for r in v.values()),
         "figures": figures, "environment": common.environment(), "runtime_s": timer()}
  common.write_json(os.path.join(out_dir, "results.json"), res)
  return res


def _table(finals, aucs, rows, credit, init_eval, sft_info, n, n_held) -> str:
  out = (f"Long-answer rubric toy (answers of {LENGTHS['min_len']}–{LENGTHS['max_len']} "
         f"content tokens). Held-out: {n_held} prompts, 4 samples each at T = 1; mean ± std "
         f"(ddof = 1) over {n} seeds, %. Warm start (step 0): sampled CSR "
         f"{init_eval['sampled/csr'] * 100:.1f}, AON {init_eval['sampled/aon'] * 100:.1f}, "
         f"mean length {init_eval['sampled/length_mean']:.1f}, length clip ratio "
         f"{init_eval['sampled/length_clip_ratio']:.3f}.\n\n")
  out += common.md_table(
      ["arm", "CSR AUC", "CSR final", "AON AUC", "AON final", "greedy CSR final"],
      [[a, toy_grid.pm(aucs[a]["sampled/csr"]), toy_grid.pm(finals[a]["sampled/csr"]),
        toy_grid.pm(aucs[a]["sampled/aon"]), toy_grid.pm(finals[a]["sampled/aon"]),
        toy_grid.pm(finals[a]["greedy/csr"])] for a in finals])
  out += ("\nWhere the credit went (per run the mean over its 100 steps; mean ± std over seeds):"
          " the decisive tokens' share of the loss tokens, their share of Σ|Â|, and the mean "
          "weight |Â|/|A| on them and on the other tokens.\n\n")
  f = lambda c, k, s=1.0, d=3: (f"{c[k]['mean'] * s:.{d}f} ± {c[k]['std'] * s:.{d}f}"
                                if k in c else "-")
  out += common.md_table(["arm", "decisive tokens (share)", "their share of Σ|Â|",
                          "weight on them", "weight on the rest", "std of CoRT's w̃"],
                         [[a, f(c, CREDIT[0]), f(c, CREDIT[1]), f(c, CREDIT[2]),
                           f(c, CREDIT[3]), f(c, CREDIT[4])] for a, c in credit.items()])
  return out + stats.verdict_table(rows)


if __name__ == "__main__":
  common.sweep_main(STUDY, run, __doc__, sys.argv[1:])
