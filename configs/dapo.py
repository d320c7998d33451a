"""DAPO: clip-higher (0.2 / 0.28), token-mean, dynamic sampling."""
from configs.common import base_config


def get_config(arg=None):
  c = base_config(arg)
  c.objective.transforms = ()
  c.objective.transform_kwargs = {}
  c.objective.loss = "dapo"
  c.objective.loss_kwargs = {}
  c.objective.dynamic_sampling = True
  return c


def sweep(add, arg=None):
  for eps_high in (0.28, 0.32):
    add(**{"objective.loss_kwargs": {"eps_high": eps_high}})
