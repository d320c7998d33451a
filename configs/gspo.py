"""GSPO: sequence-level ratio with small clip (3e-4 / 4e-4)."""
from configs.common import plain_config


def get_config(arg=None):
  return plain_config(arg, loss="gspo")


def sweep(add, arg=None):
  add(**{"objective.loss": "gspo"})
  add(**{"objective.loss": "gspo_token"})
