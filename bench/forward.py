"""Forward throughput: rljax (jitted) vs transformers (PyTorch, float32) on the same weights.

    python bench/forward.py [--smollm2/--no-smollm2] [--batch 8] [--seq 128]

Prints tokens/s of each and the ratio (target >= 1.5x) for a tiny config and
for SmolLM2-135M-Instruct; writes bench/results/forward.json.
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


def rljax_forward(model):
  graphdef, state = nnx.split(model)

  @jax.jit
  def fwd(state, ids, pos, mask):
    m = nnx.merge(graphdef, state)
    h, _ = m(ids, pos, mask)
    return m.logits(h)

  return lambda ids, pos, mask: fwd(state, ids, pos, mask)


def measure(name, hf_model, rl_model, vocab, batch, seq, repeats):
  import torch
  rng = np.random.RandomState(0)
  ids = rng.randint(0, vocab, (batch, seq)).astype(np.int32)
  mask = np.ones_like(ids)
  pos = np.broadcast_to(np.arange(seq), ids.shape).astype(np.int32)
  fwd = rljax_forward(rl_model)
  j_ids, j_pos, j_mask = map(jnp.asarray, (ids, pos, mask))
  t_rl = best_time(lambda: fwd(j_ids, j_pos, j_mask).block_until_ready(), repeats)
  t_ids, t_mask, t_pos = (torch.tensor(a, dtype=torch.long) for a in (ids, mask, pos))

  def hf():
    with torch.inference_mode():
      hf_model(input_ids=t_ids, attention_mask=t_mask, position_ids=t_pos)

  t_hf = best_time(hf, repeats)
  n = batch * seq
  return {"model": name, "batch": batch, "seq": seq, "rljax_tok_s": n / t_rl,
          "torch_tok_s": n / t_hf, "ratio": t_hf / t_rl}


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--batch", type=int, default=8)
  ap.add_argument("--seq", type=int, default=128)
  ap.add_argument("--repeats", type=int, default=5)
  ap.add_argument("--smollm2", action=argparse.BooleanOptionalAction, default=True)
  args = ap.parse_args()
  import torch
  import transformers
  from rljax.models import load_model
  from tests.models.hf_fixtures import make_hf_model

  rows = []
  with tempfile.TemporaryDirectory() as d:
    hf = make_hf_model("qwen3_qk_norm", d, hidden_size=256, intermediate_size=768,
                       num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4,
                       head_dim=32, vocab_size=8192)
    rows.append(measure("tiny-qwen3 (4L, d256, V8192)", hf, load_model(d), 8192,
                        args.batch, args.seq, args.repeats))
  if args.smollm2:
    from rljax.models.bundled import smollm2_path
    path = smollm2_path()
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.dirname(path), gguf_file=os.path.basename(path), dtype=torch.float32).eval()
    rows.append(measure("SmolLM2-135M", hf, load_model(path), 49152, args.batch, args.seq,
                        args.repeats))
  report("forward", ["model", "batch", "seq", "rljax_tok_s", "torch_tok_s", "ratio"], rows,
         {"torch_threads": torch.get_num_threads(), "target_ratio": 1.5})


if __name__ == "__main__":
  main()
