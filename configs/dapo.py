"""DAPO: clip-higher (0.2 / 0.28), token-mean, dynamic sampling."""
from configs.common import plain_config


def get_config(arg=None):
  c = plain_config(arg, loss="dapo")
  c.objective.dynamic_sampling = True
  c.objective.overlong_cache = c.rollout.max_new_tokens // 4  # soft overlong punishment
  return c


def sweep(add, arg=None):
  for eps_high in (0.28, 0.32):
    add(**{"objective.loss_kwargs": {"eps_high": eps_high}})
