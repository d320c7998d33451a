"""Trainer-side log-probabilities of response tokens: the one forward that the train step,
π_old scoring, the CoRT replay and the stand-alone rollout scoring all share.

A row is prompt + response (left-padded prompt, right-padded response); `hidden[:, t]`
predicts `tokens[:, t + 1]`, so the last `n` tokens are predicted by the `n` positions
ending one before the last.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import jax.numpy as jnp
from flax import nnx

from rljax import packing
from rljax.logprobs import token_logprobs
from rljax.models.decoder import positions_from_mask
from rljax.sharding import mesh_scope


def response_logprobs(model, tokens_BxL, mask_BxL, n: int, *, temperature: float = 1.0,
                      top_k: int = 0, top_p: float = 1.0, chunk_size: int = 512,
                      head_ids_BxNxK=None, mesh=None, adapters=None, pack=None) -> dict:
  """dict(logp_BxT, entropy_BxT[, head_logp_BxTxK]) of the last `n` tokens of each row under
  `model` (an nnx Decoder; with its LoRA `adapters`), float32. `mesh`: the model call runs
  under `mesh_scope(mesh)`. `pack` (a `Pack`): the forward runs on the packed rows of its
  plan (`rljax.packing`) and the log-probabilities only at the real response tokens (its
  `take` / `put`), scattered back to [B, n]: the padded forward's values where the
  response is real, 0 at its padding."""
  l = tokens_BxL.shape[1]
  w, layout = model.unembedding()
  kw = dict(temperature=temperature, top_k=top_k, top_p=top_p, chunk_size=chunk_size,
            layout=layout)
  with mesh_scope(mesh):
    if pack is None:
      hidden, _ = model(tokens_BxL, positions_from_mask(mask_BxL), mask_BxL, adapters=adapters)
      hidden = hidden[:, l - n - 1:l - 1]
    else:
      seg = packing.as_rows(pack.seg, pack.tokens_per_row)
      packed, _ = model(packing.gather_tokens(tokens_BxL, pack.src, pack.group,
                                              pack.tokens_per_row),
                        packing.as_rows(pack.pos, pack.tokens_per_row), seg > 0,
                        adapters=adapters, segment_ids_BxT=seg)
      if pack.take is not None:
        b, g, d = tokens_BxL.shape[0], pack.group, packed.shape[-1]
        h = jnp.take_along_axis(packed.reshape(b // g, -1, d),
                                pack.take.reshape(b // g, -1)[..., None], axis=1)
        at = lambda x: None if x is None else packing.gather_response(x, pack.put, g)
        out = token_logprobs(h.reshape(b, -1, d), w, at(tokens_BxL[:, l - n:]),
                             at(head_ids_BxNxK), **kw)
        return {k: packing.scatter_response(v, pack.put, g, n) for k, v in out.items()}
      hidden = packing.gather_hidden(packed, pack.out, pack.group)
  return token_logprobs(hidden, w, tokens_BxL[:, l - n:], head_ids_BxNxK, **kw)


def response_outputs(graphdef, params, tokens_BxL, mask_BxL, n: int, sc,
                     head_ids_BxNxK=None, adapters=None, pack=None) -> dict:
  """`response_logprobs` of the model `(graphdef, params)` (with LoRA `adapters`; on the
  packed rows of `pack`) under the scoring settings of `sc` (a `StepConfig`: temperature,
  top_k, top_p, chunk_size)."""
  return response_logprobs(nnx.merge(graphdef, params), tokens_BxL, mask_BxL, n,
                           temperature=sc.temperature, top_k=sc.top_k, top_p=sc.top_p,
                           chunk_size=sc.chunk_size, head_ids_BxNxK=head_ids_BxNxK,
                           adapters=adapters, pack=pack)


class Pack(NamedTuple):
  """One packing plan's device arrays (`rljax.packing.plan`) and its static sizes."""
  src: Any
  seg: Any
  pos: Any
  out: Any
  group: int
  tokens_per_row: int
  take: Any = None   # the real response tokens' slots (None: log-probs at all B × n)
  put: Any = None


def batch_pack(batch: dict, which: str, sc, rows_per_unit: int = 1):
  """The `Pack` of the batch's `which` rows ("plus": x⁺ + response, "minus": x⁻ + response,
  "crit": the per-criterion rows, flattened to [B·C, ...]) when the batch carries a plan
  (`pack_<which>_<src|seg|pos|out>`), else None. `rows_per_unit`: rows per batch row (C for
  "crit")."""
  if not sc.tokens_per_row or f"pack_{which}_src" not in batch:
    return None
  b = batch[f"pack_{which}_src"].shape[0] * rows_per_unit
  arr = {k: batch[f"pack_{which}_{k}"].reshape(b, -1) if f"pack_{which}_{k}" in batch else None
         for k in packing.PLAN_KEYS}
  return Pack(**arr, group=(sc.pack_group or sc.objective.group_size) * rows_per_unit,
              tokens_per_row=sc.tokens_per_row)


def policy_params(params, ref_params, sc) -> tuple:
  """(model params, adapters) of the policy being trained. With LoRA (`sc.lora`) the trained
  `params` are the adapters and the frozen base is `ref_params`; the base alone (adapters
  off) is the reference policy."""
  if not sc.lora:
    return params, None
  if ref_params is None:
    raise ValueError("LoRA: the step needs the frozen base as ref_params (the trained params "
                     "are the adapters)")
  return ref_params, params
