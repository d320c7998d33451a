"""GSPO: sequence-level ratio with small clip (3e-4 / 4e-4)."""
from configs.common import base_config


def get_config(arg=None):
  c = base_config(arg)
  c.objective.transforms = ()
  c.objective.transform_kwargs = {}
  c.objective.loss = "gspo"
  c.objective.loss_kwargs = {}
  return c


def sweep(add, arg=None):
  add(**{"objective.loss": "gspo"})
  add(**{"objective.loss": "gspo_token"})
