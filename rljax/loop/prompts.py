"""Prompts of a batch as token arrays: the rubric prompt x⁺, the rubric-free replay prompt
x⁻ and (per-criterion replay) x⁺ minus each criterion, left-padded and bucketed."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from rljax import distributed as dist


class Prompts(NamedTuple):
  """Left-padded prompt ids / masks, one row per prompt (int32)."""
  plus_ids: np.ndarray                 # x⁺ [P, L⁺]
  plus_mask: np.ndarray
  minus_ids: np.ndarray | None = None  # x⁻ [P, L⁻]
  minus_mask: np.ndarray | None = None
  crit_ids: np.ndarray | None = None   # x⁺ minus criterion j [P, C, L⁺]
  crit_mask: np.ndarray | None = None
  crit_cid: np.ndarray | None = None   # the criterion ids [P, C] (−1: no criterion j)

  def replay(self) -> "Prompts":
    """The replay prompts alone (x⁺ fields empty), as the rollout carries them."""
    return self._replace(plus_ids=None, plus_mask=None)


def left_pad(rows: list[list[int]], length: int, pad_id: int, what: str, key: str):
  """[B, length] ids and mask, left-padded; a clear error when a row does not fit."""
  ids = np.full((len(rows), length), pad_id, np.int32)
  mask = np.zeros((len(rows), length), np.int32)
  for i, r in enumerate(rows):
    if len(r) > length:
      raise ValueError(f"{what} row {i} has {len(r)} tokens > {key}={length}; raise {key}")
    ids[i, length - len(r):], mask[i, length - len(r):] = r, 1
  return ids, mask


def bucket_len(longest: int, bucket: int, cap: int) -> int:
  """The padded prompt length for a batch whose longest prompt has `longest` tokens:
  rounded up to a multiple of `bucket` (0: no bucketing, always `cap`), at most `cap`."""
  if not bucket:
    return cap
  return min(cap, max(1, -(-longest // bucket)) * bucket)


def trim_left(arrays, length: int):
  """Keeps the last `length` columns (the last axis) of left-padded arrays."""
  return tuple(a[..., a.shape[-1] - length:] for a in arrays)


def left_pad_to(a, length: int):
  """Left-pads the last axis of `a` with zeros (masked pad) up to `length`."""
  a = np.asarray(a)
  if a.shape[-1] >= length:
    return a
  return np.pad(a, [(0, 0)] * (a.ndim - 1) + [(length - a.shape[-1], 0)])


def global_bucket_len(mask, bucket: int, cap: int) -> int:
  """`bucket_len` of the longest row of `mask` over *every* process's rows (a collective:
  every process calls it, with its own rows), so all processes pad to one length."""
  return bucket_len(dist.max_over_processes(int(mask.sum(-1).max(initial=0))), bucket, cap)


class PromptEncoder:
  """Chat-formats and tokenizes examples into `Prompts` (config keys under `data`)."""

  def __init__(self, tokenizer, data_cfg, pad_id: int, per_criterion: bool = False,
               criterion_ids: tuple[str, ...] = ()):
    self.tokenizer, self.d, self.pad_id = tokenizer, data_cfg, pad_id
    self.per_criterion, self.criterion_ids = per_criterion, tuple(criterion_ids)

  def _ids(self, texts):
    return [self.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]

  def encode(self, examples, replay: bool = True) -> Prompts:
    """x⁺ (and with `replay`, x⁻ and the per-criterion rows) of `examples`. Prompt bucketing
    drops the left-padding columns no row of the global batch needs, keeping a multiple of
    `data.prompt_bucket`: the sampler and the step see the batch's lengths, not the maxima
    (numerically the same: pad keys are masked out)."""
    from rljax.data import format_chat
    d = self.d
    pairs = [format_chat(ex, self.tokenizer, d.system or None) for ex in examples]
    plus = left_pad(self._ids([a for a, _ in pairs]), d.max_prompt_len, self.pad_id,
                    "rubric prompt x+", "data.max_prompt_len")
    plus = trim_left(plus, global_bucket_len(plus[1], d.prompt_bucket, d.max_prompt_len))
    if not replay:
      return Prompts(*plus)
    minus = left_pad(self._ids([b for _, b in pairs]), d.max_replay_prompt_len, self.pad_id,
                     "rubric-free prompt x-", "data.max_replay_prompt_len")
    minus = trim_left(minus, global_bucket_len(minus[1], d.prompt_bucket,
                                               d.max_replay_prompt_len))
    crit = (None, None, None)
    if self.per_criterion:
      ids, mask, cid = self._ablations(examples)
      crit = trim_left((ids, mask), global_bucket_len(mask, d.prompt_bucket,
                                                      d.max_prompt_len)) + (cid,)
    return Prompts(*plus, *minus, *crit)

  def _ablations(self, examples):
    """Per-criterion replay prompts (x⁺ minus criterion j): ids, mask [P, C, L] and the
    criterion ids [P, C] (−1 where an example has fewer than C = data.max_criteria)."""
    from rljax.data import ablations, chat_prompt
    d, system = self.d, self.d.system or None
    c = d.max_criteria
    ids = np.full((len(examples), c, d.max_prompt_len), self.pad_id, np.int32)
    mask = np.zeros_like(ids)
    cid = np.full((len(examples), c), -1, np.int32)
    for i, ex in enumerate(examples):
      for j, text in enumerate(ablations(ex)[:c]):
        row = self.tokenizer(chat_prompt(text, self.tokenizer, system),
                             add_special_tokens=False)["input_ids"]
        ids[i, j], mask[i, j] = (a[0] for a in left_pad([row], d.max_prompt_len, self.pad_id,
                                                         "per-criterion replay prompt",
                                                         "data.max_prompt_len"))
        cid[i, j] = self.criterion_ids.index(ex["instruction_id_list"][j])
    return ids, mask, cid
