"""Sampler configuration and the checks on a generate call's inputs (clear errors, early)."""
from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class SamplerConfig:
  """Static settings of one generate call; hashable (a jit static argument).

  max_new_tokens   N, the response length (shorter where a stop token comes first).
  temperature      0 is greedy (explicit: logq = 0 for the chosen token); > 0 samples.
  top_k, top_p     truncation (0 / 1.0: off), exactly as `rljax.logprobs.sampling_logits`.
  num_generations  G samples per prompt: each prompt is prefilled once and its KV cache
                   copied to its G rows.
  stop_token_ids   None: the model's eos ids; () never stops early.
  record_topk      0 off; k > 0 records the top-k head of the sampling distribution per
                   position; -1 or "full" records the whole vocabulary (small V only).
  cache_length     KV cache slots; None: prompt length + max_new_tokens - 1 (the minimum).
  pad_token_id     written after a response's stop token.
  top_p_prefix     top-p without top-k first looks for the nucleus among this many top
                   candidates (`lax.top_k`), falling back to a full-vocabulary sort for
                   the step where the nucleus is wider; the distribution is the same.
  compact_every    0 off; k > 0: every k decode steps the running rows move into the
                   smallest decode batch that holds them, of sizes 2 × (1, 2, .., 8, 10, 12,
                   14, 16, 20, 24, 28, 32, 40, ..) rows per batch shard (four per doubling;
                   `rljax.rollout.sampler.compact_size`), so finished rows stop costing
                   decode steps. Every row keeps its own PRNG key and cache: the samples are
                   those of the uncompacted sampler.
  decode_kernel    "auto": on CPU (one device, float32, no quantized KV) decode steps run
                   attention in a compiled kernel that reads the KV cache in place
                   (`rljax.models.cpu_attention`); "xla": always XLA's attention.
  """
  max_new_tokens: int = 128
  temperature: float = 1.0
  top_k: int = 0
  top_p: float = 1.0
  num_generations: int = 1
  stop_token_ids: tuple[int, ...] | None = None
  record_topk: int | str = 0
  cache_length: int | None = None
  pad_token_id: int = 0
  top_p_prefix: int = 256
  compact_every: int = 0
  decode_kernel: str = "auto"

  def __post_init__(self):
    if self.stop_token_ids is not None:
      ids = self.stop_token_ids
      ids = (ids,) if isinstance(ids, (int, np.integer)) else tuple(int(i) for i in ids)
      object.__setattr__(self, "stop_token_ids", ids)
    if self.record_topk == "full":
      object.__setattr__(self, "record_topk", -1)
    _check(isinstance(self.max_new_tokens, int) and self.max_new_tokens >= 1,
           f"max_new_tokens must be an int >= 1, got {self.max_new_tokens!r}")
    t = self.temperature
    _check(isinstance(t, (int, float)) and math.isfinite(t) and t >= 0,
           f"temperature must be a finite number >= 0 (0 = greedy), got {t!r}")
    _check(isinstance(self.top_k, int) and self.top_k >= 0,
           f"top_k must be an int >= 0 (0 = off), got {self.top_k!r}")
    _check(isinstance(self.top_p, (int, float)) and 0 < self.top_p <= 1,
           f"top_p must be in (0, 1] (1 = off), got {self.top_p!r}")
    g = self.num_generations
    _check(isinstance(g, int) and g >= 1,
           f"num_generations (the group size G) must be an int >= 1, got {g!r}")
    k = self.record_topk
    _check(isinstance(k, int) and k >= -1,
           f"record_topk must be 0 (off), k > 0, or -1 / 'full' (whole vocabulary), got {k!r}")
    _check(isinstance(self.top_p_prefix, int) and self.top_p_prefix >= 1,
           f"top_p_prefix must be an int >= 1, got {self.top_p_prefix!r}")
    _check(isinstance(self.compact_every, int) and self.compact_every >= 0,
           f"compact_every must be an int >= 0 (0 = off), got {self.compact_every!r}")
    _check(self.decode_kernel in ("auto", "xla"),
           f"decode_kernel must be 'auto' or 'xla', got {self.decode_kernel!r}")
    _check(self.cache_length is None or (isinstance(self.cache_length, int)
                                         and self.cache_length >= 1),
           f"cache_length must be None or an int >= 1, got {self.cache_length!r}")

  @property
  def greedy(self) -> bool:
    return self.temperature == 0

  def replace(self, **kw) -> "SamplerConfig":
    return dataclasses.replace(self, **kw)


def _check(ok: bool, msg: str) -> None:
  if not ok:
    raise ValueError(msg)


def resolve_stop_ids(cfg: SamplerConfig, eos_token_id) -> tuple[int, ...]:
  if cfg.stop_token_ids is not None:
    return cfg.stop_token_ids
  if eos_token_id is None:
    return ()
  return tuple(int(i) for i in eos_token_id) if isinstance(eos_token_id, Sequence) \
      else (int(eos_token_id),)


def cache_slots(cfg: SamplerConfig, prompt_len: int) -> int:
  """KV slots the call uses; raises if the prompt and the response do not fit."""
  need = prompt_len + cfg.max_new_tokens - 1  # the last sampled token is never fed back
  s = cfg.cache_length if cfg.cache_length is not None else need
  if prompt_len > s:
    raise ValueError(f"prompt length {prompt_len} is longer than the KV cache "
                     f"(cache_length={s})")
  if need > s:
    raise ValueError(f"prompt length {prompt_len} + max_new_tokens {cfg.max_new_tokens} - 1 "
                     f"= {need} slots do not fit in the KV cache (cache_length={s})")
  return s


def check_inputs(cfg: SamplerConfig, ids_BxP, mask_BxP, vocab_size: int) -> None:
  """Shape, vocabulary and padding checks (the padding ones only on concrete masks)."""
  if ids_BxP.ndim != 2 or ids_BxP.shape != mask_BxP.shape:
    raise ValueError(f"prompt_ids {ids_BxP.shape} and prompt_mask {mask_BxP.shape} must be "
                     "equal [B, P] shapes")
  if ids_BxP.shape[1] == 0:
    raise ValueError("empty prompts: P = 0")
  if cfg.top_k > vocab_size:
    raise ValueError(f"top_k={cfg.top_k} is larger than the vocabulary ({vocab_size})")
  if cfg.record_topk > vocab_size:
    raise ValueError(f"record_topk={cfg.record_topk} is larger than the vocabulary "
                     f"({vocab_size}); use -1 / 'full' for the whole vocabulary")
  try:
    m = np.asarray(mask_BxP).astype(bool)
  except Exception:  # traced: nothing concrete to check
    return
  if not m.any(axis=1).all():
    raise ValueError(f"prompt rows {np.flatnonzero(~m.any(axis=1)).tolist()} are empty "
                     "(mask all zero)")
  if (m[:, 1:] < m[:, :-1]).any():
    raise ValueError("prompts must be left-padded: in each mask row, no 0 may follow a 1")
