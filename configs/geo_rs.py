"""Geometric rejection + veto with a quantized rollout copy (verl's `decoupled_geo_rs`): a
response whose geometric-mean ratio exp(mean_t log π_old/q) leaves [1/u, u], or that holds a
token with ratio below 1e-4, is out of the loss, the normalizer and the group baseline.
u = 1.001 (the field's) rejects nearly every response of a W8A8 + int4-KV copy; this
preset uses u = 1.05 — check `transform/rej_seq_geo/frac_seqs_rejected` for your copy."""
from configs.mismatch import mismatch_config, mismatch_sweep


def get_config(arg=None):
  c = mismatch_config(arg, loss="grpo", transforms=("rej_seq_geo", "rej_veto"))
  c.objective.transform_kwargs = {"rej_seq_geo": {"high": 1.05}}
  return c


def sweep(add, arg=None):
  mismatch_sweep(add)
