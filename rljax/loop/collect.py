"""The collect stage: prompts -> rollout -> rewards -> reward shaping -> dynamic sampling.

`Collector.rollout` samples one global batch of prompts and scores it; every process ends
with the whole batch as numpy (each process tokenizes the prompts its devices hold and
scores its own rows, `rljax.distributed`). `collect` adds DAPO dynamic sampling on top of
any such rollout function (the trainer's and the toy experiments').
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax.numpy as jnp
import numpy as np

from rljax import distributed as dist
from rljax.loop.prompts import Prompts, left_pad_to
from rljax.objectives import informative_groups, overlong_penalty
from rljax.rollout import generate


@dataclasses.dataclass
class Rollouts:
  """One rollout batch of P prompts × G samples, as numpy on every process."""
  r: Any                            # rljax.rollout.Rollout (tokens, mask, log q, head, ...)
  prompts: Prompts                  # x⁺ per prompt (as sampled), x⁻ and per-criterion rows
  rewards: np.ndarray               # [B] after shaping (what the advantages read)
  info: dict                        # per-row numeric reward info; `accuracy` before shaping
  examples: list | None = None      # this host's examples, one per row (None after a refill)
  keep_groups: np.ndarray | None = None  # [P] dynamic sampling: groups kept in the loss
  resample_tries: int = 0
  decode_row_steps: int = 0         # rows × decode steps the sampler ran (resamples included)


def numeric_rows(value, n: int):
  """`value` as a numeric array with one entry per response, else None (reward info may hold
  ragged per-response lists, e.g. the instruction ids each response followed)."""
  if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != n:
    return None
  try:
    arr = np.asarray(value)
  except ValueError:  # ragged
    return None
  return arr if arr.ndim and arr.dtype.kind in "biuf" else None


class Collector:
  """Rollout + rewards of the trainer's data (`rollout(sampler, indices, key)`)."""

  def __init__(self, *, mesh, encoder, tokenizer, source, decode, reward_fn, sampler_cfg,
               num_threads: int = 0, overlong_cache: int = 0):
    self.mesh, self.encoder, self.tokenizer = mesh, encoder, tokenizer
    self.source, self.decode, self.reward_fn = source, decode, reward_fn
    self.sampler_cfg, self.num_threads, self.overlong_cache = (sampler_cfg, num_threads,
                                                               overlong_cache)

  def prompt_rows(self, num_prompts: int) -> slice:
    """The prompts (rows) of a global batch that this process's devices hold."""
    return dist.local_rows_of(self.mesh, (num_prompts, self.encoder.d.max_prompt_len))

  def generate(self, sampler, prompts: Prompts, key, cfg, num_prompts: int, replay: bool = True,
               stats: dict | None = None):
    """Host-local prompt rows -> global arrays -> generate -> the whole rollout as numpy on
    every process, and the replay prompts gathered alongside (None without `replay`).
    `stats`: filled with the sampler's decode cost (`rljax.rollout.generate`)."""
    block = self.prompt_rows(num_prompts)
    keys = dist.key_data_rows(key, num_prompts, block)  # = split(key, prompts)[block]
    g_ids, g_mask, g_keys = dist.to_global((prompts.plus_ids, prompts.plus_mask, keys),
                                           self.mesh, num_prompts)
    r = generate(sampler, g_ids, g_mask, g_keys, cfg, mesh=self.mesh, stats=stats)
    minus = (dist.gather(dist.to_global(prompts.replay(), self.mesh, num_prompts))
             if replay else None)
    return dist.gather(r), minus

  def rollout(self, sampler, indices, key) -> Rollouts:
    """Samples G responses for each prompt `indices` (global record indices) and scores them."""
    g, n_p = self.sampler_cfg.num_generations, len(indices)
    prompts = self.encoder.encode([self.decode(self.source[int(i)])
                                   for i in indices[self.prompt_rows(n_p)]])
    stats = {}
    r, minus = self.generate(sampler, prompts, key, self.sampler_cfg, n_p, stats=stats)
    rows = dist.local_rows_of(self.mesh, r.tokens_BxN.shape)
    tokens, rmask = r.tokens_BxN[rows], r.mask_BxN[rows]
    texts = self.tokenizer.batch_decode([row[m > 0] for row, m in zip(tokens, rmask)],
                                        skip_special_tokens=True)
    examples = {int(i): None for i in np.arange(rows.start, rows.stop) // g}
    examples = {i: self.decode(self.source[int(indices[i])]) for i in examples}
    row_examples = [examples[i // g] for i in range(rows.start, rows.stop)]
    rewards, info = self.reward_fn(texts, row_examples, num_threads=self.num_threads)
    full = rows == slice(0, len(r.tokens_BxN))
    rewards = dist.gather_local(np.asarray(rewards, np.float32), full)
    info = {k: dist.gather_local(a, full) for k, a in
            ((k, numeric_rows(v, len(texts))) for k, v in info.items()) if a is not None}
    info = dict(info, accuracy=rewards.copy())  # before shaping: what dynamic sampling reads
    if self.overlong_cache:  # DAPO soft overlong punishment, counted in tokens
      info = dict(info, overlong_penalty=np.asarray(overlong_penalty(
          jnp.asarray(r.mask_BxN.sum(1)), self.sampler_cfg.max_new_tokens, self.overlong_cache)))
      rewards = rewards + info["overlong_penalty"]
    prompts = minus._replace(plus_ids=r.prompt_ids_BxP[::g], plus_mask=r.prompt_mask_BxP[::g])
    return Rollouts(r=r, prompts=prompts, rewards=rewards, info=info, examples=row_examples,
                    decode_row_steps=stats["row_steps"])


def collect(rollout_fn: Callable[[Any], Rollouts], key, *, group_size: int,
            dynamic_sampling: bool = False, max_resample: int = 0,
            resample_key: Callable[[int], Any] | None = None) -> Rollouts:
  """One rollout batch `rollout_fn(key)` (it draws its own next prompts). DAPO dynamic
  sampling judges a group by its accuracy reward (before the overlong shaping, as verl's
  recipe): uninformative groups are replaced by informative ones of up to `max_resample`
  extra rollouts (`rollout_fn(resample_key(try))`); those still uninformative are dropped
  (`keep_groups`: masked out of the loss and its normalizer) and counted."""
  roll = rollout_fn(key)
  if not dynamic_sampling:
    return roll
  informative = lambda r: np.asarray(informative_groups(jnp.asarray(r.info["accuracy"]),
                                                        group_size))
  keep, tries = informative(roll), 0
  while not keep.all() and tries < max_resample:
    tries += 1
    extra = rollout_fn(resample_key(tries))
    roll, keep = refill(roll, keep, extra, informative(extra), group_size)
  return dataclasses.replace(roll, keep_groups=keep, resample_tries=tries)


def refill(roll: Rollouts, keep, extra: Rollouts, ekeep, g: int):
  """Replaces uninformative groups of `roll` by informative ones of `extra`."""
  bad = [i for i, k in enumerate(keep) if not k]
  good = [i for i, k in enumerate(ekeep) if k]
  roll, extra = common_prompt_lens(roll, extra)
  roll = dataclasses.replace(roll, examples=None)  # rows replaced: the example list is stale
  for dst, src in zip(bad, good):
    sl_d, sl_s = slice(dst * g, (dst + 1) * g), slice(src * g, (src + 1) * g)
    r, e = roll.r, extra.r
    rewards = _put(roll.rewards, extra.rewards, sl_d, sl_s)
    info = {k: (_put(v, extra.info[k], sl_d, sl_s) if isinstance(v, np.ndarray)
                and v.shape[:1] == roll.rewards.shape else v) for k, v in roll.info.items()}
    prompts = Prompts(*(None if a is None else _put(a, b, slice(dst, dst + 1), slice(src, src + 1))
                        for a, b in zip(roll.prompts, extra.prompts)))
    roll = dataclasses.replace(
        roll, r=r._replace(**{f: _put(getattr(r, f), getattr(e, f), sl_d, sl_s)
                              for f in r._fields if getattr(r, f) is not None}),
        rewards=rewards, info=info, prompts=prompts)
    keep = keep.copy()
    keep[dst] = True
  return dataclasses.replace(roll, decode_row_steps=roll.decode_row_steps
                             + extra.decode_row_steps), keep


def common_prompt_lens(a: Rollouts, b: Rollouts):
  """Two rollouts whose prompts were bucketed to different lengths, left-padded to the
  longer of each pair (x⁺, x⁻, per-criterion x⁻) so their rows can be exchanged."""
  plus = max(a.prompts.plus_ids.shape[-1], b.prompts.plus_ids.shape[-1])
  out = []
  for d in (a, b):
    r = d.r._replace(prompt_ids_BxP=left_pad_to(d.r.prompt_ids_BxP, plus),
                     prompt_mask_BxP=left_pad_to(d.r.prompt_mask_BxP, plus))
    out.append(dataclasses.replace(d, r=r, prompts=d.prompts._replace(
        plus_ids=left_pad_to(d.prompts.plus_ids, plus),
        plus_mask=left_pad_to(d.prompts.plus_mask, plus))))
  for ids, mask in (("minus_ids", "minus_mask"), ("crit_ids", "crit_mask")):
    if getattr(a.prompts, ids) is not None:
      n = max(getattr(x.prompts, ids).shape[-1] for x in out)
      out = [dataclasses.replace(x, prompts=x.prompts._replace(**{
          ids: left_pad_to(getattr(x.prompts, ids), n),
          mask: left_pad_to(getattr(x.prompts, mask), n)})) for x in out]
  return tuple(out)


def _put(dst, src, sl_d, sl_s):
  dst = np.array(dst)
  dst[sl_d] = np.asarray(src)[sl_s]
  return dst
