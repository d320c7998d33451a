"""CoRT token weights on DAPO."""
from configs import dapo


def get_config(arg=None):
  c = dapo.get_config(arg)
  c.objective.transforms = ("cort",)
  c.objective.transform_kwargs = {"cort": {"ramp_steps": 0.5}}
  return c


def sweep(add, arg=None):
  for eta in (0.25, 0.5):
    add(**{"objective.transform_kwargs": {"cort": {"eta": eta, "ramp_steps": 0.5}}})
