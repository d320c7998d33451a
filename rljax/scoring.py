"""Trainer-side log-probabilities of response tokens: the one forward that the train step,
π_old scoring, the CoRT replay and the stand-alone rollout scoring all share.

A row is prompt + response (left-padded prompt, right-padded response); `hidden[:, t]`
predicts `tokens[:, t + 1]`, so the last `n` tokens are predicted by the `n` positions
ending one before the last.
"""
from __future__ import annotations

from flax import nnx

from rljax.logprobs import token_logprobs
from rljax.models.decoder import positions_from_mask
from rljax.sharding import mesh_scope


def response_logprobs(model, tokens_BxL, mask_BxL, n: int, *, temperature: float = 1.0,
                      top_k: int = 0, top_p: float = 1.0, chunk_size: int = 512,
                      head_ids_BxNxK=None, mesh=None, adapters=None) -> dict:
  """dict(logp_BxT, entropy_BxT[, head_logp_BxTxK]) of the last `n` tokens of each row under
  `model` (an nnx Decoder; with its LoRA `adapters`), float32. `mesh`: the model call runs
  under `mesh_scope(mesh)`."""
  with mesh_scope(mesh):
    hidden, _ = model(tokens_BxL, positions_from_mask(mask_BxL), mask_BxL, adapters=adapters)
  l = tokens_BxL.shape[1]
  w, layout = model.unembedding()
  return token_logprobs(hidden[:, l - n - 1:l - 1], w, tokens_BxL[:, l - n:], head_ids_BxNxK,
                        temperature=temperature, top_k=top_k, top_p=top_p,
                        chunk_size=chunk_size, layout=layout)


def response_outputs(graphdef, params, tokens_BxL, mask_BxL, n: int, sc,
                     head_ids_BxNxK=None, adapters=None) -> dict:
  """`response_logprobs` of the model `(graphdef, params)` (with LoRA `adapters`) under the
  scoring settings of `sc` (a `StepConfig`: temperature, top_k, top_p, chunk_size)."""
  return response_logprobs(nnx.merge(graphdef, params), tokens_BxL, mask_BxL, n,
                           temperature=sc.temperature, top_k=sc.top_k, top_p=sc.top_p,
                           chunk_size=sc.chunk_size, head_ids_BxNxK=head_ids_BxNxK,
                           adapters=adapters)


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
