"""Dr.GRPO: no std normalization, seq-mean-token-sum-norm aggregation."""
from configs.common import plain_config


def get_config(arg=None):
  return plain_config(arg, advantage="dr_grpo", loss_kwargs={"agg": "seq-mean-token-sum-norm"})


def sweep(add, arg=None):
  add(**{"objective.loss_kwargs": {"agg": "seq-mean-token-sum-norm"}})
  add(**{"objective.loss_kwargs": {"agg": "token-mean"}})
