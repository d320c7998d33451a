"""Generation throughput: the rljax sampler vs transformers `generate` on the same weights.

    python bench/sampler.py [--no-smollm2] [--batches 1,8,32] [--new 32] [--topk 32,128]

New tokens per second (prompt of --prompt random tokens, --new tokens, no early stop)
of `rljax.rollout.generate` (jitted; after one warm-up call) and of
`transformers.generate` (PyTorch float32, KV cache), greedy and sampled (temperature 1,
no truncation), for a tiny Qwen3 and SmolLM2-135M at each batch size, with the ratio
(target >= 3x at batch 32): end to end (prefill included) and decode only (minus the
time of a max_new_tokens=1 call); then the cost of recording the sampler's top-k head.
Writes bench/results/sampler.json.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import jax  # noqa: E402
import numpy as np  # noqa: E402

from bench.common import best_time, report  # noqa: E402
from rljax.rollout import SamplerConfig, generate  # noqa: E402


def rljax_time(model, ids, mask, cfg, repeats):
  seed = [0]

  def run():
    seed[0] += 1
    jax.block_until_ready(generate(model, ids, mask, jax.random.key(seed[0]), cfg))

  return best_time(run, repeats)


def hf_time(hf_model, ids, mask, sample, n, repeats):
  import torch
  import transformers
  gen = transformers.GenerationConfig(
      max_new_tokens=n, do_sample=sample, top_k=0 if sample else None,
      top_p=1.0 if sample else None, temperature=1.0 if sample else None,
      eos_token_id=None, pad_token_id=0)
  t_ids, t_mask = torch.tensor(ids, dtype=torch.long), torch.tensor(mask, dtype=torch.long)

  def run():
    with torch.inference_mode():
      out = hf_model.generate(input_ids=t_ids, attention_mask=t_mask, generation_config=gen)
    assert out.shape[1] == ids.shape[1] + n

  return best_time(run, repeats)


def measure(name, hf_model, rl_model, vocab, args):
  rng = np.random.RandomState(0)
  rows, topk_rows = [], []
  for b in args.batches:
    ids = rng.randint(3, vocab, (b, args.prompt)).astype(np.int32)
    mask = np.ones_like(ids)
    for mode, temp in (("greedy", 0.0), ("sampled", 1.0)):
      cfg = SamplerConfig(max_new_tokens=args.new, temperature=temp, stop_token_ids=())
      t_rl = rljax_time(rl_model, ids, mask, cfg, args.repeats)
      t_hf = hf_time(hf_model, ids, mask, temp > 0, args.new, args.hf_repeats)
      # Decode only: minus the time of prefill + first token (max_new_tokens=1).
      d_rl = t_rl - rljax_time(rl_model, ids, mask, cfg.replace(max_new_tokens=1), args.repeats)
      d_hf = t_hf - hf_time(hf_model, ids, mask, temp > 0, 1, args.hf_repeats)
      n, nd = b * args.new, b * (args.new - 1)
      rows.append({"model": name, "batch": b, "mode": mode, "rljax_tok_s": n / t_rl,
                   "hf_tok_s": n / t_hf, "ratio": t_hf / t_rl, "rljax_decode_tok_s": nd / d_rl,
                   "hf_decode_tok_s": nd / d_hf, "decode_ratio": d_hf / d_rl})
      print(rows[-1], flush=True)
      if mode == "sampled" and b in args.topk_batches:
        for k in args.topk:
          t_k = rljax_time(rl_model, ids, mask, cfg.replace(record_topk=k), args.repeats)
          topk_rows.append({"model": name, "batch": b, "record_topk": k, "rljax_tok_s": n / t_k,
                            "base_tok_s": n / t_rl, "overhead_pct": 100 * (t_k / t_rl - 1)})
          print(topk_rows[-1], flush=True)
  return rows, topk_rows


def _ints(s):
  return [int(x) for x in s.split(",") if x]


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--batches", type=_ints, default=[1, 8, 32])
  ap.add_argument("--prompt", type=int, default=16)
  ap.add_argument("--new", type=int, default=32)
  ap.add_argument("--repeats", type=int, default=3)
  ap.add_argument("--hf-repeats", type=int, default=2)
  ap.add_argument("--topk", type=_ints, default=[32, 128])
  ap.add_argument("--topk-batches", type=_ints, default=[8, 32])
  ap.add_argument("--smollm2", action=argparse.BooleanOptionalAction, default=True)
  ap.add_argument("--tiny", action=argparse.BooleanOptionalAction, default=True)
  args = ap.parse_args()
  import torch
  import transformers
  from rljax.models import load_model
  from tests.models.hf_fixtures import make_hf_model

  rows, topk_rows = [], []
  if args.tiny:
    with tempfile.TemporaryDirectory() as d:
      hf = make_hf_model("qwen3_qk_norm", d, hidden_size=256, intermediate_size=768,
                         num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4,
                         head_dim=32, vocab_size=8192, max_position_embeddings=512)
      r, k = measure("tiny-qwen3 (4L, d256, V8192)", hf, load_model(d), 8192, args)
      rows, topk_rows = rows + r, topk_rows + k
  if args.smollm2:
    from rljax.models.bundled import smollm2_path
    path = smollm2_path()
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.dirname(path), gguf_file=os.path.basename(path), dtype=torch.float32).eval()
    r, k = measure("SmolLM2-135M", hf, load_model(path), 49152, args)
    rows, topk_rows = rows + r, topk_rows + k
  meta = {"torch_threads": torch.get_num_threads(), "target_ratio_batch32": 3.0,
          "prompt": args.prompt, "new_tokens": args.new, "topk": topk_rows}
  report("sampler", ["model", "batch", "mode", "rljax_tok_s", "hf_tok_s", "ratio",
                     "rljax_decode_tok_s", "hf_decode_tok_s", "decode_ratio"], rows, meta)
  print()
  for r in topk_rows:
    print(f"{r['model']:<30} batch {r['batch']:>3}  record_topk={r['record_topk']:<4} "
          f"{r['rljax_tok_s']:9.1f} tok/s  (+{r['overhead_pct']:.1f}% time)")


if __name__ == "__main__":
  main()
