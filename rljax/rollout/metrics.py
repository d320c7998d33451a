"""Sampler–trainer mismatch on the sampled tokens (the trainer logs these every step).

With q the sampler's probability of the token it emitted (recorded at sampling time)
and p the trainer's probability of the same token (same temperature / truncation),
r = p / q. Tokens are drawn from q, so over the masked tokens
  KL(q‖p) ≈ mean(r − 1 − log r)   (k3: unbiased, never negative)
          ≈ mean(log q − log p)    (k1: unbiased, noisier).
and χ²(p‖q) = E_q[r²] − 1 ≈ mean(r²) − 1 (the variance of the token IS weight), and the
perplexity ratio ppl_p / ppl_q = exp(mean(log q − log p)) over the tokens.
Log-ratios are clipped to ±20 so that a support mismatch (p = 0) reads as large, not inf.
With `by_length`, K3 and the fraction of responses whose mean |log r| exceeds 0.1 are also
given per response-length bin (`*_len{j}`, the four quarters of the padded length).
"""
from __future__ import annotations

import math

import jax.numpy as jnp

_CLIP = 20.0


def mismatch_metrics(logq_BxT, logp_BxT, mask_BxT, by_length: bool = False) -> dict:
  """Scalar float32 metrics over the tokens where `mask_BxT` is 1 (0 when there are none)."""
  m = mask_BxT.astype(jnp.float32)
  n = jnp.sum(m)
  safe_n = jnp.maximum(n, 1.0)
  logq, logp = logq_BxT.astype(jnp.float32), logp_BxT.astype(jnp.float32)
  log_r = jnp.where(m > 0, jnp.clip(logp - logq, -_CLIP, _CLIP), 0.0)
  mean = lambda x: jnp.sum(x * m) / safe_n
  outside = lambda lo, hi: mean(((log_r < math.log(lo)) | (log_r > math.log(hi)))
                                .astype(jnp.float32))
  q, p = jnp.exp(jnp.minimum(logq, 0.0)), jnp.exp(jnp.minimum(logp, 0.0))
  dq, dp = q - mean(q), p - mean(p)
  var = mean(dq * dq) * mean(dp * dp)
  corr = jnp.where(var > 0, mean(dq * dp) / jnp.sqrt(jnp.where(var > 0, var, 1.0)), 0.0)
  out = {
      "abs_log_ratio_mean": mean(jnp.abs(log_r)),
      "abs_log_ratio_max": jnp.max(jnp.abs(log_r) * m),
      "kl_q_p": mean(jnp.expm1(log_r) - log_r),
      "kl_q_p_k1": mean(-log_r),
      "frac_ratio_outside_0.9_1.1": outside(0.9, 1.1),
      "frac_ratio_outside_0.5_2": outside(0.5, 2.0),
      "prob_corr": corr,
      "chi2": mean(jnp.exp(2.0 * log_r)) - 1.0,
      "ppl_ratio": jnp.exp(mean(-log_r)),
      "num_tokens": n,
  }
  if by_length:
    from rljax.objectives.common import length_bin_fracs, length_bin_means
    t_B = jnp.maximum(jnp.sum(m, -1), 1.0)
    k3_B = jnp.sum((jnp.expm1(log_r) - log_r) * m, -1) / t_B
    far_B = jnp.sum(jnp.abs(log_r) * m, -1) / t_B > 0.1
    out.update(length_bin_fracs("frac_seqs_abs_log_ratio_gt_0.1", far_B, m))
    out.update(length_bin_means("kl_q_p", k3_B, m))
  return out
