"""Dr.GRPO: no std normalization, seq-mean-token-sum-norm aggregation."""
from configs.common import base_config


def get_config(arg=None):
  c = base_config(arg)
  c.objective.advantage = "dr_grpo"
  c.objective.transforms = ()
  c.objective.transform_kwargs = {}
  c.objective.loss_kwargs = {"agg": "seq-mean-token-sum-norm"}
  return c


def sweep(add, arg=None):
  add(**{"objective.loss_kwargs": {"agg": "seq-mean-token-sum-norm"}})
  add(**{"objective.loss_kwargs": {"agg": "token-mean"}})
