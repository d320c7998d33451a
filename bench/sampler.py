"""Generation throughput: this rljax vs an older rljax vs transformers `generate`.

    python bench/sampler.py [--prompts 4] [--groups 8] [--prompt 64] [--new 64]
                            [--baseline main] [--model smollm2|tiny] [--rounds 5] [--split]

The issue's case: SmolLM2-135M float32, 4 prompts x G = 8 samples = 32 rows, random
prompts of 64 tokens, 64 new tokens (no early stop), temperature 1 (no truncation; or
--top-k / --top-p). Three worker processes alternate call by call (bench/interleave.py)
and the table reports median new tokens/s and ratios:
  rljax        this checkout (`rljax.rollout.generate`, jitted, after a warm-up call);
  rljax@BASE   the same call on the rljax tree of git rev BASE (default: the merge base
               with main, i.e. "today's rljax"), unpacked with `git archive`;
  hf           transformers `generate(num_return_sequences=G, do_sample=True)` on the
               same GGUF weights (PyTorch float32, KV cache).
--split also times max_new_tokens=1 (prefill + first token) for each, to split the time
into prefill and decode. Writes bench/results/sampler.json.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench import interleave as il  # noqa: E402
from bench.common import report  # noqa: E402


def _prompts(a, vocab):
  import numpy as np
  ids = np.random.RandomState(0).randint(3, vocab, (a.prompts, a.prompt)).astype(np.int32)
  return ids, np.ones_like(ids)


def _tiny_dir():
  import tempfile
  from tests.models.hf_fixtures import make_hf_model
  d = tempfile.mkdtemp(prefix="bench_tiny_")
  make_hf_model("qwen3_qk_norm", d, hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                num_attention_heads=8, num_key_value_heads=4, head_dim=32, vocab_size=8192,
                max_position_embeddings=512)
  return d


def _model_path(a):
  if a.model == "tiny":
    return a.tiny_dir
  from rljax.models.bundled import smollm2_path
  return smollm2_path()


def worker_rljax(a):
  import jax
  from rljax.models import load_model
  from rljax.rollout import SamplerConfig, generate
  model = load_model(_model_path(a))
  ids, mask = _prompts(a, model.cfg.vocab_size)
  cfg = SamplerConfig(max_new_tokens=a.new, temperature=a.temperature, top_k=a.top_k,
                      top_p=a.top_p, num_generations=a.groups, stop_token_ids=())
  seed = [0]

  def run():
    seed[0] += 1
    r = generate(model, ids, mask, jax.random.key(seed[0]), cfg)
    jax.block_until_ready(r)
    assert r.tokens_BxN.shape == (a.prompts * a.groups, a.new)

  il.serve(run)


def worker_hf(a):
  import torch
  import transformers
  path = _model_path(a)
  if a.model == "tiny":
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
  else:
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.dirname(path), gguf_file=os.path.basename(path), dtype=torch.float32).eval()
  ids, mask = _prompts(a, hf.config.vocab_size)
  gen = transformers.GenerationConfig(
      max_new_tokens=a.new, min_new_tokens=a.new, do_sample=True, temperature=a.temperature,
      top_k=a.top_k, top_p=a.top_p, num_return_sequences=a.groups, eos_token_id=None,
      pad_token_id=0)
  t_ids, t_mask = torch.tensor(ids, dtype=torch.long), torch.tensor(mask, dtype=torch.long)

  def run():
    with torch.inference_mode():
      out = hf.generate(input_ids=t_ids, attention_mask=t_mask, generation_config=gen)
    assert out.shape == (a.prompts * a.groups, a.prompt + a.new)

  il.serve(run)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--model", choices=("smollm2", "tiny"), default="smollm2")
  ap.add_argument("--prompts", type=int, default=4)
  ap.add_argument("--groups", type=int, default=8)
  ap.add_argument("--prompt", type=int, default=64)
  ap.add_argument("--new", type=int, default=64)
  ap.add_argument("--temperature", type=float, default=1.0)
  ap.add_argument("--top-k", type=int, default=0)
  ap.add_argument("--top-p", type=float, default=1.0)
  ap.add_argument("--rounds", type=int, default=5)
  ap.add_argument("--baseline", default="main", help="git rev; its merge base with HEAD is used")
  ap.add_argument("--split", action="store_true", help="also time max_new_tokens=1")
  ap.add_argument("--hf", action=argparse.BooleanOptionalAction, default=True)
  ap.add_argument("--worker", choices=("rljax", "hf"))
  ap.add_argument("--src", default=il.ROOT)
  ap.add_argument("--tiny-dir", default="")
  a = ap.parse_args()
  if a.worker:
    sys.path.insert(0, a.src)
    return worker_rljax(a) if a.worker == "rljax" else worker_hf(a)

  if a.model == "tiny":
    a.tiny_dir = _tiny_dir()
  base = il.resolve_rev(subprocess.run(["git", "-C", il.ROOT, "merge-base", "HEAD", a.baseline],
                                       check=True, capture_output=True, text=True).stdout.strip())
  base_src = il.baseline_tree(base)
  common = [os.path.abspath(__file__)] + [f"--{k}={v}" for k, v in (
      ("model", a.model), ("prompts", a.prompts), ("groups", a.groups), ("prompt", a.prompt),
      ("temperature", a.temperature), ("top-k", a.top_k), ("top-p", a.top_p),
      ("tiny-dir", a.tiny_dir))]
  news = [a.new, 1] if a.split else [a.new]
  workers = []
  for n in news:
    sfx = "" if n == a.new else " n=1"
    workers += [il.Worker("rljax" + sfx, common + [f"--new={n}", "--worker=rljax"]),
                il.Worker(f"rljax@{base}" + sfx,
                          common + [f"--new={n}", "--worker=rljax", f"--src={base_src}"])]
    if a.hf:
      workers.append(il.Worker("hf" + sfx, common + [f"--new={n}", "--worker=hf"]))
  load_before = il.load()
  try:
    times = il.interleaved(workers, a.rounds)
  finally:
    for w in workers:
      w.close()
  med = {k: il.median(v) for k, v in times.items()}
  rows_n, new_tok = a.prompts * a.groups, a.prompts * a.groups * a.new
  rows = []
  for name in ("rljax", f"rljax@{base}") + (("hf",) if a.hf else ()):
    r = {"impl": name, "time_s": med[name], "new_tok_s": new_tok / med[name],
         "speedup_vs_hf": med["hf"] / med[name] if a.hf else None,
         "speedup_vs_base": med[f"rljax@{base}"] / med[name]}
    if a.split:
      pre = med[name + " n=1"]
      r.update(prefill_s=pre, decode_ms_per_step=1e3 * (med[name] - pre) / (a.new - 1))
    rows.append(r)
  report("sampler", ["impl", "time_s", "new_tok_s", "speedup_vs_hf", "speedup_vs_base",
                     "prefill_s", "decode_ms_per_step"], rows,
         {"model": a.model, "rows": rows_n, "prompts": a.prompts, "groups": a.groups,
          "prompt_len": a.prompt, "new_tokens": a.new, "temperature": a.temperature,
          "top_k": a.top_k, "top_p": a.top_p, "baseline_rev": base, "rounds": a.rounds,
          "times_s": times, "loadavg_before": load_before, "loadavg_after": il.load(),
          "targets": {"speedup_vs_hf": 3.0, "speedup_vs_base": 2.0}})


if __name__ == "__main__":
  main()
