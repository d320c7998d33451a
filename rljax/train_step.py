"""The one jitted, sharded training step (and the fused scoring pass for μ > 1).

A batch holds B = prompts × G rows. Row i is the rubric prompt x⁺ (left-padded
to P) followed by the response (N tokens) in `tokens_BxL` (L = P + N), and the
rubric-free prompt x⁻ (left-padded to P⁻) followed by the *same* response in
`minus_tokens_BxM` (M = P⁻ + N). The step

1. runs the rubric-free replay forward on `stop_gradient(params)` (θ̄): one
   forward, no backward, its rows never enter the differentiated function;
2. inside `value_and_grad`, runs the trainer forward on x⁺ rows and takes the
   per-token logprobs / entropies of the response with `rljax.logprobs`;
   their stop-gradient is π_old and ℓ⁺ at the first inner step;
3. applies the objective's token-transform chain (CoRT, TIS, MIS, BPO) and its
   policy loss with the global normalizer;
4. applies the optax update unless the loss or a gradient is not finite (then
   params and optimizer state are kept and the skip is counted).

With μ > 1 (inner epochs / mini-batches), `score_batch` computes π_old and the
replay logprobs once per batch in one fused forward, and the steps read them
from the batch.
"""
from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from rljax.objectives import broadcast_advantage, make_normalizer
from rljax.replay import replay_scores
from rljax.scoring import response_outputs
from rljax.rollout.metrics import mismatch_metrics
from rljax.sharding import mesh_scope


class TrainState(NamedTuple):
  params: Any
  opt_state: Any
  transform_state: Any
  step: jax.Array
  num_skipped: jax.Array


@dataclasses.dataclass(frozen=True)
class StepConfig:
  """Static settings of the step (a jit static argument)."""
  objective: Any                 # rljax.objectives.Objective (hashable)
  response_len: int              # N
  temperature: float = 1.0
  top_k: int = 0
  top_p: float = 1.0
  chunk_size: int = 256
  replay: bool = False           # CoRT: score the rubric-free rows
  fused_scoring: bool = True     # μ == 1: π_old = sg(π_θ) and replay inside the step
  head_k: int = 0                # trainer log p at the sampler's recorded head ids
  use_ref: bool = False          # frozen reference model for KL
  replay_policy: str = "old"     # CoRT replay scored by π_old ("old") or the reference ("ref")
  replay_mode: str = "all"       # x⁻ = no criteria ("all") or x⁺ minus criterion j ("per_criterion")
  num_criteria_ids: int = 0      # per_criterion: size of the criterion-id table (metrics)


def make_optimizer(lr: float, *, weight_decay: float = 0.0, b1: float = 0.9, b2: float = 0.999,
                   eps: float = 1e-8, grad_clip: float = 1.0, warmup_steps: int = 0,
                   total_steps: int = 0, schedule: str = "constant"):
  """AdamW with global-norm clipping and a warm-up + constant / cosine / linear schedule."""
  if schedule == "constant":
    sched = optax.constant_schedule(lr)
  elif schedule in ("cosine", "linear"):
    decay = max(total_steps - warmup_steps, 1)
    sched = (optax.cosine_decay_schedule(lr, decay) if schedule == "cosine"
             else optax.linear_schedule(lr, 0.0, decay))
  else:
    raise ValueError(f"unknown schedule {schedule!r}; valid: constant, cosine, linear")
  if warmup_steps:
    sched = optax.join_schedules([optax.linear_schedule(0.0, lr, warmup_steps), sched],
                                 [warmup_steps])
  parts = [optax.clip_by_global_norm(grad_clip)] if grad_clip else []
  parts.append(optax.adamw(sched, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay))
  return optax.chain(*parts)


def score_batch(graphdef, params, batch: dict, sc: StepConfig, ref_params=None) -> dict:
  """π_old (x⁺ rows) and, for CoRT, the replay ℓ⁺ / ℓ⁻ (rljax.replay): forward only."""
  params = jax.lax.stop_gradient(params)
  out = {"old_logp_BxN": response_outputs(graphdef, params, batch["tokens_BxL"],
                                          batch["attn_mask_BxL"], sc.response_len,
                                          sc)["logp_BxT"]}
  if sc.replay:
    rep = replay_scores(graphdef, params, ref_params, batch, sc, out["old_logp_BxN"])
    out.update({("plus_logp_BxN" if k == "logp_plus_BxN" else
                 "minus_logp_BxN" if k == "logp_minus_BxN" else k): v for k, v in rep.items()})
  return out


def _loss_batch(batch: dict, old_logp, minus_logp, norm, plus_logp=None) -> dict:
  """The objectives' batch dict (arrays without gradient)."""
  b = {"mask_BxT": batch["mask_BxN"], "adv_B": batch["adv_B"], "old_logp_BxT": old_logp,
       "sampler_logp_BxT": batch["sampler_logp_BxN"],
       "logp_plus_BxT": old_logp if plus_logp is None else plus_logp, "normalizer": norm}
  if minus_logp is not None:
    b["logp_minus_BxT"] = minus_logp
  for src, dst in (("head_ids_BxNxK", "head_ids_BxTxK"), ("head_logq_BxNxK", "head_logq_BxTxK"),
                   ("ref_logp_BxN", "ref_logp_BxT")):
    if src in batch:
      b[dst] = batch[src]
  return b


def apply_transforms(transform_state, batch: dict, scores: dict, sc: StepConfig):
  """Token advantages for a whole scored batch (the μ > 1 path): (adv_BxN, state, metrics)."""
  norm = make_normalizer(batch["mask_BxN"], max_len=sc.response_len)
  lb = _loss_batch(batch, scores["old_logp_BxN"], scores.get("minus_logp_BxN"), norm,
                   scores.get("plus_logp_BxN"))
  adv = broadcast_advantage(batch["adv_B"], batch["mask_BxN"])
  adv, ts, metrics = sc.objective.token_transform().update(adv, lb, transform_state)
  return jax.lax.stop_gradient(adv), ts, metrics


def _micro_loss(params, mb: dict, norm, transform_state, ref_params, graphdef, sc: StepConfig):
  """Loss of one micro-batch under the global normalizer; returns (loss, (ts, metrics)).

  Tokens whose trainer, π_old or sampler log-probability is not finite (a support
  mismatch under truncated scoring) are masked out of the loss and counted, instead of
  turning the whole update into NaN."""
  obj = sc.objective
  if sc.use_ref:
    mb = dict(mb, ref_logp_BxN=response_outputs(
        graphdef, jax.lax.stop_gradient(ref_params), mb["tokens_BxL"], mb["attn_mask_BxL"],
        sc.response_len, sc)["logp_BxT"])
  out = response_outputs(graphdef, params, mb["tokens_BxL"], mb["attn_mask_BxL"],
                         sc.response_len, sc, mb.get("head_ids_BxNxK") if sc.head_k else None)
  old = (jax.lax.stop_gradient(out["logp_BxT"]) if sc.fused_scoring else mb["old_logp_BxN"])
  mask = mb["mask_BxN"]
  # sampler vs trainer on every token (π_old: the batch's scoring; ±20-clipped log-ratios)
  mism = mismatch_metrics(mb["sampler_logp_BxN"], old, mask)
  finite = (jnp.isfinite(out["logp_BxT"]) & jnp.isfinite(old)
            & jnp.isfinite(mb["sampler_logp_BxN"]))
  nonfinite = (mask > 0) & ~finite
  mask = jnp.where(finite, mask, 0.0)
  safe = lambda x: jnp.where(finite, x, 0.0)
  old = safe(old)
  pol = {k: out[k] for k in ("logp_BxT", "entropy_BxT", "head_logp_BxTxK") if k in out}
  pol["logp_BxT"] = safe(pol["logp_BxT"])
  mb = dict(mb, mask_BxN=mask, sampler_logp_BxN=safe(mb["sampler_logp_BxN"]))
  rep = {}
  if sc.replay and sc.fused_scoring:  # replay: forward only, on frozen θ̄ (or the reference)
    rep = replay_scores(graphdef, params, ref_params, mb, sc, old)
    minus_logp, plus_logp = rep.pop("logp_minus_BxN"), rep.pop("logp_plus_BxN")
  else:
    minus_logp, plus_logp = mb.get("minus_logp_BxN"), mb.get("plus_logp_BxN")
  lb = _loss_batch(mb, old, minus_logp, norm, plus_logp)
  if sc.fused_scoring:
    adv = broadcast_advantage(mb["adv_B"], mask)
    adv, new_ts, t_metrics = obj.token_transform().update(adv, lb, transform_state)
  else:
    adv, new_ts, t_metrics = mb["adv_BxN"] * (mask > 0), transform_state, {}
  lb["adv_BxT"] = jax.lax.stop_gradient(adv)
  loss, l_metrics = obj.loss_fn(pol, lb)
  n_tok = jnp.maximum(mask.sum(), 1.0)
  logp_sg = jax.lax.stop_gradient(pol["logp_BxT"])
  d = jnp.clip(old - logp_sg, -20.0, 20.0)
  aux = {**{f"transform/{k}": v for k, v in t_metrics.items()},
         **{f"loss/{k}": v for k, v in l_metrics.items()},
         "actor/entropy": (safe(out["entropy_BxT"]) * mask).sum() / n_tok,
         "actor/logp_mean": (pol["logp_BxT"] * mask).sum() / n_tok,
         "actor/approx_kl": ((jnp.exp(d) - d - 1.0) * mask).sum() / n_tok,
         "actor/nonfinite_tokens": nonfinite.sum().astype(jnp.float32),
         **{f"mismatch/{k}": v for k, v in mism.items()}}
  if minus_logp is not None:
    plus = old if plus_logp is None else plus_logp
    delta = (plus - minus_logp) * mask
    aux["cort/delta_mean"] = delta.sum() / n_tok
    aux["cort/delta_abs_mean"] = jnp.abs(delta).sum() / n_tok
  aux.update({f"cort/{k}": v for k, v in rep.items()})
  return loss, (new_ts, aux)


def train_step(state: TrainState, batch: dict, ref_params, *, graphdef, optimizer,
               sc: StepConfig, grad_accum: int = 1):
  """One update over `batch` (optionally `grad_accum` micro-batches, summed under the
  whole batch's normalizer). Returns (new_state, metrics) with scalar metrics."""
  norm = make_normalizer(batch["mask_BxN"], max_len=sc.response_len)
  grad_fn = jax.value_and_grad(_micro_loss, has_aux=True)
  args = (ref_params, graphdef, sc)
  if grad_accum == 1:
    (loss, (new_ts, aux)), grads = grad_fn(state.params, batch, norm, state.transform_state, *args)
  else:
    micro = jax.tree.map(lambda x: x.reshape(grad_accum, x.shape[0] // grad_accum, *x.shape[1:]),
                         batch)

    def body(acc, mb):
      (l, (ts, aux)), g = grad_fn(state.params, mb, norm, state.transform_state, *args)
      return jax.tree.map(jnp.add, acc, (l, g)), (ts, aux)

    zero = (jnp.zeros(()), jax.tree.map(jnp.zeros_like, state.params))
    (loss, grads), (ts_all, aux_all) = jax.lax.scan(body, zero, micro)
    new_ts = jax.tree.map(lambda x: x[-1], ts_all)
    aux = jax.tree.map(lambda x: x.mean(0), aux_all)
  grad_norm = optax.global_norm(grads)
  finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)

  # A `lax.cond`, not `jnp.where(finite, new, old)` over the state: with the where, the
  # new-moment and new-parameter fusions both read the old (donated) moments, so XLA
  # copied every AdamW moment at entry and kept the copies through the backward pass
  # (1.08 GB of SmolLM2's 2.47 GB of temporaries); inside the branch the update is in place.
  def apply(_):
    updates, new_opt = optimizer.update(grads, state.opt_state, state.params)
    return optax.apply_updates(state.params, updates), new_opt, new_ts

  new_params, new_opt, new_ts = jax.lax.cond(
      finite, apply, lambda _: (state.params, state.opt_state, state.transform_state), None)
  new_state = TrainState(params=new_params, opt_state=new_opt, transform_state=new_ts,
                         step=state.step + 1,
                         num_skipped=state.num_skipped + (~finite).astype(jnp.int32))
  metrics = {"loss": loss, "actor/grad_norm": grad_norm,
             "actor/update_skipped": (~finite).astype(jnp.float32),
             "actor/num_skipped": new_state.num_skipped, **aux}
  return new_state, {k: jnp.asarray(v, jnp.float32) for k, v in metrics.items()}


def init_state(params, optimizer, objective) -> TrainState:
  """Fresh state, jitted so that optimizer moments inherit the params' shardings and the
  scalars land replicated on the same devices."""

  def make(params):
    return TrainState(params=params, opt_state=optimizer.init(params),
                      transform_state=objective.token_transform().init(),
                      step=jnp.zeros((), jnp.int32), num_skipped=jnp.zeros((), jnp.int32))

  return jax.jit(make)(params)


def jit_train_step(graphdef, optimizer, sc: StepConfig, grad_accum: int = 1,
                   state_shardings=None, batch_shardings=None, ref_shardings=None,
                   replicated=None):
  """`jax.jit` of `train_step` with explicit shardings, donating the state."""
  def fn(state, batch, ref):
    with mesh_scope(state_shardings):
      return train_step(state, batch, ref, graphdef=graphdef, optimizer=optimizer, sc=sc,
                        grad_accum=grad_accum)

  if state_shardings is None:
    return jax.jit(fn, donate_argnums=(0,))
  return jax.jit(fn, donate_argnums=(0,),
                 in_shardings=(state_shardings, batch_shardings, ref_shardings),
                 out_shardings=(state_shardings, replicated))
