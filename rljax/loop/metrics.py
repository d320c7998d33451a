"""Host-side metrics of a step: the collected batch's and the update's."""
from __future__ import annotations

import numpy as np


def rollout_metrics(roll, batch) -> dict:
  """Reward, response-length and dynamic-sampling metrics of a collected batch (`Rollouts`
  and its `TrainBatch`)."""
  info, mask = roll.info, batch.mask_BxN
  out = {"reward/mean": float(np.mean(roll.rewards)),
         "reward/std": float(np.std(roll.rewards)),
         "response/length_mean": float(mask.sum(1).mean()),
         "response/length_clip_ratio": float(np.mean(np.asarray(roll.r.truncated_B))),
         # x+ columns after prompt bucketing (data.prompt_bucket)
         "rollout/prompt_len": float(batch.tokens_BxL.shape[1] - mask.shape[1]),
         "rollout/resample_tries": roll.resample_tries,
         # rows × decode steps the sampler ran (rollout.compact_every lowers it)
         "rollout/decode_row_steps": float(roll.decode_row_steps)}
  for k in ("csr", "aon", "overlong_penalty", "accuracy", "degenerate"):
    if k in info:
      out[f"reward/{k}"] = float(np.mean(info[k]))
  for k in info:  # each term of a weighted reward (`reward.terms`), unweighted
    if k.startswith("term/"):
      out[k] = float(np.mean(info[k]))
  if roll.keep_groups is not None:
    out["rollout/dropped_groups"] = float(np.sum(~np.asarray(roll.keep_groups)))
  out.update(pack_metrics(batch))
  return out


def pack_metrics(batch) -> dict:
  """train.pack: real tokens per packed slot, packed slots per padded position ({} when the
  batch carries no plans)."""
  if not batch.packed:
    return {}
  seg = batch.packed["pack_plus_seg"]
  return {"pack/utilization": float(np.mean(seg > 0)),
          "pack/slots_vs_padded": float(seg.size / batch.tokens_BxL.size)}


def minibatch_token_metrics(row_tokens, units: int) -> dict:
  """Rows in their mini-batch order, `units` consecutive blocks (the mini-batches' micro-
  batches): the fullest block's real tokens over the mean block's (1 = balanced; a packed
  update gives every block the packed rows of the fullest)."""
  sums = np.asarray(row_tokens, np.float64).reshape(units, -1).sum(1)
  return {"minibatch/tokens_max_over_mean": float(sums.max() / max(sums.mean(), 1.0))}


def update_metrics(metrics: dict, criterion_ids=()) -> dict:
  """The update's device metrics as floats; the per-criterion Δ sums (per-criterion replay)
  expanded to `cort/delta/<criterion id>` = the mean Δ_j of that criterion."""
  metrics = dict(metrics)
  sums = metrics.pop("cort/crit_delta_sum_I", None)
  counts = metrics.pop("cort/crit_count_I", None)
  out = {k: float(v) for k, v in metrics.items()}
  if sums is not None:
    for name, s, c in zip(criterion_ids, np.asarray(sums), np.asarray(counts)):
      if c > 0:
        out[f"cort/delta/{name}"] = float(s / c)
  return out
