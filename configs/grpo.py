"""Plain GRPO (the CoRT baseline): group-normalized advantages, PPO clip."""
from configs.common import base_config


def get_config(arg=None):
  c = base_config(arg)
  c.objective.transforms = ()
  c.objective.transform_kwargs = {}
  return c


def sweep(add, arg=None):
  for lr in (1e-6, 3e-6):
    add(**{"optim.lr": lr})
