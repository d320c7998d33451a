"""Validation of a run config before anything loads or compiles.

Every check raises `ConfigError` naming the config key and what is valid; names
are checked against `rljax.registry` (never against a hand-kept list), the
objective combination by `rljax.objectives.validate`, the sampler settings by
`SamplerConfig`, the rollout copy by `RolloutCopy.parse`.
"""
from __future__ import annotations

import math
import os
import warnings

import ml_collections as mlc

from rljax import registry
from rljax.models.config import ATTENTION_IMPLS
from rljax.objectives import validate as validate_objective
from rljax.replay import REPLAY_MODES, REPLAY_POLICIES
from rljax.rollout import RolloutCopy, SamplerConfig

DATASETS = ("rubric", "jsonl", "math")


class ConfigError(ValueError):
  pass


def _need(ok: bool, key: str, msg: str) -> None:
  if not ok:
    raise ConfigError(f"config.{key}: {msg}")


def resolve_ramp(kwargs: dict, steps: int) -> dict:
  """A float `ramp_steps` in (0, 1] is that fraction of the run's `steps` (at least 1)."""
  r = kwargs.get("ramp_steps")
  if isinstance(r, float):
    if not 0 < r <= 1:
      raise ConfigError(f"config.objective.transform_kwargs: ramp_steps={r} as a float is a "
                        "fraction of train.steps and must be in (0, 1]; give an int for steps")
    kwargs = dict(kwargs, ramp_steps=max(1, round(r * steps)))
  return kwargs


def objective_kwargs(cfg: mlc.ConfigDict, vocab_size: int | None = None) -> dict:
  o = cfg.objective
  return dict(advantage=o.advantage, loss=o.loss, transforms=tuple(o.transforms),
              num_generations=cfg.rollout.num_generations,
              advantage_kwargs=dict(o.advantage_kwargs), loss_kwargs=dict(o.loss_kwargs),
              transform_kwargs={k: resolve_ramp(dict(v), cfg.train.steps)
                                for k, v in dict(o.transform_kwargs).items()},
              sampler_topk=cfg.rollout.record_topk, vocab_size=vocab_size)


def reads_sampler_probs(cfg: mlc.ConfigDict) -> list[str]:
  """The configured pieces that read the sampler's probabilities q (registry tags)."""
  o, out = cfg.objective, []
  for n in o.transforms:
    if "mismatch_weight" in (getattr(registry.get("transform", n), "tags", ()) or ()):
      out.append(f"transform {n!r}")
  ltags = getattr(registry.get("loss", o.loss), "tags", ()) or ()
  if "needs_head" in ltags or "score_centering" in ltags:
    out.append(f"loss {o.loss!r}")
  elif dict(o.loss_kwargs).get("is_weight", "none") != "none":
    out.append(f"loss {o.loss!r} with is_weight={dict(o.loss_kwargs)['is_weight']!r}")
  return out


def sampler_config(cfg: mlc.ConfigDict, stop_ids=None, pad_id: int = 0) -> SamplerConfig:
  r = cfg.rollout
  return SamplerConfig(max_new_tokens=r.max_new_tokens, temperature=float(r.temperature),
                       top_k=r.top_k, top_p=float(r.top_p), num_generations=r.num_generations,
                       record_topk=r.record_topk, stop_token_ids=stop_ids, pad_token_id=pad_id,
                       compact_every=r.get("compact_every", 0),
                       decode_kernel=r.get("decode_kernel", "auto"))


def validate_config(cfg: mlc.ConfigDict, num_devices: int) -> list[str]:
  """Raises ConfigError on the first problem; returns warnings (e.g. REAL's forced scale)."""
  from rljax.models.bundled import resolve
  d, t, o, opt = cfg.data, cfg.train, cfg.objective, cfg.optim
  # model
  _need(cfg.model.param_dtype in ("float32", "bfloat16"), "model.param_dtype",
        f"{cfg.model.param_dtype!r}; valid: float32, bfloat16")
  _need(cfg.model.dtype in ("float32", "bfloat16"), "model.dtype",
        f"{cfg.model.dtype!r}; valid: float32, bfloat16")
  remat = cfg.model.remat
  _need(remat in (False, True, "none", "dots", "full"), "model.remat",
        f"{remat!r}; valid: none, dots, full")
  block = cfg.model.get("causal_block", 64)
  _need(isinstance(block, int) and block >= 0, "model.causal_block",
        f"{block!r}; valid: 0 (one [T, T] block) or a positive number of queries")
  attention = cfg.model.attention
  _need(attention in ATTENTION_IMPLS, "model.attention",
        f"{attention!r}; valid: {', '.join(ATTENTION_IMPLS)}")
  try:
    path = resolve(cfg.model.path)
  except FileNotFoundError as e:
    raise ConfigError(f"config.model.path: {e}") from e
  _need(os.path.exists(path), "model.path", f"checkpoint {path!r} does not exist (a HF "
        "directory with config.json + *.safetensors, a .gguf file, or 'smollm2')")
  # placement: the trainer's mesh covers the devices the sampler does not take
  r = cfg.rollout
  from rljax.loop.placement import PLACEMENTS
  _need(r.placement in PLACEMENTS, "rollout.placement",
        f"{r.placement!r}; valid: {', '.join(PLACEMENTS)}")
  for key in ("max_staleness", "lag", "num_devices", "compact_every"):
    _need(isinstance(r[key], int) and r[key] >= 0, f"rollout.{key}",
          f"must be an int >= 0, got {r[key]!r}")
  if r.placement == "disaggregated":
    _need(1 <= r.num_devices < num_devices, "rollout.num_devices",
          f"{r.num_devices}: disaggregated needs 1 <= num_devices < the {num_devices} "
          "devices (the trainer takes the rest)")
    _need(r.lag == 0, "rollout.lag", "is the colocated schedule; with placement="
          "disaggregated set rollout.max_staleness instead")
    num_devices -= r.num_devices
  else:
    _need(r.max_staleness == 0, "rollout.max_staleness",
          f"{r.max_staleness} needs rollout.placement=disaggregated (a sampler on its own "
          "devices); rollout.lag is the same schedule on one mesh")
    _need(r.num_devices == 0 and not tuple(r.mesh_shape), "rollout.num_devices",
          "and rollout.mesh_shape need rollout.placement=disaggregated")
  # mesh
  shape = list(cfg.mesh.shape)
  _need(len(shape) in (2, 3) and shape.count(-1) <= 1, "mesh.shape",
        f"{tuple(shape)}: give (data, fsdp[, tensor]) with at most one -1")
  known = math.prod(s for s in shape if s != -1)
  _need(known >= 1 and (num_devices % known == 0 if -1 in shape else known == num_devices),
        "mesh.shape", f"{tuple(shape)} does not match the {num_devices} available devices"
        + (" (the trainer's, after rollout.num_devices)" if r.placement == "disaggregated"
           else ""))
  data_par = (num_devices // known if -1 in shape[:2] else 1) * math.prod(
      s for s in shape[:2] if s != -1)
  # data
  _need(d.dataset in DATASETS, "data.dataset", f"{d.dataset!r}; valid: {', '.join(DATASETS)}")
  g = r.num_generations
  _need(isinstance(g, int) and g >= 1, "rollout.num_generations", f"must be >= 1, got {g!r}")
  _need(d.batch_size >= 1 and d.batch_size % g == 0, "data.batch_size",
        f"{d.batch_size} is not divisible by the group size num_generations={g}; "
        "a batch must hold whole groups")
  _need(d.batch_size % data_par == 0, "data.batch_size",
        f"{d.batch_size} rows do not split over {data_par} data-parallel devices (mesh "
        f"{tuple(shape)})")
  _need(d.max_prompt_len >= 1, "data.max_prompt_len", "must be >= 1")
  _need(d.max_replay_prompt_len >= 1, "data.max_replay_prompt_len", "must be >= 1")
  _need(d.prompt_bucket >= 0, "data.prompt_bucket",
        "must be >= 0 (0: pad every prompt to data.max_prompt_len)")
  _need(1 <= d.min_criteria <= d.max_criteria, "data.min_criteria",
        f"need 1 <= min_criteria <= max_criteria, got {d.min_criteria}, {d.max_criteria}")
  # reward
  _need(r.max_new_tokens >= 1, "rollout.max_new_tokens", "must be >= 1")
  _need(cfg.reward.mode in ("strict", "loose"), "reward.mode", "valid: strict, loose")
  if d.dataset == "jsonl":
    _need(bool(d.path), "data.path", "data.dataset='jsonl' needs a prompts file")
    _need(os.path.exists(d.path), "data.path", f"{d.path}: no such file")
  try:
    from rljax.rewards.from_config import build_reward
    build_reward(cfg.reward)  # names (registered or module:fn) and options
  except ValueError as e:
    import rljax.rewards  # noqa: F401
    raise ConfigError(f"config.reward: {e}; registered rewards: "
                      f"{', '.join(registry.names('reward'))}") from e
  # sampler
  try:
    sampler_config(cfg)
    RolloutCopy.parse(r.copy)
  except ValueError as e:
    raise ConfigError(f"config.rollout: {e}") from e
  _need(isinstance(r.sync_every, int) and r.sync_every >= 1, "rollout.sync_every",
        f"must be an int >= 1, got {r.sync_every!r}")
  # runs that would compile and then learn nothing
  _need(g >= 2, "rollout.num_generations",
        f"{g}: advantage {o.advantage!r} is group-relative (reward minus its group's mean), "
        "so a group of one sample has advantage 0 and every gradient is 0; use >= 2")
  if float(r.temperature) == 0:
    try:
      readers = reads_sampler_probs(cfg)
    except ValueError:
      readers = []  # unknown names are reported below, with the valid ones
    _need(not readers, "rollout.temperature",
          f"0 (greedy) with {', '.join(readers)}, which reads the sampler's probabilities: "
          "greedy q is a point mass (log q = 0) unrelated to the trainer's p, so the "
          "importance weights are meaningless; sample with temperature > 0")
    _need(False, "rollout.temperature",
          f"0 (greedy) makes the {g} samples of a group identical, so every "
          "group-relative advantage and gradient is 0; sample with temperature > 0")
  # optimizer and schedule
  _need(opt.lr > 0, "optim.lr", f"must be > 0, got {opt.lr}")
  _need(opt.schedule in ("constant", "cosine", "linear"), "optim.schedule",
        f"{opt.schedule!r}; valid: constant, cosine, linear")
  _need(opt.grad_clip >= 0, "optim.grad_clip", "must be >= 0 (0 = off)")
  # train loop
  _need(t.steps >= 1, "train.steps", f"must be >= 1, got {t.steps}")
  _need(t.inner_epochs >= 1, "train.inner_epochs", "must be >= 1")
  mb_rows = d.batch_size // max(t.num_minibatches, 1)
  _need(t.num_minibatches >= 1 and d.batch_size % t.num_minibatches == 0 and mb_rows % g == 0,
        "train.num_minibatches", f"{t.num_minibatches} must split the batch of {d.batch_size} "
        f"rows into whole groups of {g}")
  _need(mb_rows % data_par == 0, "train.num_minibatches",
        f"each mini-batch of {mb_rows} rows must split over {data_par} data-parallel devices")
  _need(isinstance(t.max_consecutive_skips, int) and t.max_consecutive_skips >= 0,
        "train.max_consecutive_skips", "must be an int >= 0 (0 = never abort)")
  _need(isinstance(t.max_collapsed_steps, int) and t.max_collapsed_steps >= 0,
        "train.max_collapsed_steps", "must be an int >= 0 (0 = never abort)")
  _need(o.replay_policy in REPLAY_POLICIES, "objective.replay_policy",
        f"{o.replay_policy!r}; valid: {', '.join(REPLAY_POLICIES)}")
  _need(o.replay_mode in REPLAY_MODES, "objective.replay_mode",
        f"{o.replay_mode!r}; valid: {', '.join(REPLAY_MODES)}")
  _need(t.grad_accum >= 1 and mb_rows % t.grad_accum == 0 and (mb_rows // t.grad_accum) % g == 0,
        "train.grad_accum", f"{t.grad_accum} must split each mini-batch of {mb_rows} rows "
        f"into whole groups of {g}")
  _need(t.logprob_chunk >= 1, "train.logprob_chunk", "must be >= 1")
  if t.get("balance_tokens", False):
    _need(t.inner_epochs == 1 and t.num_minibatches > 1, "train.balance_tokens",
          f"deals the groups into the mini-batches of one epoch: needs train.inner_epochs = 1 "
          f"and train.num_minibatches > 1 (got {t.inner_epochs} and {t.num_minibatches})")
  if t.get("pack", False):
    longest = max(d.max_prompt_len, d.max_replay_prompt_len) + r.max_new_tokens
    _need(isinstance(t.tokens_per_row, int) and (t.tokens_per_row == 0
                                                  or t.tokens_per_row >= longest),
          "train.tokens_per_row", f"{t.tokens_per_row} must be 0 (each batch's own padded row "
          f"length) or hold the longest row, max(data.max_prompt_len, "
          f"data.max_replay_prompt_len) + rollout.max_new_tokens = {longest}")
  _need(0 <= o.overlong_cache <= r.max_new_tokens, "objective.overlong_cache",
        f"{o.overlong_cache} must be in [0, max_new_tokens={r.max_new_tokens}] (0 = off)")
  if o.dynamic_sampling:
    _need(o.max_resample >= 0, "objective.max_resample", "must be >= 0")
  _need(cfg.checkpoint.every >= 0 and cfg.checkpoint.keep >= 1, "checkpoint",
        "need every >= 0 and keep >= 1")
  _need(cfg.eval.every >= 0, "eval.every", "must be >= 0 (0 = only at the end)")
  w = cfg.log.wandb
  if w.enabled:
    from rljax.tracking import MODES
    _need(w.mode in MODES, "log.wandb.mode", f"{w.mode!r}; valid: {', '.join(MODES)}")
    try:
      import wandb  # noqa: F401
    except ImportError:
      _need(False, "log.wandb.enabled", "needs the wandb package: pip install -r "
            "requirements-wandb.txt (or log.wandb.enabled=False)")
  # objective: names against the registry, combinations with reasons
  try:
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      warns = validate_objective(**objective_kwargs(cfg))
  except ValueError as e:
    raise ConfigError(f"config.objective: {e}") from e
  tags = getattr(registry.get("loss", o.loss), "tags", ()) or ()
  ttags = {n: getattr(registry.get("transform", n), "tags", ()) or () for n in o.transforms}
  labelled = [n for n, tg in ttags.items() if "credit_labels" in tg]
  _need(not labelled, "objective.transforms",
        f"{labelled} read ground-truth token labels (credit_label_BxN) that only a synthetic "
        "task provides (experiments/long_credit.py); the trainer's rewards have none")
  truncating = t.truncate_logprobs and (r.top_k > 0 or float(r.top_p) < 1.0)
  _need(not (truncating and "score_centering" in tags), "train.truncate_logprobs",
        f"loss {o.loss!r} centers the score over the sampler's recorded head, but the truncated "
        "trainer distribution gives log p = -inf to head ids outside its own top-k / top-p "
        "(every loss would be NaN); score the full distribution (truncate_logprobs=False)")
  from rljax.train_step import OLD_POLICIES
  _need(t.old_policy in OLD_POLICIES, "train.old_policy",
        f"{t.old_policy!r}; valid: {', '.join(OLD_POLICIES)}")
  if t.old_policy == "bypass":
    weights = [n for n, tg in ttags.items() if "mismatch_weight" in tg]
    _need(not weights and dict(o.loss_kwargs).get("is_weight", "none") == "none",
          "train.old_policy", f"bypass makes π_old the sampler's q, so the IS weight π_old / q "
          f"of {weights or 'is_weight'} is 1; the PPO ratio π_θ / q already corrects (use "
          "old_policy=decoupled for TIS / MIS / BPO)")
    rejecting = [n for n, tg in ttags.items() if "rejection" in tg]
    _need(not (rejecting and (t.inner_epochs > 1 or t.num_minibatches > 1)), "train.old_policy",
          f"bypass at μ > 1 skips the π_old forward that the rejection {rejecting} reads; use "
          "old_policy=decoupled, or one update per rollout batch")
    _need("uses_is_weight" not in tags, "train.old_policy",
          f"loss {o.loss!r} never reads π_old (it weights the sampled score by f(p/q) itself), "
          "so bypass would change nothing; use old_policy=decoupled")
  if t.inner_epochs > 1 or t.num_minibatches > 1:  # the pg / SC family has no ratio
    _need("uses_is_weight" not in tags, "train.inner_epochs",
          f"loss {o.loss!r} is REINFORCE-style (one update per rollout batch); use "
          "inner_epochs = num_minibatches = 1")
  notes = []
  if cfg.model.tiny and cfg.model.path != "smollm2":
    notes.append(f"model.tiny: training a random {cfg.model.tiny_config.num_layers}-layer model "
                 f"with {cfg.model.path}'s tokenizer; the weights in {cfg.model.path} are not "
                 "loaded (drop :tiny, i.e. model.tiny=False, to train them)")
  return list(warns or []) + [str(w.message) for w in caught] + notes
