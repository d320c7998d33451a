"""The train batch: one typed definition of what the update reads, its shapes and shardings.

Row i of a batch of B = prompts × G rows is the rubric prompt x⁺ (left-padded to P) followed
by the response (N tokens); for the CoRT replay the rubric-free prompt x⁻ (left-padded to
P⁻) followed by the *same* response, or (per-criterion replay) C rows of x⁺ minus criterion
j; and, for the mismatch objectives that read the sampler's distribution, its recorded head.
The trainer, `rljax.aot`, `bench/` and `experiments/` all build it here (`assemble`) or
describe it here (`BatchLayout.spec`).
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import numpy as np

from rljax import sharding as shd


class TrainBatch(NamedTuple):
  """Host arrays of one rollout batch, as the update reads them (`arrays()`: the dict)."""
  tokens_BxL: np.ndarray                      # x⁺ + response, int32
  attn_mask_BxL: np.ndarray                   # 1 on real tokens, int32
  mask_BxN: np.ndarray                        # response tokens in the loss, float32
  adv_B: np.ndarray                           # sequence advantages, float32
  sampler_logp_BxN: np.ndarray                # log q of the sampled tokens, float32
  rewards_B: np.ndarray | None = None         # (shaped) rewards: the baseline over kept rows
  minus_tokens_BxM: np.ndarray | None = None  # CoRT replay x⁻ + response
  minus_attn_mask_BxM: np.ndarray | None = None
  crit_tokens_BxCxL: np.ndarray | None = None  # per-criterion replay rows
  crit_attn_mask_BxCxL: np.ndarray | None = None
  crit_id_BxC: np.ndarray | None = None       # criterion id per slot (−1: none)
  head_ids_BxNxK: np.ndarray | None = None    # the sampler's recorded head
  head_logq_BxNxK: np.ndarray | None = None
  credit_label_BxN: np.ndarray | None = None  # ground-truth credit tokens (synthetic tasks)
  packed: dict | None = None                  # packing plans: pack_<rows>_<key> (rljax.packing)
  pack_tokens_per_row: int = 0                # their packed rows' length

  def arrays(self) -> dict:
    """The arrays that are present, by name: what `rljax.update` takes."""
    out = {k: v for k, v in self._asdict().items()
           if v is not None and k not in ("packed", "pack_tokens_per_row")}
    out.update(self.packed or {})
    return out


@dataclasses.dataclass(frozen=True)
class BatchLayout:
  """The static shapes of a run's train batch."""
  rows: int                     # B
  prompt_len: int               # P
  response_len: int             # N
  replay_prompt_len: int = 0    # P⁻ (0: no replay rows)
  num_criteria: int = 0         # C (0: no per-criterion rows)
  head_k: int = 0               # K (0: no recorded head)
  credit_labels: bool = False   # ground-truth credit labels (synthetic tasks' oracle_credit)
  pack_widths: tuple = ()       # ((rows, W, M), ...): packing plans of the rows (rljax.packing)
  pack_tokens_per_row: int = 0  # T of the packed rows (0: not packed)

  def shapes(self) -> dict:
    """{name: (shape, dtype)} of every array of a batch with this layout."""
    b, p, n = self.rows, self.prompt_len, self.response_len
    i32, f32 = np.dtype(np.int32), np.dtype(np.float32)
    out = {"tokens_BxL": ((b, p + n), i32), "attn_mask_BxL": ((b, p + n), i32),
           "mask_BxN": ((b, n), f32), "adv_B": ((b,), f32), "sampler_logp_BxN": ((b, n), f32),
           "rewards_B": ((b,), f32)}
    if self.replay_prompt_len:
      m = self.replay_prompt_len + n
      out.update(minus_tokens_BxM=((b, m), i32), minus_attn_mask_BxM=((b, m), i32))
    if self.num_criteria:
      c = self.num_criteria
      out.update(crit_tokens_BxCxL=((b, c, p + n), i32), crit_attn_mask_BxCxL=((b, c, p + n), i32),
                 crit_id_BxC=((b, c), i32))
    if self.head_k:
      k = self.head_k
      out.update(head_ids_BxNxK=((b, n, k), i32), head_logq_BxNxK=((b, n, k), f32))
    if self.credit_labels:
      out["credit_label_BxN"] = ((b, n), f32)
    shapes = {name: out[name] for name in TrainBatch._fields if name in out}
    for rows, w, m in self.pack_widths:
      lead = (b, self.num_criteria) if rows == "crit" else (b,)
      for k, width in (("src", w), ("seg", w), ("pos", w), ("out", n), ("take", m), ("put", m)):
        shapes[f"pack_{rows}_{k}"] = (lead + (width,), i32)
    return shapes

  def shardings(self, mesh) -> dict:
    """The sharding of every array: `rljax.sharding.batch_sharding`, rows over the batch axes."""
    return {k: shd.batch_sharding(mesh, s) for k, (s, _) in self.shapes().items()}

  def spec(self, mesh=None) -> dict:
    """`jax.ShapeDtypeStruct`s of the batch (with shardings on `mesh`): what AOT lowers."""
    sh = self.shardings(mesh) if mesh is not None else {}
    return {k: jax.ShapeDtypeStruct(s, t, sharding=sh.get(k)) for k, (s, t)
            in self.shapes().items()}


def permute_rows(batch: TrainBatch, order) -> TrainBatch:
  """The batch with its rows in `order` (every array's leading axis); before planning."""
  if batch.packed:
    raise ValueError("permute the rows before the packing plans are built: a plan indexes "
                     "its unit's rows by position")
  order = np.asarray(order)
  return batch._replace(**{k: np.asarray(v)[order] for k, v in batch._asdict().items()
                           if v is not None and k not in ("packed", "pack_tokens_per_row")})


def layout_of(batch: TrainBatch) -> BatchLayout:
  """The layout of an assembled batch."""
  b, n = batch.mask_BxN.shape
  return BatchLayout(
      rows=b, prompt_len=batch.tokens_BxL.shape[1] - n, response_len=n,
      replay_prompt_len=0 if batch.minus_tokens_BxM is None else batch.minus_tokens_BxM.shape[1] - n,
      num_criteria=0 if batch.crit_id_BxC is None else batch.crit_id_BxC.shape[1],
      head_k=0 if batch.head_ids_BxNxK is None else batch.head_ids_BxNxK.shape[2],
      credit_labels=batch.credit_label_BxN is not None,
      pack_widths=tuple((k[len("pack_"):-len("_src")], v.shape[-1],
                         batch.packed[k[:-len("src")] + "take"].shape[-1])
                        for k, v in (batch.packed or {}).items() if k.endswith("_src")),
      pack_tokens_per_row=batch.pack_tokens_per_row if batch.packed else 0)
