"""The assemble stage: a collected rollout batch -> advantages -> a `TrainBatch`."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from rljax.loop.batch import TrainBatch
from rljax.loop.collect import Rollouts


def assemble(roll: Rollouts, objective, *, replay: bool, per_criterion: bool = False,
             head: bool = False) -> TrainBatch:
  """The train batch of `roll`: each prompt row repeated for its G responses, the group
  advantages of the (shaped) rewards, the replay rows when `replay` (x⁻, or with
  `per_criterion` the rows of x⁺ minus each criterion), the sampler's head when `head`.
  Groups dynamic sampling dropped (`keep_groups`) are out of the loss mask (and so of every
  normalizer count), with advantage 0."""
  g = objective.group_size
  r, p = roll.r, roll.prompts
  rep = lambda a: np.repeat(a, g, axis=0)
  resp, rmask = np.asarray(r.tokens_BxN, np.int32), np.asarray(r.mask_BxN, np.int32)
  adv, _ = objective.advantages(jnp.asarray(roll.rewards))
  keep = roll.keep_groups if roll.keep_groups is not None else np.ones(len(p.plus_ids), bool)
  keep_B = np.repeat(keep, g)
  out = dict(tokens_BxL=np.concatenate([rep(p.plus_ids), resp], 1),
             attn_mask_BxL=np.concatenate([rep(p.plus_mask), rmask], 1),
             mask_BxN=(rmask * keep_B[:, None]).astype(np.float32),
             adv_B=np.asarray(adv, np.float32) * keep_B,
             sampler_logp_BxN=np.asarray(r.logq_BxN, np.float32),
             rewards_B=np.asarray(roll.rewards, np.float32))
  if replay:
    out.update(minus_tokens_BxM=np.concatenate([rep(p.minus_ids), resp], 1),
               minus_attn_mask_BxM=np.concatenate([rep(p.minus_mask), rmask], 1))
  if per_criterion:
    c = p.crit_ids.shape[1]
    rep_c = lambda a: np.repeat(a[:, None], c, 1)  # response [B, N] -> [B, C, N]
    out.update(crit_tokens_BxCxL=np.concatenate([rep(p.crit_ids), rep_c(resp)], 2),
               crit_attn_mask_BxCxL=np.concatenate([rep(p.crit_mask), rep_c(rmask)], 2),
               crit_id_BxC=rep(p.crit_cid))
  if head:
    out.update(head_ids_BxNxK=np.asarray(r.topk_ids_BxNxK, np.int32),
               head_logq_BxNxK=np.asarray(r.topk_logq_BxNxK, np.float32))
  return TrainBatch(**out)
