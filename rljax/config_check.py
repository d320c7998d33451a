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
from rljax.objectives import validate as validate_objective
from rljax.rollout import RolloutCopy, SamplerConfig

DATASETS = ("rubric",)


class ConfigError(ValueError):
  pass


def _need(ok: bool, key: str, msg: str) -> None:
  if not ok:
    raise ConfigError(f"config.{key}: {msg}")


def objective_kwargs(cfg: mlc.ConfigDict, vocab_size: int | None = None) -> dict:
  o = cfg.objective
  return dict(advantage=o.advantage, loss=o.loss, transforms=tuple(o.transforms),
              num_generations=cfg.rollout.num_generations,
              advantage_kwargs=dict(o.advantage_kwargs), loss_kwargs=dict(o.loss_kwargs),
              transform_kwargs={k: dict(v) for k, v in dict(o.transform_kwargs).items()},
              sampler_topk=cfg.rollout.record_topk, vocab_size=vocab_size,
              teacher=o.teacher or None)


def sampler_config(cfg: mlc.ConfigDict, stop_ids=None, pad_id: int = 0) -> SamplerConfig:
  r = cfg.rollout
  return SamplerConfig(max_new_tokens=r.max_new_tokens, temperature=float(r.temperature),
                       top_k=r.top_k, top_p=float(r.top_p), num_generations=r.num_generations,
                       record_topk=r.record_topk, stop_token_ids=stop_ids, pad_token_id=pad_id)


def validate_config(cfg: mlc.ConfigDict, num_devices: int) -> list[str]:
  """Raises ConfigError on the first problem; returns warnings (e.g. REAL's forced scale)."""
  from rljax.models.bundled import resolve
  d, r, t, o, opt = cfg.data, cfg.rollout, cfg.train, cfg.objective, cfg.optim
  # model
  _need(cfg.model.param_dtype in ("float32", "bfloat16"), "model.param_dtype",
        f"{cfg.model.param_dtype!r}; valid: float32, bfloat16")
  _need(cfg.model.dtype in ("float32", "bfloat16"), "model.dtype",
        f"{cfg.model.dtype!r}; valid: float32, bfloat16")
  try:
    path = resolve(cfg.model.path)
  except FileNotFoundError as e:
    raise ConfigError(f"config.model.path: {e}") from e
  _need(os.path.exists(path), "model.path", f"checkpoint {path!r} does not exist (a HF "
        "directory with config.json + *.safetensors, a .gguf file, or 'smollm2')")
  # mesh
  shape = list(cfg.mesh.shape)
  _need(len(shape) in (2, 3) and shape.count(-1) <= 1, "mesh.shape",
        f"{tuple(shape)}: give (data, fsdp[, tensor]) with at most one -1")
  known = math.prod(s for s in shape if s != -1)
  _need(known >= 1 and (num_devices % known == 0 if -1 in shape else known == num_devices),
        "mesh.shape", f"{tuple(shape)} does not match the {num_devices} available devices")
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
  _need(1 <= d.min_criteria <= d.max_criteria, "data.min_criteria",
        f"need 1 <= min_criteria <= max_criteria, got {d.min_criteria}, {d.max_criteria}")
  # reward
  _need(r.max_new_tokens >= 1, "rollout.max_new_tokens", "must be >= 1")
  if cfg.reward.name not in registry.names("reward"):
    import rljax.rewards  # noqa: F401  (registers the built-in rewards)
  _need(cfg.reward.name in registry.names("reward"), "reward.name",
        f"unknown reward {cfg.reward.name!r}; valid: {', '.join(registry.names('reward'))}")
  _need(cfg.reward.mode in ("strict", "loose"), "reward.mode", "valid: strict, loose")
  # sampler
  try:
    sampler_config(cfg)
    RolloutCopy.parse(r.copy)
  except ValueError as e:
    raise ConfigError(f"config.rollout: {e}") from e
  _need(isinstance(r.sync_every, int) and r.sync_every >= 1, "rollout.sync_every",
        f"must be an int >= 1, got {r.sync_every!r}")
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
  _need(t.grad_accum >= 1 and mb_rows % t.grad_accum == 0 and (mb_rows // t.grad_accum) % g == 0,
        "train.grad_accum", f"{t.grad_accum} must split each mini-batch of {mb_rows} rows "
        f"into whole groups of {g}")
  _need(t.logprob_chunk >= 1, "train.logprob_chunk", "must be >= 1")
  _need(0 <= o.overlong_cache <= r.max_new_tokens, "objective.overlong_cache",
        f"{o.overlong_cache} must be in [0, max_new_tokens={r.max_new_tokens}] (0 = off)")
  if o.dynamic_sampling:
    _need(o.max_resample >= 0, "objective.max_resample", "must be >= 0")
  _need(cfg.checkpoint.every >= 0 and cfg.checkpoint.keep >= 1, "checkpoint",
        "need every >= 0 and keep >= 1")
  _need(cfg.eval.every >= 0, "eval.every", "must be >= 0 (0 = only at the end)")
  # objective: names against the registry, combinations with reasons
  try:
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      warns = validate_objective(**objective_kwargs(cfg))
  except ValueError as e:
    raise ConfigError(f"config.objective: {e}") from e
  tags = getattr(registry.get("loss", o.loss), "tags", ()) or ()
  if t.inner_epochs > 1 or t.num_minibatches > 1:  # the pg / SC family has no ratio
    _need("uses_is_weight" not in tags, "train.inner_epochs",
          f"loss {o.loss!r} is REINFORCE-style (one update per rollout batch); use "
          "inner_epochs = num_minibatches = 1")
  return list(warns or []) + [str(w.message) for w in caught]
