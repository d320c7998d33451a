"""Multi-update PPO on one rollout batch, as the papers run it (verl / ms-swift style).

The rollout batch of P prompts × G samples is scored once (π_old and the CoRT replay in
one fused forward, `score_batch`; in bypass mode π_old is the sampler's log q and the x⁺
forward is skipped), the tokens in the loss are chosen once (`tokens_in_loss`: finite
log-probs, rejection, the group baseline over the kept responses), the token-transform
chain runs once on the whole batch,
and then μ = epochs × num_minibatches optimizer updates follow. Every epoch draws a
permutation of the *group* indices on device and splits it into mini-batches of whole
groups (REAL, GRPO statistics and dynamic sampling all need whole groups). The whole
thing is one jitted function: the mini-batches are gathered on device inside a
`lax.scan`, no host round trip per mini-batch.

With epochs = num_minibatches = 1 the trainer keeps the fused step (`train_step` with
`fused_scoring=True`, π_old = sg(π_θ)): that path is unchanged.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from rljax.sharding import mesh_scope
from rljax.train_step import StepConfig, apply_transforms, jit_train_step, score_batch
from rljax.train_step import tokens_in_loss
from rljax.train_step import train_step

# score_batch outputs that are whole-batch metrics, not per-row arrays
_BATCH_METRICS = ("crit_delta_sum_I", "crit_count_I")


def minibatch_rows(key, num_rows: int, group_size: int, epochs: int,
                   num_minibatches: int) -> jax.Array:
  """[epochs·num_minibatches, rows per mini-batch] row indices; each mini-batch holds whole
  groups (rows g·G .. g·G+G−1), each epoch is a fresh permutation of the groups."""
  num_groups = num_rows // group_size
  if num_rows % group_size or num_groups % num_minibatches:
    raise ValueError(f"{num_rows} rows in groups of {group_size} do not split into "
                     f"{num_minibatches} mini-batches of whole groups")
  perms = jnp.stack([jax.random.permutation(jax.random.fold_in(key, e), num_groups)
                     for e in range(epochs)])
  groups = perms.reshape(epochs * num_minibatches, num_groups // num_minibatches)
  rows = groups[:, :, None] * group_size + jnp.arange(group_size)[None, None]
  return rows.reshape(epochs * num_minibatches, -1)


def minibatch_order(key, num_rows: int, group_size: int, num_minibatches: int,
                    row_tokens=None, units: int | None = None) -> np.ndarray:
  """On the host, the row order of the one-epoch mini-batches `update_batch` draws with
  `key`: its consecutive blocks of num_rows / num_minibatches rows are the mini-batches.
  A batch permuted by it and updated with `presorted=True` makes the same updates; its
  packing plans can then pack each whole mini-batch together (`rljax.packing`).

  `row_tokens` [num_rows] (`train.balance_tokens`): the groups are instead dealt into
  `units` equal blocks (default num_minibatches; num_minibatches × grad_accum to balance
  each gradient-accumulation micro-batch too) of about the same number of tokens
  (`balanced_groups`), taking the key's permutation of the groups as the tie order; the
  blocks keep the order of their first group in that permutation."""
  rows = np.asarray(minibatch_rows(key, num_rows, group_size, 1, num_minibatches)).reshape(-1)
  if row_tokens is None:
    return rows
  perm = rows[::group_size] // group_size
  tokens = np.asarray(row_tokens).reshape(-1, group_size).sum(1)
  groups = balanced_groups(perm, tokens, units or num_minibatches)
  return (groups[:, None] * group_size + np.arange(group_size)[None]).reshape(-1)


def balanced_groups(perm, group_tokens, units: int) -> np.ndarray:
  """The groups of `perm` (a permutation of the group indices) dealt into `units` blocks of
  len(perm) / units groups each, their token sums balanced: largest group first (ties in
  `perm` order), each to the block with the fewest tokens that still has room (ties: the
  lowest block). Returns the groups block by block, the blocks ordered by the position of
  their first group in `perm` and each block's groups in `perm` order."""
  perm, group_tokens = np.asarray(perm), np.asarray(group_tokens)
  n = len(perm)
  if n % units:
    raise ValueError(f"{n} groups do not deal into {units} equal blocks")
  size, rank = n // units, np.empty(n, int)
  rank[perm] = np.arange(n)
  totals, blocks = np.zeros(units, np.int64), [[] for _ in range(units)]
  for g in sorted(perm.tolist(), key=lambda g: (-int(group_tokens[g]), rank[g])):
    j = min((j for j in range(units) if len(blocks[j]) < size), key=lambda j: (totals[j], j))
    blocks[j].append(g)
    totals[j] += int(group_tokens[g])
  blocks = [sorted(b, key=lambda g: rank[g]) for b in blocks]
  blocks.sort(key=lambda b: rank[b[0]])
  return np.asarray([g for b in blocks for g in b], np.int64)


def update_batch(state, batch: dict, ref_params, key, *, graphdef, optimizer, sc: StepConfig,
                 epochs: int, num_minibatches: int, grad_accum: int = 1,
                 minibatch_sharding=None, per_update: bool = False, presorted: bool = False):
  """Score → transforms → scan over μ mini-batch updates. Returns (state, metrics): the
  per-update metrics averaged over the μ updates, `actor/num_updates`, and
  `actor/update_skipped` = how many of them were skipped (with `per_update`, also
  `per_update/loss` [μ], the loss of each update). `presorted`: the batch is already in
  `minibatch_order(key, ...)` (one epoch only); mini-batch m is rows m·B/μ .. (m+1)·B/μ − 1.
  """
  sc_mb = dataclasses.replace(sc, fused_scoring=False)
  scores = score_batch(graphdef, state.params, batch, sc_mb, ref_params)
  # the tokens in the loss, once for the whole batch: every update, the transforms (CoRT's
  # per-response normalization) and the normalizers count the same tokens as at μ = 1
  batch, p_old, sel = tokens_in_loss(sc_mb, batch, scores.get("old_logp_BxN"))
  scores["old_logp_BxN"] = batch["sampler_logp_BxN"] if p_old is None else p_old
  adv, ts, t_metrics = apply_transforms(state.transform_state, batch, scores, sc_mb)
  state = state._replace(transform_state=ts)
  full = dict(batch, adv_BxN=adv, **{k: v for k, v in scores.items()
                                     if k not in _BATCH_METRICS})
  num_rows = batch["mask_BxN"].shape[0]
  if presorted:
    if epochs != 1:
      raise ValueError(f"a presorted batch holds one epoch's mini-batch order; got epochs={epochs}")
    minibatch_rows(key, num_rows, sc.objective.group_size, 1, num_minibatches)  # the checks
    rows = jnp.arange(num_rows, dtype=jnp.int32).reshape(num_minibatches, -1)
  else:
    rows = minibatch_rows(key, num_rows, sc.objective.group_size, epochs, num_minibatches)

  def body(state, idx):
    mb = jax.tree.map(lambda x: jnp.take(x, idx, axis=0), full)
    if minibatch_sharding is not None:
      mb = {k: jax.lax.with_sharding_constraint(v, minibatch_sharding[k])
            for k, v in mb.items()}
    return train_step(state, mb, ref_params, graphdef=graphdef, optimizer=optimizer, sc=sc_mb,
                      grad_accum=grad_accum)

  state, per_update_metrics = jax.lax.scan(body, state, rows)
  metrics = {k: v.mean(0) for k, v in per_update_metrics.items()}
  metrics.update(sel)
  metrics["actor/update_skipped"] = per_update_metrics["actor/update_skipped"].sum()
  metrics["actor/num_skipped"] = per_update_metrics["actor/num_skipped"][-1]
  metrics["actor/num_updates"] = jnp.float32(rows.shape[0])
  if per_update:
    metrics["per_update/loss"] = per_update_metrics["loss"]
  metrics.update({f"transform/{k}": v for k, v in t_metrics.items()})
  metrics.update({f"cort/{k}": scores[k] for k in _BATCH_METRICS if k in scores})
  if "plus_logp_BxN" in scores:
    m = batch["mask_BxN"]
    delta = (scores["plus_logp_BxN"] - scores["minus_logp_BxN"]) * m
    metrics["cort/delta_mean"] = delta.sum() / jnp.maximum(m.sum(), 1.0)
    metrics["cort/delta_abs_mean"] = jnp.abs(delta).sum() / jnp.maximum(m.sum(), 1.0)
  return state, metrics


def jit_update_batch(graphdef, optimizer, sc: StepConfig, *, epochs: int, num_minibatches: int,
                     grad_accum: int = 1, state_shardings=None, batch_shardings=None,
                     ref_shardings=None, replicated=None, per_update: bool = False,
                     presorted: bool = False):
  """`jax.jit` of `update_batch` with explicit shardings, donating the state."""
  def fn(state, batch, ref, key):
    with mesh_scope(state_shardings):
      return update_batch(
          state, batch, ref, key, graphdef=graphdef, optimizer=optimizer, sc=sc,
          epochs=epochs, num_minibatches=num_minibatches, grad_accum=grad_accum,
          per_update=per_update, presorted=presorted,
          minibatch_sharding=None if batch_shardings is None else _mb_shardings(batch_shardings))

  if state_shardings is None:
    return jax.jit(fn, donate_argnums=(0,))
  return jax.jit(fn, donate_argnums=(0,),
                 in_shardings=(state_shardings, batch_shardings, ref_shardings, replicated),
                 out_shardings=(state_shardings, replicated))


class _mb_shardings(dict):
  """Mini-batch arrays keep their batch's sharding; derived ones (adv, scores) are [B, N]."""

  def __missing__(self, key):
    return self["mask_BxN"]


def jit_update(graphdef, optimizer, sc: StepConfig, *, epochs: int = 1, num_minibatches: int = 1,
               grad_accum: int = 1, state_shardings=None, batch_shardings=None,
               ref_shardings=None, replicated=None, presorted: bool = False):
  """The update stage: `update(state, batch, ref_params, key) -> (state, metrics)` for one
  rollout batch, jitted, donating the state (`.lower(...)` with the same arguments for AOT).
  With `sc.fused_scoring` (μ = 1) it is the fused step (`train_step`: π_old = sg(π_θ), the
  replay inside; `key` is not read); else `update_batch` (score once, transforms once, a
  device-side scan over μ = epochs × num_minibatches mini-batches of whole groups, permuted
  with `key`, or with `presorted` already in that order on the host)."""
  if not sc.fused_scoring:
    return jit_update_batch(graphdef, optimizer, sc, epochs=epochs,
                            num_minibatches=num_minibatches, grad_accum=grad_accum,
                            state_shardings=state_shardings, batch_shardings=batch_shardings,
                            ref_shardings=ref_shardings, replicated=replicated,
                            presorted=presorted)
  if epochs * num_minibatches != 1:
    raise ValueError(f"the fused step makes one update per batch; got epochs={epochs} × "
                     f"num_minibatches={num_minibatches} (use StepConfig(fused_scoring=False))")
  return _KeyUnused(jit_train_step(graphdef, optimizer, sc, grad_accum, state_shardings,
                                   batch_shardings, ref_shardings, replicated))


class _KeyUnused:
  """The fused step behind the update's signature: one update, nothing to permute."""

  def __init__(self, step):
    self._step = step

  def __call__(self, state, batch, ref, key=None):
    return self._step(state, batch, ref)

  def lower(self, state, batch, ref, key=None):
    return self._step.lower(state, batch, ref)
