"""REAL: rewards as labels, in-group classification (SPEC §4); scale_rewards forced to none."""
from configs.common import plain_config


def get_config(arg=None):
  c = plain_config(arg, loss="real", loss_kwargs={"real_tau": 0.5})
  c.objective.advantage_kwargs = {"scale_rewards": "none"}
  return c


def sweep(add, arg=None):
  for tau in (0.25, 0.5, 1.0):
    add(**{"objective.loss_kwargs": {"real_tau": tau}})
