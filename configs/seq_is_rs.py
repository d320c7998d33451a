"""Sequence-level TIS + sequence rejection with a quantized rollout copy (verl's
`decoupled_seq_is_rs`): responses with ∏_t π_old/q outside [1/2, 2] are rejected (out of
the loss and the baseline); the kept ones are weighted by min(∏_t π_old/q, 2)."""
from configs.mismatch import mismatch_config, mismatch_sweep


def get_config(arg=None):
  return mismatch_config(arg, loss="grpo", transforms=("rej_seq_prod", "tis_seq_prod"))


def sweep(add, arg=None):
  mismatch_sweep(add)
