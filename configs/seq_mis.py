"""Sequence-level MIS with a quantized rollout copy: a response whose ratio product
∏_t π_old/q leaves [0.5, 5] gets weight 0 (it stays in the normalizer); inside, the weight
is the product itself."""
from configs.mismatch import mismatch_config, mismatch_sweep


def get_config(arg=None):
  return mismatch_config(arg, loss="grpo", transforms=("mis_seq_prod",))


def sweep(add, arg=None):
  mismatch_sweep(add)
