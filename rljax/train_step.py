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

With LoRA (`StepConfig.lora`, rljax.models.lora) the state's params are the adapters and
the frozen base comes in as `ref_params`: only the adapters are differentiated, and the base
with the adapters off is the reference policy.
"""
from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from rljax import registry
from rljax.objectives import broadcast_advantage, make_normalizer
from rljax.objectives.common import require
from rljax.objectives.transforms import credit_metrics
from rljax.replay import replay_scores
from rljax.scoring import batch_pack, policy_params, response_outputs
from rljax.rollout.metrics import mismatch_metrics
from rljax.sharding import mesh_scope


OLD_POLICIES = ("decoupled", "bypass")


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
  old_policy: str = "decoupled"  # π_old re-scored by the trainer | "bypass": π_old := log q
  lora: bool = False             # params are LoRA adapters over the frozen base `ref_params`
  tokens_per_row: int = 0        # packed rows (rljax.packing) when the batch carries a plan
  pack_group: int = 0            # rows per packing unit (0: a group of G; the fused step: B)


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


def truncated(sc: StepConfig) -> bool:
  """Whether the step scores π_θ under the sampler's top-k / top-p truncation."""
  return bool(sc.top_k) or sc.top_p < 1.0


def score_batch(graphdef, params, batch: dict, sc: StepConfig, ref_params=None) -> dict:
  """π_old (x⁺ rows) and, for CoRT, the replay ℓ⁺ / ℓ⁻ (rljax.replay): forward only. In
  bypass mode (π_old := the sampler's log q) the x⁺ forward is skipped unless the replay
  needs ℓ⁺ (then it is returned as `plus_logp_BxN`, never as π_old)."""
  params = jax.lax.stop_gradient(params)
  out = {}
  if sc.old_policy != "bypass":
    base, adapters = policy_params(params, ref_params, sc)
    out["old_logp_BxN"] = response_outputs(graphdef, base, batch["tokens_BxL"],
                                           batch["attn_mask_BxL"], sc.response_len,
                                           sc, adapters=adapters,
                                           pack=batch_pack(batch, "plus", sc))["logp_BxT"]
  if sc.replay:
    rep = replay_scores(graphdef, params, ref_params, batch, sc, out.get("old_logp_BxN"))
    out.update({("plus_logp_BxN" if k == "logp_plus_BxN" else
                 "minus_logp_BxN" if k == "logp_minus_BxN" else k): v for k, v in rep.items()})
  return out


def tokens_in_loss(sc: StepConfig, batch: dict, p_logp):
  """The one definition of the response tokens in the loss, used by the normalizer, the
  transforms (CoRT's per-response normalization), the losses and every per-token metric.

  A token is in the loss if it is a response token (`mask_BxN`), the trainer's score p of it
  (`p_logp`: π_old, the trainer's score of the batch; None in bypass mode at μ > 1, where the
  trainer does not score it) and the sampler's log q are finite (under truncated scoring p =
  0 where the supports differ), and no rejection transform rejects it. With the rejection's
  `baseline="kept"` the group advantages are recomputed over the responses that keep a token.
  The mismatch diagnostics are taken over the finite tokens before rejection (what the
  treatments acted on). Returns (batch with mask / sampler_logp / adv_B replaced, p with 0
  off the loss, metrics)."""
  obj = sc.objective
  mask, q = batch["mask_BxN"], batch["sampler_logp_BxN"]
  finite = jnp.isfinite(q) if p_logp is None else jnp.isfinite(q) & jnp.isfinite(p_logp)
  metrics = {"actor/nonfinite_tokens": ((mask > 0) & ~finite).sum().astype(jnp.float32)}
  mask = jnp.where(finite, mask, 0.0)
  q = jnp.where(finite, q, 0.0)
  if p_logp is not None:
    p_logp = jnp.where(finite, p_logp, 0.0)
    metrics.update({f"mismatch/{k}": v for k, v in
                    mismatch_metrics(q, p_logp, mask, by_length=True).items()})
  adv_B = batch["adv_B"]
  keep = obj.token_transform().keep
  if keep is not None:
    if p_logp is None:
      raise ValueError("rejection reads the trainer's π_old, which bypass mode does not score "
                       "at μ > 1; use old_policy='decoupled' or one update per batch")
    kept, k_metrics = keep({"mask_BxT": mask, "old_logp_BxT": p_logp, "sampler_logp_BxT": q})
    metrics.update({f"transform/{k}": v for k, v in k_metrics.items()})
    mask = jnp.where(kept, mask, 0.0)
    if obj.baseline_over_kept:
      rewards = require(batch, "rewards_B", "the group baseline over the kept responses")
      adv_B, a_metrics = obj.advantages(rewards, jnp.any(mask > 0, axis=-1))
      metrics.update(a_metrics)
  return dict(batch, mask_BxN=mask, sampler_logp_BxN=q, adv_B=adv_B), p_logp, metrics


def _loss_batch(batch: dict, old_logp, minus_logp, norm, plus_logp=None) -> dict:
  """The objectives' batch dict (arrays without gradient)."""
  b = {"mask_BxT": batch["mask_BxN"], "adv_B": batch["adv_B"], "old_logp_BxT": old_logp,
       "sampler_logp_BxT": batch["sampler_logp_BxN"],
       "logp_plus_BxT": old_logp if plus_logp is None else plus_logp, "normalizer": norm}
  if minus_logp is not None:
    b["logp_minus_BxT"] = minus_logp
  for src, dst in (("head_ids_BxNxK", "head_ids_BxTxK"), ("head_logq_BxNxK", "head_logq_BxTxK"),
                   ("ref_logp_BxN", "ref_logp_BxT"), ("credit_label_BxN", "credit_label_BxT")):
    if src in batch:
      b[dst] = batch[src]
  return b


def apply_transforms(transform_state, batch: dict, scores: dict, sc: StepConfig):
  """Token advantages for a whole scored batch (the μ > 1 path): (adv_BxN, state, metrics).
  `batch` is already restricted to the tokens in the loss (`tokens_in_loss`)."""
  norm = make_normalizer(batch["mask_BxN"], max_len=sc.response_len)
  lb = _loss_batch(batch, scores["old_logp_BxN"], scores.get("minus_logp_BxN"), norm,
                   scores.get("plus_logp_BxN"))
  adv0 = broadcast_advantage(batch["adv_B"], batch["mask_BxN"])
  adv, ts, metrics = sc.objective.token_transform().update(adv0, lb, transform_state)
  metrics.update(credit_metrics(adv0, adv, lb))
  return jax.lax.stop_gradient(adv), ts, metrics


def _micro_loss(params, mb: dict, norm, transform_state, ref_params, graphdef, sc: StepConfig):
  """Loss of one micro-batch under the global normalizer; returns (loss, (ts, metrics)).

  Fused (μ = 1): π_old = sg(π_θ) (decoupled) or the sampler's log q (bypass), and the tokens
  in the loss are chosen here (`tokens_in_loss`); with `norm` None the normalizer is built from
  them. Otherwise the batch arrives restricted to them (`update_batch`), and a token the
  current π_θ gives probability 0 (truncated scoring, after an update) stays in the loss at the
  ratio floor e^−20 that every ratio is clipped to, with zero gradient."""
  obj = sc.objective
  pack = batch_pack(mb, "plus", sc)
  if sc.use_ref:
    mb = dict(mb, ref_logp_BxN=response_outputs(
        graphdef, jax.lax.stop_gradient(ref_params), mb["tokens_BxL"], mb["attn_mask_BxL"],
        sc.response_len, sc, pack=pack)["logp_BxT"])
  base, adapters = policy_params(params, ref_params, sc)  # LoRA: the adapters are differentiated
  out = response_outputs(graphdef, base, mb["tokens_BxL"], mb["attn_mask_BxL"],
                         sc.response_len, sc, mb.get("head_ids_BxNxK") if sc.head_k else None,
                         adapters=adapters, pack=pack)
  logp_sg = jax.lax.stop_gradient(out["logp_BxT"])
  bypass = sc.old_policy == "bypass"
  if sc.fused_scoring:
    mb, p_old, sel = tokens_in_loss(sc, mb, logp_sg)
    if norm is None:
      norm = make_normalizer(mb["mask_BxN"], max_len=sc.response_len)
    old = mb["sampler_logp_BxN"] if bypass else p_old
  else:
    p_old, old, sel = None, mb["old_logp_BxN"], {}
    if bypass:  # no π_old forward: the diagnostics compare this update's π_θ with q
      sel = {f"mismatch/{k}": v for k, v in mismatch_metrics(
          mb["sampler_logp_BxN"], jnp.where(jnp.isfinite(logp_sg), logp_sg, 0.0),
          mb["mask_BxN"] * jnp.isfinite(logp_sg)).items()}
  mask = mb["mask_BxN"]
  finite = jnp.isfinite(out["logp_BxT"])
  pol = {k: out[k] for k in ("logp_BxT", "entropy_BxT", "head_logp_BxTxK") if k in out}
  pol["logp_BxT"] = jnp.where(finite, out["logp_BxT"],
                              jax.lax.stop_gradient(old) - obj.loss_cfg.log_ratio_clip)
  pol["entropy_BxT"] = jnp.where(jnp.isfinite(out["entropy_BxT"]), out["entropy_BxT"], 0.0)
  rep = {}
  if sc.replay and sc.fused_scoring:  # replay: forward only, on frozen θ̄ (or the reference)
    rep = replay_scores(graphdef, params, ref_params, mb, sc, p_old)
    minus_logp, plus_logp = rep.pop("logp_minus_BxN"), rep.pop("logp_plus_BxN")
  else:
    minus_logp, plus_logp = mb.get("minus_logp_BxN"), mb.get("plus_logp_BxN")
  if plus_logp is None and minus_logp is not None and bypass:
    raise ValueError("bypass mode: the replay needs the trainer's ℓ⁺ (plus_logp_BxN), not q")
  lb = _loss_batch(mb, old, minus_logp, norm, plus_logp)
  if sc.fused_scoring:
    adv0 = broadcast_advantage(mb["adv_B"], mask)
    adv, new_ts, t_metrics = obj.token_transform().update(adv0, lb, transform_state)
    t_metrics.update(credit_metrics(adv0, adv, lb))
  else:
    adv, new_ts, t_metrics = mb["adv_BxN"] * (mask > 0), transform_state, {}
  lb["adv_BxT"] = jax.lax.stop_gradient(adv)
  loss, l_metrics = obj.loss_fn(pol, lb)
  n_tok = jnp.maximum(mask.sum(), 1.0)
  d = jnp.clip(old - jax.lax.stop_gradient(pol["logp_BxT"]), -20.0, 20.0)
  aux = {**{f"transform/{k}": v for k, v in t_metrics.items()},
         **{f"loss/{k}": v for k, v in l_metrics.items()},
         "actor/entropy": (pol["entropy_BxT"] * mask).sum() / n_tok,
         "actor/logp_mean": (jax.lax.stop_gradient(pol["logp_BxT"]) * mask).sum() / n_tok,
         "actor/approx_kl": ((jnp.exp(d) - d - 1.0) * mask).sum() / n_tok,
         "actor/tokens_in_loss": (mask > 0).sum().astype(jnp.float32),
         "actor/zero_prob_tokens": ((mask > 0) & ~finite).sum().astype(jnp.float32),
         **sel}
  aux.setdefault("actor/nonfinite_tokens", jnp.float32(0.0))
  if minus_logp is not None:
    plus = old if plus_logp is None else plus_logp
    delta = (plus - minus_logp) * mask
    aux["cort/delta_mean"] = delta.sum() / n_tok
    aux["cort/delta_abs_mean"] = jnp.abs(delta).sum() / n_tok
  aux.update({f"cort/{k}": v for k, v in rep.items()})
  return loss, (new_ts, aux)


def check_step(sc: StepConfig, grad_accum: int = 1) -> None:
  """Combinations the step refuses at trace time (`rljax.config_check` refuses them first)."""
  if sc.old_policy not in OLD_POLICIES:
    raise ValueError(f"old_policy {sc.old_policy!r}; valid: {', '.join(OLD_POLICIES)}")
  obj = sc.objective
  if sc.fused_scoring and grad_accum > 1 and (truncated(sc) or obj.rejects):
    raise ValueError(
        "the fused step with grad_accum > 1 builds the normalizer before the forward, but with "
        + ("truncated scoring" if truncated(sc) else "rejection")
        + " the tokens in the loss are known only after it; score π_old first "
        "(StepConfig(fused_scoring=False), what the trainer does) or use grad_accum = 1")
  if truncated(sc) and "score_centering" in registry.get("loss", obj.loss).tags:
    raise ValueError(
        f"{obj.loss} centers the score over the sampler's head, where the truncated trainer "
        "distribution gives log p = -inf to ids outside its own top-k / top-p; score the full "
        "distribution (train.truncate_logprobs=False)")


def train_step(state: TrainState, batch: dict, ref_params, *, graphdef, optimizer,
               sc: StepConfig, grad_accum: int = 1):
  """One update over `batch` (optionally `grad_accum` micro-batches, summed under the
  whole batch's normalizer). Returns (new_state, metrics) with scalar metrics."""
  check_step(sc, grad_accum)
  rows, g = batch["mask_BxN"].shape[0], sc.pack_group or sc.objective.group_size
  if any(k.startswith("pack_") for k in batch) and (rows // grad_accum) % g:
    raise ValueError(f"packed rows are planned per unit of {g} rows: {rows} rows in "
                     f"{grad_accum} micro-batches (train.grad_accum) split a unit")
  if sc.fused_scoring and grad_accum == 1:
    norm = None  # built inside, from the tokens in the loss
  else:  # global over the micro-batches: their masks are final before the step
    norm = make_normalizer(batch["mask_BxN"] * jnp.isfinite(batch["sampler_logp_BxN"]),
                           max_len=sc.response_len)
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
