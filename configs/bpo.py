"""Mismatch correction `bpo` with a quantized rollout copy (SPEC §5)."""
from configs.mismatch import mismatch_config, mismatch_sweep


def get_config(arg=None):
  return mismatch_config(arg, loss="grpo", transforms=("bpo",))


def sweep(add, arg=None):
  mismatch_sweep(add)
