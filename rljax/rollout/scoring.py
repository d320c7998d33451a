"""The trainer-side logprobs of a rollout's tokens (reference for tests, bench and logging).

The train step computes the same thing fused with its loss; this is the stand-alone
version: one full forward of prompt + response (`rljax.scoring.response_logprobs`)
under the sampler's temperature / top-k / top-p (plain logprobs for greedy).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import NamedSharding

from rljax.rollout.config import SamplerConfig
from rljax.rollout.sampler import Rollout, as_graph_state, sequences
from rljax.scoring import response_logprobs


def score_rollout(model, rollout: Rollout, cfg: SamplerConfig, with_head: bool = False) -> dict:
  """dict(logp_BxN[, head_logp_BxNxK]): the model's logprobs of the sampled tokens (and of
  the recorded head ids) under the sampling distribution's settings, float32."""
  graphdef, state = as_graph_state(model)
  ids, mask = sequences(rollout)
  n = rollout.tokens_BxN.shape[1]
  head = rollout.topk_ids_BxNxK if with_head else None
  t, k, p = (1.0, 0, 1.0) if cfg.greedy else (cfg.temperature, cfg.top_k, cfg.top_p)
  # parameters laid out on a mesh: the Pallas kernels (attention="splash") run per shard
  mesh = next((x.sharding.mesh for x in jax.tree.leaves(state)
               if isinstance(getattr(x, "sharding", None), NamedSharding)), None)
  return _score_jit(graphdef, state, ids, mask, head, n, t, k, p, mesh)


@functools.partial(jax.jit, static_argnums=(0, 5, 6, 7, 8, 9))
def _score_jit(graphdef, state, ids_BxT, mask_BxT, head_BxNxK, n, temperature, top_k, top_p,
               mesh):
  out = response_logprobs(nnx.merge(graphdef, state), ids_BxT, mask_BxT, n,
                          temperature=temperature, top_k=top_k, top_p=top_p,
                          head_ids_BxNxK=head_BxNxK, mesh=mesh)
  live = mask_BxT[:, -n:] > 0
  res = {"logp_BxN": jnp.where(live, out["logp_BxT"], 0.0)}
  if head_BxNxK is not None:
    res["head_logp_BxNxK"] = out["head_logp_BxTxK"]
  return res
