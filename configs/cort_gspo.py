"""CoRT on GSPO. Normalized token weights cancel in GSPO's sequence ratio, so CoRT uses
the token-level GSPO variant (the objectives refuse plain gspo + normalized CoRT)."""
from configs.common import base_config


def get_config(arg=None):
  c = base_config(arg)
  c.objective.loss = "gspo_token"
  c.objective.loss_kwargs = {}
  return c


def sweep(add, arg=None):
  for t in ("cort", "cort_no_norm"):
    add(**{"objective.transforms": (t,), "objective.transform_kwargs": {t: {"ramp_steps": 0.5}}})
