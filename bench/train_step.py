"""Training-step throughput and memory: rljax GRPO / CoRT steps vs a PyTorch reference.

    python bench/train_step.py [--batch 8] [--prompt 64] [--response 192] [--smollm2]
                               [--no-tiny] [--variants none/dense,dots/blockwise]
                               [--rounds 3]

Rows: the rljax GRPO step for each `remat/attention` variant (Decoder remat policy:
none | dots | full; ModelConfig.attention: dense | blockwise), the rljax CoRT step
(trainer + rubric-free replay in one jit) for the last variant, and a PyTorch reference
step (transformers model, the same GRPO loss on the completion logits only,
torch.optim.AdamW) on the same weights and batch. Each implementation runs in its own
worker process (bench/interleave.py); the rljax steps run one at a time, each alternating
call by call with the same PyTorch worker (medians of --rounds; the machine is shared, and
one process holding every compiled step ran out of memory headroom); memory is XLA's
memory_analysis of the compiled step (temp = activations and scratch; peak = arguments +
outputs + temp - aliased, the state being donated). Also: model FLOP utilization against
this machine's float32 matmul peak, CoRT/GRPO time, rljax/torch speed, and each variant's
time and temp memory relative to the first. Writes bench/results/train_step.json.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

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
  """A random batch of the trainer's layout (`rljax.loop.TrainBatch`): b rows of p prompt + n
  response tokens, the CoRT replay row x⁻ = the last half of x⁺ + the same response."""
  from rljax.loop import TrainBatch
  rng = np.random.RandomState(seed)
  toks = rng.randint(0, vocab, (b, p + n)).astype(np.int32)
  mask = np.ones((b, p + n), np.int32)
  return TrainBatch(tokens_BxL=toks, attn_mask_BxL=mask, mask_BxN=np.ones((b, n), np.float32),
                    adv_B=rng.randn(b).astype(np.float32),
                    sampler_logp_BxN=np.full((b, n), -2.0, np.float32),
                    minus_tokens_BxM=toks[:, p // 2:].copy(),
                    minus_attn_mask_BxM=mask[:, p // 2:]).arrays()


def rljax_step(model, batch, n, transforms, g):
  from rljax.models import params_dict
  from rljax.objectives import build_objective
  from rljax.train_step import StepConfig, init_state, make_optimizer
  from rljax.update import jit_update
  obj = build_objective(advantage="grpo", transforms=transforms, loss="grpo",
                        num_generations=g)
  graphdef, _ = nnx.split(model)
  opt = make_optimizer(1e-6)
  sc = StepConfig(objective=obj, response_len=n, replay=bool(transforms), chunk_size=256)
  step = jit_update(graphdef, opt, sc)  # what the trainer runs (μ = 1: the fused step)
  state = [init_state(jax.tree.map(jnp.copy, params_dict(model)), opt, obj)]
  key = jax.random.key(0)
  compiled = step.lower(state[0], batch, None, key).compile()
  mem = compiled.memory_analysis()
  info = {"flops": compiled.cost_analysis()["flops"], "temp_gb": mem.temp_size_in_bytes / 1e9,
          "peak_gb": (mem.argument_size_in_bytes + mem.output_size_in_bytes
                      + mem.temp_size_in_bytes - mem.alias_size_in_bytes) / 1e9}

  extra = () if sc.fused_scoring else (key,)  # the fused step's program takes no key

  def run():
    state[0], m = compiled(state[0], batch, None, *extra)
    jax.block_until_ready(m)

  return run, info


def variant_model(path_or_dir, remat, attention):
  """The model as the trainer runs it on CPU (layers unrolled where `layer_unroll` allows).
  `attention` is an implementation name, or `dense:C` for dense attention with the queries in
  causal blocks of C (`ModelConfig.causal_block`; 0: one block)."""
  from rljax.models import load_model
  attention, _, block = attention.partition(":")
  model = load_model(path_or_dir, remat=remat, attention=attention,
                     **({"causal_block": int(block)} if block else {}))
  model.scan_unroll = model.cfg.num_layers
  return model


def torch_step(hf, batch, n):
  import torch
  opt = torch.optim.AdamW(hf.parameters(), lr=1e-6, weight_decay=0.0)
  toks = torch.tensor(batch["tokens_BxL"], dtype=torch.long)
  mask = torch.tensor(batch["attn_mask_BxL"], dtype=torch.long)
  rmask = torch.tensor(batch["mask_BxN"])
  adv = torch.tensor(batch["adv_B"])[:, None]

  def run():
    # logits of the n positions that predict the response only (logits_to_keep)
    logits = hf(input_ids=toks, attention_mask=mask, logits_to_keep=n + 1).logits[:, :-1].float()
    logp = torch.log_softmax(logits, -1).gather(-1, toks[:, -n:, None])[..., 0]
    ratio = torch.exp(logp - logp.detach())
    obj = torch.minimum(ratio * adv, torch.clamp(ratio, 0.8, 1.2) * adv)
    loss = -((obj * rmask).sum(1) / rmask.sum(1)).mean()  # seq-mean-token-mean
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(hf.parameters(), 1.0)
    opt.step()

  return run


def _model_path(a):
  if a.model == "smollm2":
    from rljax.models.bundled import smollm2_path
    return smollm2_path()
  return a.tiny_dir


def _tiny_dir():
  from tests.models.hf_fixtures import make_hf_model
  d = tempfile.mkdtemp(prefix="bench_tiny_")
  make_hf_model("qwen3_qk_norm", d, hidden_size=256, intermediate_size=768,
                num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4,
                head_dim=32, vocab_size=8192)
  return d


def worker(a):
  """One implementation in this process (bench/interleave.py protocol)."""
  from bench import interleave as il
  path = _model_path(a)
  if a.worker == "torch":
    import torch
    import transformers
    if a.model == "smollm2":
      hf = transformers.AutoModelForCausalLM.from_pretrained(
          os.path.dirname(path), gguf_file=os.path.basename(path), dtype=torch.float32)
    else:
      hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    batch = make_batch(a.batch, a.prompt, a.response, hf.config.vocab_size)
    return il.serve(torch_step(hf.train(), batch, a.response),
                    lambda: {"torch_threads": torch.get_num_threads()})
  model = variant_model(path, a.remat, a.attention)
  batch = make_batch(a.batch, a.prompt, a.response, model.cfg.vocab_size)
  run, info = rljax_step(model, batch, a.response, ("cort_no_ramp",) if a.worker == "cort" else (),
                         g=4)
  il.serve(run, lambda: info)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--batch", type=int, default=8)
  ap.add_argument("--prompt", type=int, default=64)
  ap.add_argument("--response", type=int, default=192)
  ap.add_argument("--rounds", type=int, default=3)
  ap.add_argument("--variants", default="none/dense,dots/blockwise",
                  help="comma-separated remat/attention pairs (attention dense:C: causal blocks of "
                       "C queries); the first is the reference")
  ap.add_argument("--smollm2", action="store_true", help="SmolLM2-135M (slow on CPU)")
  ap.add_argument("--tiny", action=argparse.BooleanOptionalAction, default=True)
  ap.add_argument("--cort", action=argparse.BooleanOptionalAction, default=True)
  ap.add_argument("--memory-only", action="store_true", help="compile and report memory only")
  ap.add_argument("--worker", choices=("grpo", "cort", "torch"))
  ap.add_argument("--model", default="tiny")
  ap.add_argument("--tiny-dir", default="")
  ap.add_argument("--remat", default="none")
  ap.add_argument("--attention", default="dense")
  a = ap.parse_args()
  if a.worker:
    return worker(a)
  from bench import interleave as il

  peak = None if a.memory_only else matmul_peak()
  variants = [tuple(v.split("/")) for v in a.variants.split(",")]
  models = (["tiny"] if a.tiny else []) + (["smollm2"] if a.smollm2 else [])
  names = {"tiny": "tiny-qwen3 (4L, d256, V8192)", "smollm2": "SmolLM2-135M"}
  rows = []
  for model in models:
    tiny_dir = _tiny_dir() if model == "tiny" else ""
    common = [os.path.abspath(__file__), f"--model={model}", f"--tiny-dir={tiny_dir}"] + [
        f"--{k}={getattr(a, k)}" for k in ("batch", "prompt", "response")]
    steps = [("grpo", r, at) for r, at in variants] + (
        [("cort",) + variants[-1]] if a.cort else [])
    torch_w = None if a.memory_only else il.Worker("torch", common + ["--worker=torch"])
    res = {}
    # one rljax worker at a time (each holds a compiled step and its buffers), alternating
    # call by call with the same PyTorch worker: every ratio comes from one interleaved run
    for kind, remat, attn in steps:
      key = f"{kind.upper()} {remat}/{attn}"
      w = il.Worker(key, common + [f"--worker={kind}", f"--remat={remat}",
                                   f"--attention={attn}"])
      try:
        info = json.loads(w.ask("info"))
        times = {} if a.memory_only else il.interleaved([w, torch_w], a.rounds)
      finally:
        w.close()
      res[key] = (info, times)
    if torch_w:
      torch_w.close()
    ref = f"GRPO {variants[0][0]}/{variants[0][1]}"
    tokens = a.batch * (a.prompt + a.response)
    for key, (info, times) in res.items():
      row = {"model": names[model], "step": key, "temp_gb": info["temp_gb"],
             "peak_gb": info["peak_gb"], "temp_vs_ref": info["temp_gb"] / res[ref][0]["temp_gb"],
             "peak_vs_ref": info["peak_gb"] / res[ref][0]["peak_gb"]}
      if times:
        t, tt = statistics.median(times[key]), statistics.median(times["torch"])
        rt, rtt = statistics.median(res[ref][1][ref]), statistics.median(res[ref][1]["torch"])
        row.update(time_s=t, torch_s=tt, tok_s=tokens / t, mfu=info["flops"] / t / peak,
                   vs_torch=tt / t, time_vs_ref=(t / tt) / (rt / rtt), times_s=times)
      rows.append(row)
    if a.cort and not a.memory_only:
      last = f"{variants[-1][0]}/{variants[-1][1]}"
      c, g = res[f"CORT {last}"], res[f"GRPO {last}"]
      ratio = ((statistics.median(c[1][f"CORT {last}"]) / statistics.median(c[1]["torch"]))
               / (statistics.median(g[1][f"GRPO {last}"]) / statistics.median(g[1]["torch"])))
      rows.append({"model": names[model], "step": "CoRT/GRPO time", "time_s": ratio})
  report("train_step_memory" if a.memory_only else "train_step",
         ["model", "step", "time_s", "torch_s", "tok_s", "mfu", "vs_torch", "time_vs_ref",
          "temp_gb", "peak_gb", "temp_vs_ref", "peak_vs_ref"], rows,
         {"matmul_peak_gflops": peak and peak / 1e9, "batch": a.batch, "prompt": a.prompt,
          "response": a.response, "rounds": a.rounds,
          "loadavg": [round(x, 2) for x in os.getloadavg()],
          "note": "each rljax step runs in its own worker process, alternating call by call "
                  "with one PyTorch worker: vs_torch = torch median / rljax median of that "
                  "pair; time_vs_ref and CoRT/GRPO are ratios of those per-pair ratios; "
                  "mfu = XLA cost-analysis FLOPs of the step / time / the 2048^3 matmul peak"})


if __name__ == "__main__":
  main()
