"""PPO in bypass mode with a quantized rollout copy (verl's `ppo_is_bypass`): π_old := the
sampler's recorded log q, so the clipped ratio π_θ/q is the correction, and with 2 PPO
updates per rollout batch the π_old forward is skipped (one forward of the batch fewer)."""
from configs.mismatch import mismatch_config, mismatch_sweep


def get_config(arg=None):
  c = mismatch_config(arg, loss="grpo")
  c.train.old_policy = "bypass"
  c.train.num_minibatches = 2
  return c


def sweep(add, arg=None):
  mismatch_sweep(add)
