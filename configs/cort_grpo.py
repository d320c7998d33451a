"""CoRT on GRPO (the default): token credit from the rubric-free replay (SPEC §3)."""
from configs.common import base_config


def get_config(arg=None):
  return base_config(arg)


def sweep(add, arg=None):
  """The CoRT ablations of SPEC §3."""
  for t in ("cort", "cort_no_norm", "cort_no_ramp", "cort_no_norm_no_ramp"):
    add(**{"objective.transforms": (t,),
           "objective.transform_kwargs": {t: {} if "no_ramp" in t else {"ramp_steps": 0.5}}})
