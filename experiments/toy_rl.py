"""RL on the synthetic rubric language (`rubric_toy`) with a tiny rljax Decoder, over the
library's own pieces: `rljax.models` (the decoder), `rljax.rollout` (the sampler, rollout
copies and `SamplerSync` staleness), `rljax.objectives` (advantages, transforms, losses)
and the trainer's stages (`rljax.loop.collect` with DAPO dynamic sampling,
`rljax.loop.assemble`, `rljax.update.jit_update`: the μ = 1 fused step or the μ > 1
mini-batch scan). Only the data, the reward and the model size are the toy's.

    graphdef, params, info = warm_start(cache_dir)     # supervised, cached
    res = train(RunSpec(loss="grpo", transforms=("cort",)), graphdef, params, heldout)
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from experiments import rubric_toy as toy
from rljax.loop import Keys, Prompts, Rollouts, assemble, collect, needs_ref_params
from rljax.loop import update_metrics
from rljax.loop.pipeline import RolloutPipeline
from rljax.models import ModelConfig, create_model
from rljax.objectives import build_objective, needs_replay
from rljax.rollout import SamplerConfig, SamplerSync, generate
from rljax.scoring import response_outputs
from rljax.train_step import StepConfig, init_state, make_optimizer
from rljax.update import jit_update

N_NEW = toy.MAX_LEN + 2       # response slots: 8 content tokens + eos, one spare (length clip)


def n_new(max_len: int) -> int:
  """Response slots for answers of up to `max_len` content tokens: + eos, one spare."""
  return max_len + 2
MINUS_LEN = 3                 # <bos> R <ans>

MODEL = dict(model_type="qwen3", vocab_size=toy.VOCAB, hidden_size=64, intermediate_size=128,
             num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16, qk_norm=True,
             tie_embeddings=True, eos_token_id=toy.EOS, max_position_embeddings=64)
SFT = dict(steps=400, batch=128, lr=3e-3, p_follow=1.0, p_rubric_free=0.2, seed=0)


def model_config() -> ModelConfig:
  return ModelConfig(**MODEL)


def left_pad(rows, length: int):
  ids = np.full((len(rows), length), toy.PAD, np.int32)
  mask = np.zeros_like(ids)
  for i, r in enumerate(rows):
    ids[i, length - len(r):], mask[i, length - len(r):] = r, 1
  return ids, mask


def right_pad(rows, length: int):
  ids = np.full((len(rows), length), toy.PAD, np.int32)
  mask = np.zeros_like(ids)
  for i, r in enumerate(rows):
    ids[i, :len(r)], mask[i, :len(r)] = r, 1
  return ids, mask


# --------------------------------------------------------------------- warm start


def warm_start_path(cache_dir: str, **overrides) -> str:
  """Where `warm_start` caches the params of this config (a hash of it and of MODEL)."""
  cfg = dict(SFT, **overrides)
  tag = hashlib.sha1(json.dumps([cfg, MODEL], sort_keys=True).encode()).hexdigest()[:10]
  return os.path.join(cache_dir, f"warm_start_{tag}.npz")


def warm_start(cache_dir: str | None = None, **overrides) -> tuple[Any, dict, dict]:
  """(graphdef, params pure dict, info) of the supervised warm start: next-token
  cross-entropy on `rubric_toy.sft_example`s. Cached in `cache_dir` (npz) by its config."""
  cfg = dict(SFT, **overrides)
  lens = dict(min_len=cfg.get("min_len", 4), max_len=cfg.get("max_len", toy.MAX_LEN))
  slots = n_new(lens["max_len"])
  model = create_model(model_config(), seed=cfg["seed"])
  graphdef, state = nnx.split(model)
  params = nnx.to_pure_dict(state)
  path = cache_dir and warm_start_path(cache_dir, **overrides)
  if path and os.path.exists(path):
    flat = dict(np.load(path))
    leaves, treedef = jax.tree_util.tree_flatten_with_path(params)
    params = jax.tree_util.tree_unflatten(
        treedef, [jnp.asarray(flat[jax.tree_util.keystr(p)]) for p, _ in leaves])
    return graphdef, params, json.load(open(path[:-4] + ".json"))
  t0 = time.time()
  sc = StepConfig(objective=None, response_len=slots)
  opt = optax.adam(cfg["lr"])

  def loss_fn(p, ids, mask, tgt_mask):
    lp = response_outputs(graphdef, p, ids, mask, slots, sc)["logp_BxT"]
    return -(lp * tgt_mask).sum() / tgt_mask.sum()

  @jax.jit
  def step(p, o, ids, mask, tgt_mask):
    loss, g = jax.value_and_grad(loss_fn)(p, ids, mask, tgt_mask)
    upd, o = opt.update(g, o, p)
    return optax.apply_updates(p, upd), o, loss

  rng = np.random.default_rng(cfg["seed"])
  o = opt.init(params)
  losses = []
  for _ in range(cfg["steps"]):
    ex = [toy.sft_example(rng, cfg["p_follow"], cfg["p_rubric_free"], **lens)
          for _ in range(cfg["batch"])]
    pi, pm = left_pad([a for a, _ in ex], toy.MAX_PROMPT)
    ri, rm = right_pad([b for _, b in ex], slots)
    params, o, loss = step(params, o, np.concatenate([pi, ri], 1),
                           np.concatenate([pm, rm], 1), rm.astype(np.float32))
    losses.append(float(loss))
  info = {"config": cfg, "loss_first": losses[0], "loss_last": float(np.mean(losses[-20:])),
          "runtime_s": round(time.time() - t0, 1)}
  if path:
    os.makedirs(cache_dir, exist_ok=True)
    flat = {jax.tree_util.keystr(p): np.asarray(v)
            for p, v in jax.tree_util.tree_flatten_with_path(params)[0]}
    np.savez(path, **flat)
    json.dump(info, open(path[:-4] + ".json", "w"))
  return graphdef, params, info


# --------------------------------------------------------------------- RL


@dataclasses.dataclass(frozen=True)
class RunSpec:
  """One RL run (the objective names are registry names, as in configs/*.py)."""
  advantage: str = "grpo"
  loss: str = "grpo"
  transforms: tuple[str, ...] = ()
  transform_kwargs: tuple = ()              # ((name, ((k, v), ...)), ...) hashable
  loss_kwargs: tuple = ()
  advantage_kwargs: tuple = ()
  reward: str = "csr"                       # csr | aon
  steps: int = 60
  prompts_per_step: int = 16
  num_generations: int = 8
  lr: float = 1e-3
  epochs: int = 1                           # μ = epochs × num_minibatches updates per batch
  num_minibatches: int = 1
  dynamic_sampling: bool = False            # DAPO: resample groups whose rewards are all equal
  max_resample: int = 3                     # extra rollouts; still uninformative: dropped
  replay_mode: str = "all"                  # CoRT replay: all | per_criterion
  replay_policy: str = "old"                # CoRT replay scored by π_old | the initial params
  copy: str = "none"                        # sampler rollout copy (rljax.rollout.RolloutCopy)
  sync_every: int = 1                       # staleness: sampler re-synced every N steps
  async_lag: int = 0                        # > 0: the asynchronous loop (RolloutPipeline,
                                            # threaded): batch t from version max(0, t - k)
  record_topk: int = 0                      # sampler head recorded (SC: the full vocabulary)
  max_len: int = toy.MAX_LEN                # content tokens an answer may have (+ eos, spare)
  credit_labels: bool = False               # ground-truth credit labels in the batch
  eval_every: int = 10
  seed: int = 0

  def objective(self):
    return build_objective(advantage=self.advantage, loss=self.loss,
                           transforms=self.transforms, num_generations=self.num_generations,
                           advantage_kwargs=dict(self.advantage_kwargs),
                           loss_kwargs=dict(self.loss_kwargs),
                           transform_kwargs={n: dict(kw) for n, kw in self.transform_kwargs},
                           sampler_topk=self.record_topk, vocab_size=toy.VOCAB)


def _sampler_cfg(spec: RunSpec, **kw) -> SamplerConfig:
  return SamplerConfig(max_new_tokens=n_new(spec.max_len), temperature=1.0,
                       num_generations=spec.num_generations,
                       stop_token_ids=(toy.EOS,), record_topk=spec.record_topk,
                       pad_token_id=toy.PAD).replace(**kw)


def evaluate(graphdef, params, heldout, key, samples: int = 4, slots: int = N_NEW) -> dict:
  """Held-out metrics of the trainer policy: sampled at temperature 1 (`samples` per prompt,
  fixed key) and greedy."""
  ids, mask = left_pad([toy.plus_tokens(p) for p in heldout], toy.MAX_PROMPT)
  model = nnx.merge(graphdef, params)
  out = {}
  for name, cfg in (("sampled", SamplerConfig(max_new_tokens=slots, temperature=1.0,
                                               num_generations=samples,
                                               stop_token_ids=(toy.EOS,))),
                    ("greedy", SamplerConfig(max_new_tokens=slots, temperature=0.0,
                                             stop_token_ids=(toy.EOS,)))):
    r = generate(model, ids, mask, key, cfg)
    toks = np.asarray(r.tokens_BxN)
    rep = [p for p in heldout for _ in range(cfg.num_generations)]
    m = toy.eval_metrics(rep, list(toks))
    m["length_clip_ratio"] = float(np.mean(np.asarray(r.truncated_B)))
    m["length_mean"] = float(np.asarray(r.mask_BxN).sum(1).mean())
    out.update({f"{name}/{k}": v for k, v in m.items()})
  return out


def _rollout(sampler, prompts, key, scfg, per_criterion: bool, labels: bool = False) -> Rollouts:
  """One toy rollout batch as the library's `Rollouts` (the toy's prompts and rewards)."""
  plus = left_pad([toy.plus_tokens(p) for p in prompts], toy.MAX_PROMPT)
  minus = left_pad([toy.minus_tokens(p) for p in prompts], MINUS_LEN)
  crit = (None, None, None)
  if per_criterion:  # x⁺ minus criterion j; criterion id = its type
    c = toy.MAX_CRITERIA
    ids = np.full((len(prompts), c, toy.MAX_PROMPT), toy.PAD, np.int32)
    mask, cid = np.zeros_like(ids), np.full((len(prompts), c), -1, np.int32)
    for i, p in enumerate(prompts):
      for j, row in enumerate(toy.ablation_tokens(p)):
        ids[i, j], mask[i, j] = (a[0] for a in left_pad([row], toy.MAX_PROMPT))
        cid[i, j] = toy.TYPES.index(p.criteria[j][0])
    crit = (ids, mask, cid)
  r = jax.tree.map(np.asarray, generate(sampler, plus[0], plus[1], key, scfg))
  g = scfg.num_generations
  rows = [p for p in prompts for _ in range(g)]
  rw = toy.rewards(rows, list(r.tokens_BxN))
  info = {"csr": rw["csr_B"], "aon": rw["aon_B"]}
  if labels:
    info["credit_label"] = np.stack([toy.credit_labels(p, t) for p, t in zip(rows, r.tokens_BxN)])
  return Rollouts(r=r, prompts=Prompts(r.prompt_ids_BxP[::g], r.prompt_mask_BxP[::g], *minus,
                                       *crit), rewards=None, info=info, examples=None)


def train(spec: RunSpec, graphdef, init_params, heldout, log=None) -> dict:
  """One RL run from `init_params`; returns {history: [per-step metrics], evals: [...]}.
  The stages are the trainer's (`rljax.loop.collect` with DAPO dynamic sampling,
  `rljax.loop.assemble`, `rljax.update.jit_update`, `rljax.loop.Keys`); only the prompts,
  the reward and the model size are the toy's."""
  t_start = time.time()
  obj = spec.objective()
  g, mu = spec.num_generations, spec.epochs * spec.num_minibatches
  replay = needs_replay(spec.transforms)
  per_criterion = replay and spec.replay_mode == "per_criterion"
  slots = n_new(spec.max_len)
  sc = StepConfig(objective=obj, response_len=slots, temperature=1.0, replay=replay,
                  fused_scoring=mu == 1, head_k=toy.VOCAB if spec.record_topk == -1
                  else spec.record_topk, replay_mode=spec.replay_mode,
                  replay_policy=spec.replay_policy, num_criteria_ids=len(toy.TYPES))
  optimizer = make_optimizer(spec.lr, grad_clip=1.0, total_steps=spec.steps)
  params = jax.tree.map(jnp.copy, init_params)
  ref = jax.tree.map(jnp.copy, init_params) if needs_ref_params(sc) else None
  state = init_state(params, optimizer, obj)
  update = jit_update(graphdef, optimizer, sc, epochs=spec.epochs,
                      num_minibatches=spec.num_minibatches)
  sync = SamplerSync(spec.copy, every=spec.sync_every)
  scfg = _sampler_cfg(spec)
  rng = np.random.default_rng(1000 + spec.seed)
  keys = Keys(spec.seed)
  eval_key = jax.random.key(12345)  # the same held-out samples' keys for every run
  reward = lambda roll: dataclasses.replace(roll, rewards=roll.info[spec.reward], info=dict(
      roll.info, accuracy=roll.info[spec.reward]))
  history, evals = [], []

  def draw(batch: int, sampler) -> Rollouts:  # rollout batch `batch` with its own keys
    one = lambda key: reward(_rollout(sampler, toy.prompts(rng, spec.prompts_per_step,
                                                           heldout=False), key, scfg,
                                      per_criterion, spec.credit_labels))
    return collect(one, keys.rollout(batch), group_size=g,
                   dynamic_sampling=spec.dynamic_sampling, max_resample=spec.max_resample,
                   resample_key=lambda attempt: keys.resample(batch, attempt))

  pipeline = None
  if spec.async_lag:
    if spec.sync_every != 1:
      raise ValueError(f"async_lag={spec.async_lag} with sync_every={spec.sync_every}: the "
                       "asynchronous loop launches every batch with the newest version")
    # the learner donates its state to the update, so the sampler thread holds a copy
    fresh = lambda step: (sync.params(step, nnx.merge(graphdef, jax.tree.map(
        jnp.copy, state.params)), private=True), step)
    pipeline = RolloutPipeline(draw, fresh, lag=spec.async_lag, overlap=True, stop=spec.steps)
    pipeline.start(0)
  for step in range(spec.steps):
    if step % spec.eval_every == 0:
      evals.append({"step": step, **evaluate(graphdef, state.params, heldout, eval_key,
                                             slots=slots)})
    if pipeline is not None:
      drawn, _ = pipeline.get(step)
      roll, lag = drawn.roll, step - drawn.version
    else:
      roll = draw(step, sync.params(step, nnx.merge(graphdef, state.params)))
      lag = sync.lag(step)
    batch = assemble(roll, obj, replay=replay, per_criterion=per_criterion,
                     head=spec.record_topk != 0)
    if spec.credit_labels:
      batch = batch._replace(credit_label_BxN=roll.info["credit_label"].astype(np.float32))
    state, m = update(state, batch.arrays(), ref, keys.update(step))
    m = update_metrics(jax.device_get(m), toy.TYPES)
    keep = 1.0 if roll.keep_groups is None else float(np.mean(roll.keep_groups))
    m.update({"step": step + 1, "reward/csr": float(roll.info["csr"].mean()),
              "reward/aon": float(roll.info["aon"].mean()),
              "response/length_clip_ratio": float(np.mean(np.asarray(roll.r.truncated_B))),
              "response/length_mean": float(np.asarray(roll.r.mask_BxN).sum(1).mean()),
              "rollout/lag": lag, "rollout/kept_groups": keep,
              "rollout/resample_tries": roll.resample_tries})
    history.append(m)
    if log:
      log(m)
  if pipeline is not None:
    pipeline.close()
  evals.append({"step": spec.steps, **evaluate(graphdef, state.params, heldout, eval_key,
                                               slots=slots)})
  return {"history": history, "evals": evals, "runtime_s": round(time.time() - t_start, 1)}
