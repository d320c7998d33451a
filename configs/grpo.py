"""Plain GRPO (the CoRT baseline): group-normalized advantages, PPO clip."""
from configs.common import plain_config


def get_config(arg=None):
  return plain_config(arg, loss_kwargs={"eps_low": 0.2, "eps_high": 0.27})


def sweep(add, arg=None):
  for lr in (1e-6, 3e-6):
    add(**{"optim.lr": lr})
