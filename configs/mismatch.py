"""The shared base of the mismatch configs: a W8A8 + int4-KV rollout copy, the top-k head
recorded, REINFORCE-style losses with one update per batch (SPEC §5)."""
from configs.common import plain_config


def mismatch_config(arg, loss: str, transforms=(), loss_kwargs=None):
  c = plain_config(arg, loss=loss, loss_kwargs=loss_kwargs)
  c.rollout.copy = "w8a8+kv4"
  c.rollout.record_topk = 32
  c.objective.transforms = tuple(transforms)
  return c


def mismatch_sweep(add):
  """Quantized sampler, and a stale one synced every 4 steps."""
  add(**{"rollout.copy": "w8a8+kv4", "rollout.sync_every": 1})
  add(**{"rollout.copy": "w8a8+kv4", "rollout.sync_every": 4})
