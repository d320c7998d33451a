"""The shared base of the mismatch configs: a W8A8 + int4-KV rollout copy, the top-k head
recorded, one update per rollout batch as in the SC paper (SPEC §5). The sampler draws
from the full distribution, as the trainer scores it, so with copy = none p = q up to
float noise and every measured mismatch comes from the rollout copy."""
from configs.common import plain_config


def mismatch_config(arg, loss: str, transforms=(), loss_kwargs=None):
  c = plain_config(arg, loss=loss, loss_kwargs=loss_kwargs)
  c.rollout.copy = "w8a8+kv4"
  c.rollout.record_topk = 32
  c.objective.transforms = tuple(transforms)
  c.rollout.top_k, c.train.truncate_logprobs = 0, False
  c.train.inner_epochs = c.train.num_minibatches = 1
  if c.model.tiny:
    # the random tiny model's logits have std ≈ 0.16: near uniform over 49k tokens, where
    # quantization barely moves the distribution; T = 0.1 gives it a trained model's peaked
    # distribution, so the copy's mismatch shows (kl_q_p ≈ 3e-3 with W8A8 + int4 KV)
    c.rollout.temperature = 0.1
  return c


def mismatch_sweep(add):
  """Quantized sampler, and a stale one synced every 4 steps."""
  add(**{"rollout.copy": "w8a8+kv4", "rollout.sync_every": 1})
  add(**{"rollout.copy": "w8a8+kv4", "rollout.sync_every": 4})
