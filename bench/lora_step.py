"""LoRA / QLoRA against full fine-tuning: the rljax GRPO step's time, memory and optimizer state.

    python bench/lora_step.py [--batch 8] [--prompt 64] [--response 192] [--rank 16]
                              [--rounds 3] [--tiny]

SmolLM2-135M (or with --tiny a random 4-layer model) on a random batch of the trainer's
layout, the fused μ = 1 GRPO step (`rljax.update.jit_update`, AdamW) of: full fine-tuning,
LoRA of rank `--rank` on all seven projections (alpha 32) over the frozen float base, and
QLoRA over an int8 base. Each runs in its own worker process, alternating call by call with
the others (bench/interleave.py; medians of --rounds); the ratio `speedup` = full time / this
time comes from that one interleaved run. Memory is XLA's memory_analysis of the compiled
step (peak = arguments + outputs + temp - aliased: the state is donated); `opt_state_mb` the
AdamW moments; `base_mb` the frozen weights the step reads. Writes bench/results/lora_step.json,
and first (from shapes alone) the at-rest size of the float32 and QLoRA int8 / int4 bases of
SmolLM2-135M and Qwen3-14B (bench/results/lora_base_sizes.json).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from flax import nnx  # noqa: E402

from bench.common import report  # noqa: E402
from bench.train_step import _tiny_dir, make_batch, variant_model  # noqa: E402

KINDS = ("full", "lora", "qlora8")


def step_of(kind: str, model, batch, n: int, rank: int):
  """(run, info) of the `kind` step on `batch`."""
  from rljax.models import params_dict
  from rljax.models.lora import LoraConfig, init_adapters, nbytes
  from rljax.objectives import build_objective
  from rljax.train_step import StepConfig, init_state, make_optimizer
  from rljax.update import jit_update
  from rljax.loop.build import lora_base
  obj = build_objective(advantage="grpo", transforms=(), loss="grpo", num_generations=4)
  opt = make_optimizer(1e-6)
  params = params_dict(model)
  graphdef = nnx.split(model)[0]
  if kind == "full":
    trained, base, lora = params, None, False
  else:
    cfg = LoraConfig(rank=rank, alpha=32.0, base_bits=8 if kind == "qlora8" else 0)
    base, graphdef = lora_base(model, params, cfg, mesh=None)
    trained, lora = init_adapters(model.cfg, cfg), True
  sc = StepConfig(objective=obj, response_len=n, chunk_size=256, lora=lora)
  step = jit_update(graphdef, opt, sc)
  state = [init_state(trained, opt, obj)]
  key = jax.random.key(0)
  compiled = step.lower(state[0], batch, base, key).compile()
  mem = compiled.memory_analysis()
  info = {"temp_mb": mem.temp_size_in_bytes / 1e6,
          "peak_mb": (mem.argument_size_in_bytes + mem.output_size_in_bytes
                      + mem.temp_size_in_bytes - mem.alias_size_in_bytes) / 1e6,
          "trained_mb": nbytes(trained) / 1e6, "opt_state_mb": nbytes(state[0].opt_state) / 1e6,
          "base_mb": 0.0 if base is None else nbytes(base) / 1e6,
          "trained_params": int(sum(x.size for x in jax.tree.leaves(trained)))}

  extra = () if sc.fused_scoring else (key,)  # the fused step's program takes no key

  def run():
    state[0], m = compiled(state[0], batch, base, *extra)
    jax.block_until_ready(m)

  return run, info


def base_sizes(rank: int) -> list[dict]:
  """At-rest bytes of the frozen base, float32 and QLoRA int8 / int4 (shapes only), and the
  adapters' size, for SmolLM2-135M and the pod configs' Qwen3-14B."""
  from rljax.models import load_hf_config
  from rljax.models.bundled import smollm2_path
  from rljax.models.decoder import Decoder
  from rljax.models.lora import LoraConfig, adapter_shapes, nbytes
  from rljax.models.checkpoint import open_checkpoint
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  cfgs = {"SmolLM2-135M": open_checkpoint(smollm2_path())[0],
          "Qwen3-14B": load_hf_config(os.path.join(root, "configs", "models", "qwen3_14b"))}
  rows = []
  for name, mcfg in cfgs.items():
    sizes = {}
    for bits in (0, 8, 4):
      lora = LoraConfig(rank=rank, alpha=32.0, base_bits=bits)
      state = nnx.state(nnx.eval_shape(lambda: Decoder(mcfg, nnx.Rngs(0), lora=lora)))
      pure = nnx.to_pure_dict(state)
      proj = {k: v for k, v in pure["layers"].items() if k.startswith("w")}
      sizes[bits] = (nbytes(pure), nbytes(proj))
    full, proj = sizes[0]
    rows.append({"model": name, "base_f32_mb": full / 1e6,
                 "int8_vs_f32": sizes[8][0] / full, "int4_vs_f32": sizes[4][0] / full,
                 "proj_int8_vs_f32": sizes[8][1] / proj, "proj_int4_vs_f32": sizes[4][1] / proj,
                 "adapter_params": int(sum(x.size for x in jax.tree.leaves(
                     adapter_shapes(mcfg, LoraConfig(rank=rank))))),
                 "params": int(sum(x.size for x in jax.tree.leaves(
                     nnx.to_pure_dict(nnx.state(nnx.eval_shape(
                         lambda: Decoder(mcfg, nnx.Rngs(0))))))))})
  return rows


def worker(a):
  from bench import interleave as il
  from rljax.models.bundled import smollm2_path
  model = variant_model(a.tiny_dir or smollm2_path(), "none", "dense")
  batch = make_batch(a.batch, a.prompt, a.response, model.cfg.vocab_size)
  batch = {k: jnp.asarray(v) for k, v in batch.items()}
  run, info = step_of(a.worker, model, batch, a.response, a.rank)
  il.serve(run, lambda: info)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--batch", type=int, default=8)
  ap.add_argument("--prompt", type=int, default=64)
  ap.add_argument("--response", type=int, default=192)
  ap.add_argument("--rank", type=int, default=16)
  ap.add_argument("--rounds", type=int, default=3)
  ap.add_argument("--tiny", action="store_true", help="a random 4-layer model (seconds)")
  ap.add_argument("--kinds", default=",".join(KINDS))
  ap.add_argument("--sizes-only", action="store_true", help="the base-size table only")
  ap.add_argument("--worker", choices=KINDS)
  ap.add_argument("--tiny-dir", default="")
  a = ap.parse_args()
  if a.worker:
    return worker(a)
  from bench import interleave as il
  report("lora_base_sizes", ["model", "params", "adapter_params", "base_f32_mb", "int8_vs_f32",
                             "int4_vs_f32", "proj_int8_vs_f32", "proj_int4_vs_f32"],
         base_sizes(a.rank), {"rank": a.rank, "note": "at-rest bytes from shapes: the whole "
                              "base (embeddings, norms, LM head stay float32) and its seven "
                              "projections alone (int8 / packed int4 + a float32 scale per "
                              "output channel)"})
  if a.sizes_only:
    return
  tiny_dir = _tiny_dir() if a.tiny else ""
  common = [os.path.abspath(__file__), f"--tiny-dir={tiny_dir}"] + [
      f"--{k}={getattr(a, k)}" for k in ("batch", "prompt", "response", "rank")]
  kinds = a.kinds.split(",")
  workers = [il.Worker(k, common + [f"--worker={k}"]) for k in kinds]
  try:
    infos = {w.name: json.loads(w.ask("info")) for w in workers}
    times = il.interleaved(workers, a.rounds)
  finally:
    for w in workers:
      w.close()
  ref = statistics.median(times[kinds[0]])
  rows = []
  for k in kinds:
    t = statistics.median(times[k])
    rows.append({"step": k, "time_s": t, "speedup": ref / t, **infos[k],
                 "peak_vs_full": infos[k]["peak_mb"] / infos[kinds[0]]["peak_mb"],
                 "times_s": times[k]})
  report("lora_step", ["step", "time_s", "speedup", "peak_mb", "peak_vs_full", "temp_mb",
                       "opt_state_mb", "trained_mb", "base_mb", "trained_params"], rows,
         {"model": "tiny-qwen3 (4L, d256, V8192)" if a.tiny else "SmolLM2-135M",
          "batch": a.batch, "prompt": a.prompt, "response": a.response, "rank": a.rank,
          "alpha": 32.0, "rounds": a.rounds, "loadavg": [round(x, 2) for x in os.getloadavg()],
          "note": "GRPO fused step (μ = 1), float32, AdamW; each kind in its own worker, "
                  "alternating call by call; speedup = full median / this median"})


if __name__ == "__main__":
  main()
