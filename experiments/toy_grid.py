"""Arms × seeds of `toy_rl.train` runs, one JSON per run (a killed sweep resumes where it
stopped), and the summaries / figures the two toy studies share."""
from __future__ import annotations

import dataclasses
import json
import os
import re

import numpy as np

from experiments import common
from experiments import rubric_toy as toy
from experiments import toy_rl

# the per-step metrics kept in results.json (the per-run files keep every metric)
CURVE_KEYS = ("reward/csr", "reward/aon", "actor/grad_norm", "actor/entropy",
              "loss/ppo/clip_frac", "response/length_clip_ratio", "response/length_mean",
              "transform/cort/weight_mean", "transform/cort/lambda", "cort/delta_mean",
              "mismatch/kl_q_p", "mismatch/abs_log_ratio_mean", "rollout/kept_groups",
              "actor/update_skipped")


def warm_start(quick: bool):
  """The shared supervised init, cached beside the results (the quick smoke run reuses the
  committed full one when it is there, else trains a 40-step one in a temporary folder)."""
  cache = os.path.join(common.RESULTS, "warm_start")
  if quick and not os.path.exists(toy_rl.warm_start_path(cache)):
    return toy_rl.warm_start(None, steps=40)
  return toy_rl.warm_start(cache)


def heldout(n: int, seed: int = 7):
  return toy.prompts(np.random.default_rng(seed), n, heldout=True)


def run_grid(out_dir: str, arms: dict, seeds, graphdef, params, held, verbose=True) -> dict:
  """{arm: {seed: run result}}; runs already in out_dir/runs/ are read back, not rerun.
  With TOY_GRID_CACHED_ONLY=1 in the environment nothing new runs (arms without any finished
  run are left out): the tables and figures of a sweep that is still going."""
  runs_dir = os.path.join(out_dir, "runs")
  os.makedirs(runs_dir, exist_ok=True)
  out = {}
  for arm, spec0 in arms.items():
    out[arm] = {}
    for seed in seeds:
      spec = dataclasses.replace(spec0, seed=seed)
      path = os.path.join(runs_dir, f"{re.sub(r'[^A-Za-z0-9+.-]+', '_', arm)}_seed{seed}.json")
      if os.path.exists(path):
        res = json.load(open(path))
        if res.get("spec") == json.loads(json.dumps(dataclasses.asdict(spec))):
          out[arm][seed] = res
          continue
      if os.environ.get("TOY_GRID_CACHED_ONLY"):  # summarize what finished, run nothing
        continue
      res = toy_rl.train(spec, graphdef, params, held)
      res = {"arm": arm, "spec": dataclasses.asdict(spec), **res}
      common.write_json(path, res)
      res = json.load(open(path))
      out[arm][seed] = res
      if verbose:
        e = res["evals"][-1]
        print(f"[{arm} seed {seed}] {res['runtime_s']} s, held-out sampled CSR "
              f"{e['sampled/csr']:.3f} AON {e['sampled/aon']:.3f}", flush=True)
  return {arm: v for arm, v in out.items() if v}


def sweep(out_dir: str, arms: dict, seeds, graphdef, params, held, workers: int = 1,
          worker: int = 0) -> dict | None:
  """Runs this worker's share (I of K) of the (seed, arm) runs, seed-major so that a stopped
  sweep stays paired. Returns None for a worker of several (K > 1), else every finished run
  of the grid, read back from out_dir/runs/ (run_grid)."""
  jobs = [(s, a) for s in seeds for a in arms]
  for i, (s, a) in enumerate(jobs):
    if i % workers == worker:
      run_grid(out_dir, {a: arms[a]}, [s], graphdef, params, held)
  if workers > 1:
    return None
  os.environ["TOY_GRID_CACHED_ONLY"] = "1"
  try:
    return run_grid(out_dir, arms, seeds, graphdef, params, held, verbose=False)
  finally:
    os.environ.pop("TOY_GRID_CACHED_ONLY")


def run_arms(out_dir: str, arms: dict, seeds, n_held: int, quick: bool):
  """A study's runs: the warm start, `n_held` held-out prompts, every arm × seed (run_grid).
  Returns (runs, the warm start's info)."""
  graphdef, params, sft_info = warm_start(quick)
  return run_grid(out_dir, arms, seeds, graphdef, params, heldout(n_held)), sft_info


def curves(runs: dict) -> dict:
  """{arm: {metric: [per seed [per step]]}} of CURVE_KEYS (nan where a run lacks one)."""
  out = {}
  for arm, by_seed in runs.items():
    out[arm] = {k: [[float(h.get(k, np.nan)) if not isinstance(h.get(k), str) else np.nan
                     for h in r["history"]] for r in by_seed.values()] for k in CURVE_KEYS}
  return out


def final_evals(runs: dict, keys, auc: bool = False) -> dict:
  """{arm: {metric: {values (per seed), mean, std}}} at the last evaluation, or with `auc`
  the mean over every evaluation of the run (step 0 included: the area under the held-out
  learning curve, per step)."""
  out = {}
  stat = (lambda r, k: np.mean([e[k] for e in r["evals"]])) if auc else \
      (lambda r, k: r["evals"][-1][k])
  for arm, by_seed in runs.items():
    out[arm] = {}
    for k in keys:
      v = np.array([stat(r, k) for r in by_seed.values()], np.float64)
      out[arm][k] = {"values": v.tolist(), "seeds": list(by_seed),
                     "mean": float(v.mean()), "std": float(v.std(ddof=1)) if len(v) > 1
                     else float("nan")}
  return out


def paired(runs: dict, a: str, b: str, key: str, auc: bool = False) -> dict:
  """b − a per seed (same init, same prompt stream and sampler keys), mean, std, wins; of
  the last evaluation, or with `auc` of the mean over every evaluation."""
  seeds = [s for s in runs[a] if s in runs[b]]
  stat = (lambda r: np.mean([e[key] for e in r["evals"]])) if auc else \
      (lambda r: r["evals"][-1][key])
  d = np.array([stat(runs[b][s]) - stat(runs[a][s]) for s in seeds])
  return {"base": a, "variant": b, "metric": key + (" (AUC)" if auc else ""), "seeds": seeds,
          "diffs": d.tolist(),
          "mean": float(d.mean()), "std": float(d.std(ddof=1)) if len(d) > 1 else float("nan"),
          "wins": int((d > 0).sum()), "losses": int((d < 0).sum())}


def paired_table(pairs, what: str = "held-out sampled CSR") -> str:
  """The markdown table of `paired` results (variant − base, pp, wins / losses)."""
  out = f"\nPaired differences of {what} (variant − base, same seed), pp.\n\n"
  rows = [[p["variant"], p["base"], f"{p['mean'] * 100:+.1f} ± {p['std'] * 100:.1f}",
           f"{p['wins']} / {p['losses']}"] for p in pairs]
  return out + common.md_table(["variant", "base", "Δ CSR (pp)", "wins / losses"], rows)


def last10(runs: dict, arm: str, key: str) -> dict:
  """{seed: mean of `key` over the run's last 10 rollout batches}."""
  return {s: float(np.mean([h[key] for h in r["history"][-10:]])) for s, r in runs[arm].items()}


def claim_rows(runs: dict, claims) -> list[dict]:
  """The verdict rows (experiments/stats.py) of `claims` — (text, base arm, variant arm,
  claimed effect of variant − base in pp, sized) — on train CSR (the last 10 batches) and
  held-out sampled CSR (the last evaluation), paired by seed; claims on an arm that has no
  finished run are left out."""
  from experiments import stats
  rows = []
  for claim, a, b, effect, sized in claims:
    if a not in runs or b not in runs:
      continue
    seeds = [s for s in runs[a] if s in runs[b]]
    train = {arm: last10(runs, arm, "reward/csr") for arm in (a, b)}
    for metric in ("train CSR (last 10)", "held-out CSR"):
      if metric.startswith("train"):
        val = lambda arm: [train[arm][s] * 100 for s in seeds]
      else:
        val = lambda arm: [runs[arm][s]["evals"][-1]["sampled/csr"] * 100 for s in seeds]
      cmp = stats.paired(val(a), val(b))
      v = stats.verdict(cmp, effect, sized=sized)
      v["claim_pp"] = v.pop("claim")
      rows.append({**cmp, **v, "claim": claim, "base": a, "variant": b, "metric": metric,
                   "seeds": seeds})
  return rows


def mean_std(values) -> dict:
  v = np.asarray(values, np.float64)
  return {"values": v.tolist(), "mean": float(v.mean()),
          "std": float(v.std(ddof=1)) if len(v) > 1 else float("nan")}


def curve_summary(curve: dict, keys, last: int = 10) -> dict:
  """{arm: {metric: {last: mean ± std over seeds of the mean of the last `last` steps,
  peak: mean ± std over seeds of the largest value}}} (the numbers behind the panels)."""
  out = {}
  for arm, c in curve.items():
    out[arm] = {}
    for k in keys:
      ys = np.array(c[k], np.float64)
      if np.all(np.isnan(ys)):
        continue
      out[arm][k] = {"last": mean_std(np.nanmean(ys[:, -last:], 1)),
                     "peak": mean_std(np.nanmax(ys, 1))}
  return out


def seed_std(ys: np.ndarray) -> np.ndarray:
  """The std over seeds (axis 0) with ddof = 1, as every table states it; 0 for one seed."""
  return ys.std(0, ddof=1) if len(ys) > 1 else np.zeros(ys.shape[1:])


def pm(stat: dict, scale: float = 100.0, digits: int = 1) -> str:
  """'mean ± std' (in percent by default)."""
  return f"{stat['mean'] * scale:.{digits}f} ± {stat['std'] * scale:.{digits}f}"


def _color(arm: str, order) -> str:
  """The same colour for an arm in every panel and figure of a study (tab20 for > 10)."""
  i = list(order).index(arm) if arm in order else 0
  return f"C{i}" if len(order) <= 10 else __import__("matplotlib").colormaps["tab20"](i % 20)


def plot_curves(path: str, curve: dict, arms, panels, title: str, smooth: int = 5,
                order=None):
  """One panel per (metric, label); one line per arm: the seed mean (moving average over
  `smooth` steps), shaded ± one std over seeds."""
  plt = common.pyplot()
  cols = 3
  rows = (len(panels) + cols - 1) // cols
  fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.6 * rows), squeeze=False)
  for ax, (key, label) in zip(axes.flat, panels):
    for arm in arms:
      ys = np.array(curve[arm][key], np.float64)
      if np.all(np.isnan(ys)):
        continue
      k = np.ones(smooth) / smooth
      sm = np.array([np.convolve(np.nan_to_num(y), k, mode="valid") for y in ys])
      x = np.arange(sm.shape[1]) + smooth
      mu, sd = sm.mean(0), seed_std(sm)
      line, = ax.plot(x, mu, label=arm, lw=1.4, color=_color(arm, order or list(arms)))
      ax.fill_between(x, mu - sd, mu + sd, color=line.get_color(), alpha=0.15)
    if "weight" in key:  # a normalized weight is 1 ± float32 rounding: show a real range
      lo, hi = ax.get_ylim()
      ax.set_ylim(min(lo, 0.98), max(hi, 1.02))
    common.finish_axes(ax, "RL step (rollout batches)", label)
  for ax in list(axes.flat)[len(panels):]:
    ax.axis("off")
  fig.suptitle(title)
  fig.tight_layout()
  fig.savefig(path)
  plt.close(fig)


def plot_evals(path: str, runs: dict, arms, keys, title: str, order=None, groups=None):
  """Held-out metrics vs step: seed mean ± std per arm; one panel per key, or with `groups`
  ([(panel title, arms)]) one panel per group, all of the first key."""
  plt = common.pyplot()
  panels = ([(keys[0][0], keys[0][1], t, g) for t, g in groups] if groups else
            [(k, lab, None, arms) for k, lab in keys])
  fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 3.8), squeeze=False)
  for ax, (key, label, sub, arms) in zip(axes.flat, panels):
    if sub:
      ax.set_title(sub, fontsize=10)
    for arm in arms:
      rs = list(runs[arm].values())
      x = [e["step"] for e in rs[0]["evals"]]
      ys = np.array([[e[key] * 100 for e in r["evals"]] for r in rs])
      line, = ax.plot(x, ys.mean(0), marker="o", ms=3, label=arm, lw=1.4,
                      color=_color(arm, order or list(arms)))
      ax.fill_between(x, ys.mean(0) - seed_std(ys), ys.mean(0) + seed_std(ys),
                      color=line.get_color(), alpha=0.12)
    common.finish_axes(ax, "RL step (rollout batches)", label)
  fig.suptitle(title)
  fig.tight_layout()
  fig.savefig(path)
  plt.close(fig)


def plot_finals(path: str, finals: dict, arms, keys, title: str, order=None):
  """The final held-out evaluation, one panel per (key, label), one row per arm: each seed
  a dot, the seed mean ± one std (ddof = 1) as a bar. `finals` is `final_evals`' output
  ({arm: {key: {"values": [...]}}}), so a committed `results.json` redraws it."""
  plt = common.pyplot()
  arms = [a for a in arms if a in finals]
  size = (max(8.0, 4.6 * len(keys) + 1.8), 0.42 * len(arms) + 1.4)
  fig, axes = plt.subplots(1, len(keys), figsize=size, squeeze=False, sharey=True)
  y = np.arange(len(arms))[::-1]
  for ax, (key, label) in zip(axes.flat, keys):
    for yi, arm in zip(y, arms):
      v = 100 * np.asarray(finals[arm][key]["values"], np.float64)
      c = _color(arm, order or arms)
      ax.plot(v, np.full(len(v), yi), "o", ms=4.5, color=c, alpha=0.6, mec="none")
      ax.errorbar(v.mean(), yi, xerr=seed_std(v[:, None])[0], fmt="D", ms=5, color=c,
                  capsize=3, lw=1.4)
    ax.set_yticks(y, arms)
    ax.grid(axis="x", alpha=0.3)
    ax.set_xlabel(label)
  fig.suptitle(title, fontsize=10)
  fig.tight_layout()
  fig.savefig(path)
  plt.close(fig)


HELDOUT_CSR = [("sampled/csr", "held-out CSR, sampled (%)")]


def final_figure(out_dir: str, finals: dict, names: list, n_seeds: int, n_held: int,
                 keys=HELDOUT_CSR) -> str:
  """heldout_final.png: each seed's final held-out scores (`results.json`'s `final`)."""
  plot_finals(os.path.join(out_dir, "heldout_final.png"), finals, names, keys,
              f"Final held-out evaluation ({n_held} prompts): each seed (dots), mean ± std "
              f"over {n_seeds} seeds", order=names)
  return "heldout_final.png"
