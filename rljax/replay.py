"""CoRT replay scoring (SPEC §3): Δ = log π̄(y | x⁺) − log π̄(y | x⁻), forward only.

The scoring policy π̄ is `old` (the batch's π_old: the trainer params at the start of the
rollout batch) or `ref` (the frozen reference params). The replay mode is `all` (x⁻ = the
prompt without any criterion) or `per_criterion` (one replay row per criterion j: x⁺ with
criterion j removed); in that mode the token credit is Σ_j Δ_j and Δ_j is also returned
per criterion id. Replay is always scored on the full distribution at the sampler's
temperature (never the top-k / top-p truncation), so Δ is finite everywhere.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from rljax.scoring import batch_pack, policy_params, response_outputs

REPLAY_POLICIES = ("old", "ref")
REPLAY_MODES = ("all", "per_criterion")


def full_distribution(sc):
  """The step config scoring the untruncated distribution (same temperature)."""
  return dataclasses.replace(sc, top_k=0, top_p=1.0)


def replay_scores(graphdef, params, ref_params, batch: dict, sc, old_logp_BxN) -> dict:
  """{logp_plus_BxN, logp_minus_BxN[, crit_delta_sum_I, crit_count_I]}, all without gradient.

  `old_logp_BxN` is the trainer's π_old on x⁺ under the step's own scoring; it is reused as
  ℓ⁺ when the scoring policy is `old` and the step scores the full distribution anyway (None:
  not scored, as in bypass mode, so ℓ⁺ is scored here).
  """
  full = full_distribution(sc)
  pol, adapters = ((ref_params, None) if sc.replay_policy == "ref"
                   else policy_params(params, ref_params, sc))
  pol, adapters = jax.lax.stop_gradient((pol, adapters))
  n = sc.response_len

  def score(tokens, mask, pack=None):
    return jax.lax.stop_gradient(response_outputs(graphdef, pol, tokens, mask, n, full,
                                                  adapters=adapters, pack=pack)["logp_BxT"])

  truncated = sc.top_k or sc.top_p < 1.0
  if sc.replay_policy == "old" and not truncated and old_logp_BxN is not None:
    plus = jax.lax.stop_gradient(old_logp_BxN)
  else:
    plus = score(batch["tokens_BxL"], batch["attn_mask_BxL"], batch_pack(batch, "plus", sc))
  out = {"logp_plus_BxN": plus}
  if sc.replay_mode == "all":
    out["logp_minus_BxN"] = score(batch["minus_tokens_BxM"], batch["minus_attn_mask_BxM"],
                                  batch_pack(batch, "minus", sc))
    return out
  tok_BxCxL, msk_BxCxL = batch["crit_tokens_BxCxL"], batch["crit_attn_mask_BxCxL"]
  b, c, l = tok_BxCxL.shape
  crit = score(tok_BxCxL.reshape(b * c, l), msk_BxCxL.reshape(b * c, l),
               batch_pack(batch, "crit", sc, rows_per_unit=c)).reshape(b, c, n)
  valid_BxC = (batch["crit_id_BxC"] >= 0).astype(jnp.float32)
  delta_BxCxN = (plus[:, None] - crit) * valid_BxC[..., None]
  out["logp_minus_BxN"] = plus - delta_BxCxN.sum(1)  # so that ℓ⁺ − ℓ⁻ = Σ_j Δ_j
  out.update(criterion_delta_sums(delta_BxCxN, batch["mask_BxN"], batch["crit_id_BxC"],
                                  sc.num_criteria_ids))
  return out


def criterion_delta_sums(delta_BxCxN, mask_BxN, crit_id_BxC, num_ids: int) -> dict:
  """Per criterion id: Σ over (row, slot) of the mean Δ_j over the row's response tokens,
  and the number of such (row, slot) pairs. mean Δ for id i = sum_I[i] / count_I[i]."""
  m = (mask_BxN > 0).astype(jnp.float32)
  per_BxC = (delta_BxCxN * m[:, None]).sum(-1) / jnp.maximum(m.sum(-1), 1.0)[:, None]
  has_BxC = (crit_id_BxC >= 0) & (m.sum(-1) > 0)[:, None]
  ids = jnp.where(has_BxC, crit_id_BxC, num_ids).reshape(-1)  # num_ids: a discard bucket
  sums = jax.ops.segment_sum(jnp.where(has_BxC, per_BxC, 0.0).reshape(-1), ids, num_ids + 1)
  counts = jax.ops.segment_sum(has_BxC.astype(jnp.float32).reshape(-1), ids, num_ids + 1)
  return {"crit_delta_sum_I": sums[:num_ids], "crit_count_I": counts[:num_ids]}
