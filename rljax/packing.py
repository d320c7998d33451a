"""Packed training rows: the forwards of the update over variable-length sequences without
paying for padding.

A batch row is a left-padded prompt followed by a right-padded response; its real tokens
(`attn_mask == 1`) are one contiguous run. Packing places the runs of each group of G rows
(the G samples of one prompt; or a whole micro-batch, below) into `R` packed rows of `T = tokens_per_row` tokens, first-fit
by decreasing length, with a segment id per sequence (0 on padding) and positions that
restart at 0 per sequence. Attention never crosses a segment (`Decoder(segment_ids=)`), so
every token sees exactly the tokens it sees in its padded row, and the hidden states that
predict the response tokens are gathered back to `[B, N]`: the log-probabilities, losses,
normalizers and metrics downstream are those of the padded batch.

A plan packs one unit of rows together: each micro-batch of the fused μ = 1 step (the whole
batch without gradient accumulation); at μ > 1 with one epoch, each micro-batch of a
mini-batch, the batch being put in its mini-batch order on the host first
(`rljax.update.minibatch_order`, `update_batch(presorted=True)`); else (several epochs) each
group of G rows (`unit_rows`). The plan is stored as per-row arrays (each unit's rows hold
its packed block, `[B, R·T / U]`), so the μ > 1 mini-batches of whole groups
(`rljax.update.minibatch_rows`), the gradient-accumulation micro-batches and the batch
sharding carry the plan with the rows. (Every unit gets the rows of the fullest unit: with
group units at several epochs, one group of long answers sets the packed size of all.) The
plan is host-side NumPy
(`plan`), built once per rollout batch by the assemble stage; the device gathers the tokens
(`gather_tokens`) and scatters nothing.

Arrays of a plan for rows `[B, L]` in groups of G (W = R·T / G):
  src_BxW  index into the group's flattened `[G·L]` tokens of each packed slot (0 on padding)
  seg_BxW  segment id of each packed slot: 1 + the row's index in its group; 0 on padding
  pos_BxW  position id of each packed slot (0 at each sequence's first token)
  out_BxN  index into the group's flattened `[R·T]` packed slots of the hidden state that
           predicts each of the row's last N tokens (the response); 0 where there is none
  take_BxM the group's real response tokens only (M per row, `response_slots`): the packed
           slot whose hidden state predicts each (0 on padding) ...
  put_BxM  ... and its index into the group's flattened `[G·N]` response positions (G·N on
           padding: dropped). The log-probabilities (LM head, log-softmax, entropy) are
           computed at these G·M positions and scattered to `[B, N]`; padded response
           positions get 0.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

PLAN_KEYS = ("src", "seg", "pos", "out", "take", "put")


class PackingError(ValueError):
  pass


def rows_needed(lengths, capacity: int) -> list[list[int]]:
  """First-fit decreasing: bins (lists of indices into `lengths`) of total ≤ capacity."""
  bins, free = [], []
  for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
    for j, f in enumerate(free):
      if lengths[i] <= f:
        bins[j].append(i)
        free[j] -= lengths[i]
        break
    else:
      bins.append([i])
      free.append(capacity - lengths[i])
  return bins


def runs(mask_BxL: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(start, length) of each row's run of real tokens; raises unless it is one run."""
  m = np.asarray(mask_BxL) > 0
  length = m.sum(1)
  start = np.where(length > 0, m.argmax(1), 0)
  cols = np.arange(m.shape[1])[None]
  contiguous = (m == ((cols >= start[:, None]) & (cols < (start + length)[:, None]))).all(1)
  if not contiguous.all():
    bad = int(np.flatnonzero(~contiguous)[0])
    raise PackingError(f"row {bad}: its real tokens (attention mask 1) are not one run; a row "
                       "must be a left-padded prompt followed by a right-padded response")
  return start, length


def rows_per_group(mask_BxL, group: int, tokens_per_row: int) -> int:
  """The packed rows the fullest group needs (first-fit decreasing)."""
  _, length = runs(mask_BxL)
  b = length.shape[0]
  return max(len(rows_needed(list(length[g * group:(g + 1) * group]), tokens_per_row))
             for g in range(b // group))


def response_tokens(mask_BxL, n: int) -> np.ndarray:
  """[B] real tokens among each row's last n (its response)."""
  return (np.asarray(mask_BxL)[:, -n:] > 0).sum(1) if n else np.zeros(len(mask_BxL), int)


def _fullest_group(counts, group: int) -> int:
  """The largest sum of `counts` over one group of `group` consecutive rows."""
  return int(np.asarray(counts).reshape(-1, group).sum(1).max())


def response_slots(mask_BxL, group: int, n: int, bucket: bool = True) -> int:
  """M: the log-prob positions per row that hold the fullest group's real response tokens
  (G·M ≥ its count). `bucket`: M rounded up to a multiple of ⌈n / 8⌉ (at most 8 shapes)."""
  m = max(1, -(-_fullest_group(response_tokens(mask_BxL, n), group) // group))
  if bucket:
    step = max(1, -(-n // 8))
    m = -(-m // step) * step
  return min(m, n)


def plan(mask_BxL, group: int, tokens_per_row: int, n: int, rows: int | None = None,
         slots: int | None = None) -> dict:
  """The packing of rows `[B, L]` (groups of `group` consecutive rows) into `rows` packed rows
  of `tokens_per_row` tokens per group (None: what the fullest group needs, rounded up so that
  rows · tokens_per_row divides by `group`). `n`: the response length (the last n tokens of
  each row are predicted by `out_BxN`); `slots`: M of `take` / `put` (None:
  `response_slots` unbucketed). Returns {src, seg, pos: [B, W], out: [B, n],
  take, put: [B, M]}."""
  mask = np.asarray(mask_BxL)
  b, l = mask.shape
  t = int(tokens_per_row)
  if b % group:
    raise PackingError(f"{b} rows do not split into groups of {group}")
  start, length = runs(mask)
  if length.max(initial=0) > t:
    raise PackingError(f"a sequence of {int(length.max())} tokens does not fit in "
                       f"tokens_per_row={t} (train.tokens_per_row); raise it to at least "
                       "the longest prompt + response")
  groups = b // group
  bins = [rows_needed(list(length[g * group:(g + 1) * group]), t) for g in range(groups)]
  need = max(len(x) for x in bins)
  r = need if rows is None else int(rows)
  if r < need:
    raise PackingError(f"a group needs {need} packed rows of {t} tokens; {r} were asked for")
  while (r * t) % group:
    r += 1
  w = r * t // group
  m = response_slots(mask, group, n, bucket=False) if slots is None else int(slots)
  if m * group < _fullest_group(response_tokens(mask, n), group):
    raise PackingError(f"{m} log-prob slots per row do not hold a group's response tokens")
  take = np.zeros((groups, group * m), np.int32)
  put = np.full((groups, group * m), group * n, np.int32)
  src = np.zeros((groups, r * t), np.int32)
  seg = np.zeros((groups, r * t), np.int32)
  pos = np.zeros((groups, r * t), np.int32)
  out = np.zeros((b, n), np.int32)
  resp_start = l - n  # column of the first response token in a padded row
  for g, rows_g in enumerate(bins):
    filled = 0
    for ri, members in enumerate(rows_g):
      off = ri * t
      for j in members:
        row = g * group + j
        s, ln = int(start[row]), int(length[row])
        dst = np.arange(off, off + ln)
        src[g, dst] = j * l + np.arange(s, s + ln)
        seg[g, dst] = j + 1
        pos[g, dst] = np.arange(ln)
        # the hidden state at padded column c predicts column c + 1: response column
        # resp_start + k is predicted by column resp_start + k - 1, at slot off + (c - s)
        cols = resp_start - 1 + np.arange(n)
        inside = (cols >= s) & (cols < s + ln - 1)
        out[row] = np.where(inside, off + cols - s, 0)
        k = np.flatnonzero(inside)
        take[g, filled:filled + k.size] = off + cols[k] - s
        put[g, filled:filled + k.size] = j * n + k
        filled += k.size
        off += ln
  return {"src": src.reshape(b, w), "seg": seg.reshape(b, w), "pos": pos.reshape(b, w),
          "out": out, "take": take.reshape(b, m), "put": put.reshape(b, m)}


def utilization(seg_BxW) -> float:
  """The share of packed slots that hold a real token."""
  seg = np.asarray(seg_BxW)
  return float((seg > 0).mean()) if seg.size else 0.0


def gather_tokens(tokens_BxL, src_BxW, group: int, tokens_per_row: int):
  """The packed token rows `[B·W / T, T]` (jnp; `src` from `plan`)."""
  b, l = tokens_BxL.shape
  flat = tokens_BxL.reshape(b // group, group * l)
  packed = jnp.take_along_axis(flat, src_BxW.reshape(b // group, -1), axis=1)
  return packed.reshape(-1, tokens_per_row)


def as_rows(x_BxW, tokens_per_row: int):
  """A plan's per-row array `[B, W]` as packed rows `[B·W / T, T]`."""
  return x_BxW.reshape(-1, tokens_per_row)


def gather_response(x_BxNx, put_BxM, group: int):
  """The entries `[B, M, ...]` of a response-shaped `[B, N, ...]` array at `put`'s positions
  (each group's [G·N] flattened; padding reads position 0 and is dropped by `scatter_response`)."""
  b, n = x_BxNx.shape[:2]
  x = x_BxNx.reshape(b // group, group * n, *x_BxNx.shape[2:])
  idx = jnp.minimum(put_BxM, group * n - 1).reshape(b // group, -1)
  idx = idx.reshape(idx.shape + (1,) * (x.ndim - 2))
  return jnp.take_along_axis(x, idx, axis=1).reshape(b, -1, *x_BxNx.shape[2:])


def scatter_response(v_BxMx, put_BxM, group: int, n: int):
  """`[B, M, ...]` values back to `[B, N, ...]` at `put`'s positions, 0 elsewhere."""
  b = v_BxMx.shape[0]
  v = v_BxMx.reshape(b // group, -1, *v_BxMx.shape[2:])
  idx = put_BxM.reshape(b // group, -1)
  zeros = jnp.zeros((b // group, group * n) + v.shape[2:], v.dtype)
  out = jax.vmap(lambda z, i, x: z.at[i].set(x, mode="drop"))(zeros, idx, v)
  return out.reshape(b, n, *v_BxMx.shape[2:])


def gather_hidden(hidden_RxTxD, out_BxN, group: int):
  """The hidden states `[B, N, D]` that predict each row's response tokens, from the packed
  forward's `[R_total, T, D]` (each group's block of rows is contiguous)."""
  b, n = out_BxN.shape
  d = hidden_RxTxD.shape[-1]
  h = hidden_RxTxD.reshape(b // group, -1, d)
  idx = out_BxN.reshape(b // group, group * n)
  return jnp.take_along_axis(h, idx[..., None], axis=1).reshape(b, n, d)


# the batch's token rows that are packed, by plan name: (tokens, mask) keys
ROWS = {"plus": ("tokens_BxL", "attn_mask_BxL"),
        "minus": ("minus_tokens_BxM", "minus_attn_mask_BxM"),
        "crit": ("crit_tokens_BxCxL", "crit_attn_mask_BxCxL")}


def row_tokens(batch: dict) -> np.ndarray:
  """[B] real tokens a row costs the update's forwards: its x⁺ + response row and its replay
  rows (x⁻ + response, or the per-criterion rows) where the batch has them."""
  masks = [np.asarray(batch[m]) for _, m in ROWS.values() if batch.get(m) is not None]
  return sum(m.reshape(len(m), -1).sum(-1) for m in masks)


def planned(batch: dict, group: int, tokens_per_row: int = 0,
            multiple: int = 128) -> tuple[int, dict]:
  """(row length, its `plans`) for the batch. `tokens_per_row` 0: the batch's longest padded
  token row L, or L rounded up to a multiple of `multiple` (TPU lanes), whichever packs the
  batch into fewer slots (a tie takes the rounded one). With L itself every sequence fits a
  row alone, so a packed update never computes more positions than the padded one; the
  longer row can pair more sequences. `group`: the rows one plan packs together
  (`unit_rows`)."""
  if tokens_per_row:
    return tokens_per_row, plans(batch, group, tokens_per_row)
  exact = max(np.shape(batch[t])[-1] for t, _ in ROWS.values() if t in batch)
  rounded = -(-exact // multiple) * multiple
  options = [(t, plans(batch, group, t)) for t in dict.fromkeys((rounded, exact))]
  slots = lambda p: sum(int(np.prod(np.shape(p[f"pack_{n}_seg"]))) for n in ROWS
                        if f"pack_{n}_seg" in p)
  return min(options, key=lambda o: slots(o[1]))  # min keeps the first (rounded) on a tie


def row_length(batch: dict, group: int, multiple: int = 128) -> int:
  """The default packed row length of `planned`."""
  return planned(batch, group, multiple=multiple)[0]


def unit_rows(rows: int, group: int, fused: bool, grad_accum: int = 1,
              num_minibatches: int = 1, presorted: bool = False) -> int:
  """The rows one plan packs together: each micro-batch of the fused μ = 1 step (its rows
  never move); at μ > 1 each micro-batch of a mini-batch when the batch is `presorted` in its
  one-epoch mini-batch order on the host (`rljax.update.minibatch_order`), else a group of G
  (the mini-batches are then drawn as whole groups on device)."""
  if fused:
    return rows // grad_accum
  return rows // num_minibatches // grad_accum if presorted else group


def bucket_rows(rows: int, unit: int) -> int:
  """`rows` rounded up to a multiple of ⌈unit / 8⌉: at most 8 packed shapes per batch shape."""
  step = max(1, -(-unit // 8))
  return -(-rows // step) * step


def plans(batch: dict, group: int, tokens_per_row: int, bucket: bool = True) -> dict:
  """The plan of each of the batch's token rows (x⁺ + response; the replay's x⁻ + response
  or per-criterion rows when present) as {`pack_<rows>_<key>`: host array}. The
  per-criterion rows [B, C, L] are planned in groups of G·C and stored as [B, C, ...].
  `bucket`: the packed rows per group are rounded up (`bucket_rows`), so a run compiles its
  update for a few shapes, not one per batch."""
  n = batch["mask_BxN"].shape[1]
  out = {}
  for name, (_, mask_key) in ROWS.items():
    if mask_key not in batch or batch[mask_key] is None:
      continue
    mask = np.asarray(batch[mask_key])
    lead = mask.shape[:-1]
    flat = mask.reshape(-1, mask.shape[-1])
    unit = group * int(np.prod(lead[1:], dtype=int))
    rows = rows_per_group(flat, unit, tokens_per_row)
    if bucket:
      rows = bucket_rows(rows, unit)
    p = plan(flat, unit, tokens_per_row, n, rows=rows,
             slots=response_slots(flat, unit, n, bucket=bucket))
    for k in PLAN_KEYS:
      out[f"pack_{name}_{k}"] = p[k].reshape(*lead, -1)
  return out


def add_plans(batch: dict, group: int, tokens_per_row: int, bucket: bool = False) -> dict:
  """`batch` with its `plans` added."""
  return {**batch, **plans(batch, group, tokens_per_row, bucket)}


def padded_tokens(batch: dict) -> dict:
  """{rows: positions a padded forward computes} of a batch, against `packed_tokens`."""
  return {name: int(np.prod(np.shape(batch[t]))) for name, (t, _) in ROWS.items() if t in batch}


def packed_tokens(batch: dict) -> dict:
  """{rows: packed slots} of a batch carrying plans (`add_plans`)."""
  return {name: int(np.prod(np.shape(batch[f"pack_{name}_seg"]))) for name in ROWS
          if f"pack_{name}_seg" in batch}
