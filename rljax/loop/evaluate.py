"""Held-out evaluation (greedy, IFEval-style prompt / instruction accuracy) and the CoRT
token-weight heat-map of the last batch."""
from __future__ import annotations

import dataclasses
import json
import os

import jax
import jax.numpy as jnp
import numpy as np

from rljax import distributed as dist
from rljax import paths
from rljax.loop.run_state import Keys


class Evaluator:
  """Held-out eval of `examples` through the collector's sampler path: greedy, and with
  `sampled` = k also k samples per prompt at the rollout's temperature / top-k / top-p from
  a fixed key (the same draws at every step and in every run of the same examples)."""

  def __init__(self, collector, examples, reward_fn, log=None, num_samples: int = 4,
               sampled: int = 0):
    self.collector, self.examples, self.reward_fn = collector, list(examples), reward_fn
    self.log, self.num_samples, self.sampled = log, num_samples, int(sampled)

  def _responses(self, model, cfg, key):
    """(texts, truncated [n·G] bool, lengths [n·G]) of `cfg.num_generations` responses per
    example, row i·G + g = sample g of example i."""
    c = self.collector
    prompts = c.encoder.encode(self.examples, replay=False)
    block = c.prompt_rows(len(prompts.plus_ids))
    local = prompts._replace(plus_ids=prompts.plus_ids[block], plus_mask=prompts.plus_mask[block])
    r, _ = c.generate(model, local, key, cfg, len(prompts.plus_ids), replay=False)
    texts = c.tokenizer.batch_decode([row[m > 0] for row, m in zip(r.tokens_BxN, r.mask_BxN)],
                                     skip_special_tokens=True)
    return texts, np.asarray(r.truncated_B), np.asarray(r.mask_BxN).sum(1)

  def __call__(self, model, step: int | None = None) -> dict:
    """{eval/<metric>: value} of `model` (greedy; `eval/sampled/<metric>` over the k samples
    of every prompt with `sampled`); with `step`, `num_samples` prompts, greedy responses and
    rewards go to `samples.jsonl` / TensorBoard text."""
    from rljax.rewards.evaluation import heldout_metrics, sample_rows
    if not self.examples:
      return {}
    base = self.collector.sampler_cfg.replace(record_topk=0)
    texts, trunc, lens = self._responses(
        model, base.replace(temperature=0.0, num_generations=1), Keys.eval())
    out = {**heldout_metrics(self.examples, texts, self.reward_fn),
           "length_mean": float(lens.mean()), "length_clip_ratio": float(trunc.mean())}
    if self.sampled:
      k = self.sampled
      s_texts, s_trunc, s_lens = self._responses(
          model, base.replace(num_generations=k), Keys.eval_sampled())
      s_ex = [ex for ex in self.examples for _ in range(k)]
      out.update({f"sampled/{m}": v for m, v in heldout_metrics(
          s_ex, s_texts, self.reward_fn).items()})
      out.update({"sampled/length_mean": float(s_lens.mean()),
                  "sampled/length_clip_ratio": float(s_trunc.mean())})
    if step is not None and self.num_samples and self.log is not None:
      self.log.samples(step, sample_rows(self.examples, texts, self.reward_fn, self.num_samples))
    return {f"eval/{k}": v for k, v in out.items() if isinstance(v, (int, float))}


def print_baseline(ev: dict) -> None:
  """The console line of the initial policy's held-out eval (process 0)."""
  if dist.is_writer():
    shown = "  ".join(f"{k.split('/', 1)[1]} {ev[k]:.3g}" for k in (
        "eval/reward_mean", "eval/prompt_level_strict", "eval/instruction_level_strict")
        if k in ev)
    print(f"[before training] held-out {shown}  ({ev['time/eval']:.0f}s)", flush=True)


def token_weight_heatmap(workdir: str, graphdef, state, batch, roll, step_cfg, ref_params,
                         shardings, tokenizer, step: int, num_show: int = 4) -> dict:
  """CoRT's token credit on the last rollout batch, scored by the final policy: the weight
  w̃ = Â/A that the objective's token transforms give each response token (the replay
  forward and the transform chain of the step, run with A = 1), with Δ = ℓ⁺ − ℓ⁻. Writes
  `plots/cort_weights.png` (the `num_show` best-rewarded responses of distinct groups,
  complete ones, those that ended with a stop token, before any cut at max_new_tokens;
  tokens coloured by w̃) and `cort_weights.json`; returns the JSON record."""
  from rljax.plot import token_heatmap
  from rljax.train_step import apply_transforms, score_batch
  sc = dataclasses.replace(step_cfg, fused_scoring=False)
  ones = dict(batch.arrays(), adv_B=np.ones_like(batch.adv_B))

  def weights(state, b, ref):
    scores = score_batch(graphdef, state.params, b, sc, ref)
    scores.setdefault("old_logp_BxN", b["sampler_logp_BxN"])  # bypass: π_old := log q
    w, _, m = apply_transforms(state.transform_state, b, scores, sc)
    lam = [v for k, v in m.items() if k.endswith("lambda")]
    return w, scores["plus_logp_BxN"] - scores["minus_logp_BxN"], (lam or [jnp.nan])[0]

  w, delta, lam = dist.gather(jax.jit(weights)(state, dist.put_global(ones, shardings),
                                               ref_params))
  if not dist.is_writer():
    return {}
  g, n = sc.objective.group_size, batch.mask_BxN.shape[1]
  mask, rewards = batch.mask_BxN > 0, np.asarray(roll.rewards)
  complete = ~np.asarray(roll.r.truncated_B)
  rank = lambda i: (bool(complete[i]), float(rewards[i]))  # complete answers first
  best = [max(range(grp * g, (grp + 1) * g), key=rank) for grp in range(len(rewards) // g)]
  best = sorted((i for i in best if mask[i].any()), key=rank, reverse=True)[:num_show]
  examples = roll.examples or []
  rows = []
  for i in best:
    ids = [int(t) for t in batch.tokens_BxL[i, -n:][mask[i]]]
    ex = examples[i] if i < len(examples) else {}
    crit = ", ".join(c.split(":")[-1] for c in ex.get("instruction_id_list", []))
    rows.append({"row": int(i), "reward": float(rewards[i]), "criteria": crit,
                 "complete": bool(complete[i]), "ids": ids,
                 "tokens": [tokenizer.decode([t]) for t in ids],
                 "w": [float(x) for x in w[i][mask[i]]],
                 "delta": [float(x) for x in delta[i][mask[i]]]})
  rec = {"step": int(step), "lambda": float(lam), "rows": rows}
  paths.write_text(os.path.join(workdir, "cort_weights.json"), json.dumps(rec))
  token_heatmap([{"title": f"row {r['row']}  reward {r['reward']:.2f}" + (
      f"  criteria: {r['criteria']}" if r["criteria"] else "") + (
      "" if r["complete"] else "  (cut at max_new_tokens)"), "tokens": r["tokens"],
                  "values": r["w"]} for r in rows],
                os.path.join(workdir, "plots", "cort_weights.png"),
                label=f"CoRT token weight w̃ = Â/A after the final step (λ = {float(lam):.2f}; "
                "dimensionless)")
  return rec
