"""Paper-scale CoRT-GRPO on TPU pods: the Qwen3-4B, Qwen2.5-7B and Qwen3-14B shapes.

`configs/pod.py:model=qwen3_4b` (or qwen2_5_7b, qwen3_14b). `model.path` points at the
public config.json shipped in configs/models/<model>/ (shapes only: enough for
`python -m rljax.aot`); to train, point it at the weights:
`--config.model.path=/data/Qwen3-4B`. Each setting names the slice it was compiled for
(`topology`, a `jax.experimental.topologies` name) with the mesh, remat, batch and
gradient accumulation that fit there (experiments/README.md, "Pods: AOT compile").
"""
from configs.common import base_config, parse_arg

# model -> (topology, mesh shape, grad_accum); all fsdp over the slice, f32 master params,
# bf16 matmuls, rematerialized layers. grad_accum splits each 32-row mini-batch into
# micro-batches of whole groups with at least one row per chip.
SETTINGS = {
    "qwen3_4b": ("v5p:2x2x2", (1, -1, 1), 2),
    "qwen2_5_7b": ("v5p:2x2x4", (1, -1, 1), 2),
    "qwen3_14b": ("v5p:2x4x4", (1, -1, 1), 1),
}


def get_config(arg=None):
  a = parse_arg(arg, model="qwen3_4b")
  if a.model not in SETTINGS:
    raise ValueError(f"unknown pod model {a.model!r}; valid: {', '.join(SETTINGS)}")
  topology, mesh, accum = SETTINGS[a.model]
  c = base_config()
  c.topology = topology
  c.model.path = f"configs/models/{a.model}"
  c.model.param_dtype, c.model.dtype, c.model.remat = "float32", "bfloat16", True
  c.mesh.shape = mesh
  # 16 prompts x 8 samples, rubric prompts up to 512 tokens, responses up to 2048
  c.data.batch_size, c.data.max_prompt_len, c.data.max_replay_prompt_len = 128, 512, 256
  c.data.num_train, c.data.num_heldout, c.data.max_criteria = 8192, 512, 4
  c.rollout.num_generations, c.rollout.max_new_tokens = 8, 2048
  c.train.grad_accum, c.train.steps, c.train.logprob_chunk = accum, 500, 512
  # the paper's μ = 4 PPO updates per rollout batch: 4 mini-batches of 4 whole groups
  c.train.inner_epochs, c.train.num_minibatches = 1, 4
  c.optim.lr, c.optim.warmup_steps = 1e-6, 10
  c.checkpoint.every, c.eval.every, c.eval.num_prompts = 25, 25, 128
  return c
