"""Training-step throughput: rljax GRPO and CoRT steps vs a PyTorch reference step.

    python bench/train_step.py [--batch 8] [--prompt 64] [--response 64] [--smollm2]

Rows: tokens/s of the rljax GRPO step, the rljax CoRT step (trainer + rubric-free
replay in one jit), and a PyTorch reference step (transformers model, the same
GRPO loss, torch.optim.AdamW) on the same weights and batch; model FLOP
utilization against this machine's measured float32 matmul peak; the CoRT/GRPO
step-time ratio and the rljax/torch speed ratio. Writes bench/results/train_step.json.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from bench.common import best_time, report  # noqa: E402


def matmul_peak(n=2048, repeats=5) -> float:
  a = jnp.ones((n, n), jnp.float32)
  f = jax.jit(lambda a: a @ a)
  t = best_time(lambda: f(a).block_until_ready(), repeats)
  return 2 * n**3 / t


def make_batch(b, p, n, vocab, seed=0):
  rng = np.random.RandomState(seed)
  toks = rng.randint(0, vocab, (b, p + n)).astype(np.int32)
  mask = np.ones((b, p + n), np.int32)
  return {"tokens_BxL": toks, "attn_mask_BxL": mask,
          "minus_tokens_BxM": toks[:, p // 2:].copy(), "minus_attn_mask_BxM": mask[:, p // 2:],
          "mask_BxN": np.ones((b, n), np.float32), "adv_B": rng.randn(b).astype(np.float32),
          "sampler_logp_BxN": np.full((b, n), -2.0, np.float32)}


def rljax_step(model, batch, n, transforms, g):
  from rljax.models import params_dict
  from rljax.objectives import build_objective
  from rljax.train_step import StepConfig, init_state, jit_train_step, make_optimizer
  obj = build_objective(advantage="grpo", transforms=transforms, loss="grpo",
                        num_generations=g)
  graphdef, _ = nnx.split(model)
  opt = make_optimizer(1e-6)
  sc = StepConfig(objective=obj, response_len=n, replay=bool(transforms), chunk_size=256)
  step = jit_train_step(graphdef, opt, sc)
  state = [init_state(jax.tree.map(jnp.copy, params_dict(model)), opt, obj)]
  flops = step.lower(state[0], batch, None).compile().cost_analysis()["flops"]

  def run():
    state[0], m = step(state[0], batch, None)
    jax.block_until_ready(m)

  return run, flops


def torch_step(hf, batch, n):
  import torch
  opt = torch.optim.AdamW(hf.parameters(), lr=1e-6, weight_decay=0.0)
  toks = torch.tensor(batch["tokens_BxL"], dtype=torch.long)
  mask = torch.tensor(batch["attn_mask_BxL"], dtype=torch.long)
  rmask = torch.tensor(batch["mask_BxN"])
  adv = torch.tensor(batch["adv_B"])[:, None]

  def run():
    logits = hf(input_ids=toks, attention_mask=mask).logits[:, -n - 1:-1].float()
    logp = torch.log_softmax(logits, -1).gather(-1, toks[:, -n:, None])[..., 0]
    ratio = torch.exp(logp - logp.detach())
    obj = torch.minimum(ratio * adv, torch.clamp(ratio, 0.8, 1.2) * adv)
    loss = -((obj * rmask).sum(1) / rmask.sum(1)).mean()  # seq-mean-token-mean
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(hf.parameters(), 1.0)
    opt.step()

  return run


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--batch", type=int, default=8)
  ap.add_argument("--prompt", type=int, default=64)
  ap.add_argument("--response", type=int, default=64)
  ap.add_argument("--repeats", type=int, default=3)
  ap.add_argument("--smollm2", action="store_true", help="also SmolLM2-135M (slow on CPU)")
  a = ap.parse_args()
  import torch
  import transformers
  from rljax.models import load_model
  from tests.models.hf_fixtures import make_hf_model

  peak = matmul_peak()
  rows = []
  setups = []
  with tempfile.TemporaryDirectory() as d:
    hf = make_hf_model("qwen3_qk_norm", d, hidden_size=256, intermediate_size=768,
                       num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4,
                       head_dim=32, vocab_size=8192).train()
    setups.append(("tiny-qwen3 (4L, d256, V8192)", hf, load_model(d)))
  if a.smollm2:
    from rljax.models.bundled import smollm2_path
    p = smollm2_path()
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.dirname(p), gguf_file=os.path.basename(p), dtype=torch.float32).train()
    setups.append(("SmolLM2-135M", hf, load_model(p)))
  for name, hf, model in setups:
    batch = make_batch(a.batch, a.prompt, a.response, model.cfg.vocab_size)
    tokens = a.batch * (a.prompt + a.response)
    grpo, f_grpo = rljax_step(model, batch, a.response, (), g=4)
    cort, f_cort = rljax_step(model, batch, a.response, ("cort_no_ramp",), g=4)
    t_grpo = best_time(grpo, a.repeats)
    t_cort = best_time(cort, a.repeats)
    t_torch = best_time(torch_step(hf, batch, a.response), a.repeats)
    for impl, t, fl in (("rljax GRPO", t_grpo, f_grpo), ("rljax CoRT", t_cort, f_cort),
                        ("torch GRPO", t_torch, f_grpo)):
      rows.append({"model": name, "step": impl, "time_s": t, "tok_s": tokens / t,
                   "mfu": fl / t / peak})
    rows.append({"model": name, "step": "CoRT/GRPO time", "time_s": t_cort / t_grpo,
                 "flops_ratio": f_cort / f_grpo})
    rows.append({"model": name, "step": "rljax/torch speed", "time_s": t_torch / t_grpo})
  report("train_step", ["model", "step", "time_s", "tok_s", "mfu", "flops_ratio"], rows,
         {"matmul_peak_gflops": peak / 1e9, "batch": a.batch, "prompt": a.prompt,
          "response": a.response, "torch_threads": torch.get_num_threads(),
          "note": "mfu = XLA cost-analysis FLOPs of the rljax GRPO step / time / peak "
                  "(the torch row uses the same FLOP count)"})


if __name__ == "__main__":
  main()
