"""Splash vs dense attention in the TPU train step, compiled without TPU hardware.

    python bench/tpu_attention_aot.py [--topology v5e:2x2] [--layers 9] [--seq 1024,2048,4096]
                                      [--remat full] [--decode]

For each total sequence length T (prompt 256 + response T - 256, one row per chip) and each
`model.attention` (dense, splash), compiles the trainer's real GRPO train step
(`rljax.aot.compile_run`, sampler off) for the TPU topology with the `libtpu` wheel, on a
Qwen3-4B-shaped model (configs/models/qwen3_4b: hidden 2560, 32 q / 8 kv heads, head dim
128, vocabulary 151,936) cut to `--layers` layers so that its state fits the slice
(36 layers of float32 params + AdamW are 12 GiB per v5e chip before activations). Reports
XLA's per-chip memory analysis (for a program that does not fit, the temporaries XLA's
out-of-memory message names) and how many Pallas kernels (`tpu_custom_call`) the compiled
program holds; --decode adds the sampler's decode step (bfloat16 cache: the paged kernel). Float32 master params, bfloat16 matmuls, remat as --remat (the pod
configs' setting is "full"). Writes bench/results/tpu_attention_aot_<remat>.json.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the host only compiles
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.common import report  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_config(seq: int, batch: int, remat: str, attention: str, decode: bool):
  """configs/grpo.py at one sequence length (one fused update per step)."""
  from configs import grpo
  c = grpo.get_config("tiny")
  c.model.tiny = False
  c.model.path = os.path.join(ROOT, "configs/models/qwen3_4b")
  c.model.param_dtype, c.model.dtype = "float32", "bfloat16"
  c.model.remat, c.model.attention = remat, attention
  c.mesh.shape = (1, -1, 1)
  prompt = 256
  c.data.batch_size, c.data.max_prompt_len = batch, prompt
  c.rollout.num_generations = batch
  c.rollout.max_new_tokens = seq - prompt if not decode else 64
  c.train.grad_accum, c.train.inner_epochs, c.train.num_minibatches = 1, 1, 1
  c.train.logprob_chunk = 512
  return c


def oom_temps(error):
  """GiB of temporaries XLA reports in a CompileTimeHbmOom message, or None."""
  import re
  hit = re.search(r"HLO temporaries \(([\d.]+)G\)", error or "")
  return float(hit.group(1)) if hit else None


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--topology", default="v5e:2x2")
  ap.add_argument("--layers", type=int, default=9)
  ap.add_argument("--seq", default="1024,2048,4096")
  ap.add_argument("--remat", default="full", choices=["full", "none"])
  ap.add_argument("--decode", action="store_true",
                  help="also compile the sampler (prompt 960 + 64 new tokens) per attention")
  args = ap.parse_args(argv)
  from rljax.aot import compile_run, model_config, topology_devices
  chips = len(topology_devices(args.topology))
  remat = args.remat == "full"
  rows = []
  gib = lambda x: None if x is None else round(x / 2**30, 3)
  for seq in [int(s) for s in args.seq.split(",")]:
    for attention in ("dense", "splash"):
      cfg = run_config(seq, chips, remat, attention, decode=False)
      mcfg = model_config(cfg).replace(num_layers=args.layers)
      t0 = time.time()
      rep = compile_run(cfg, args.topology, model_cfg=mcfg, sampler=False)
      m = rep["programs"].get("train_step", {})
      rows.append({"program": "train_step", "T": seq, "attention": attention,
                   "temp_GiB": gib(m.get("temps")) or oom_temps(rep.get("error")), "peak_GiB": gib(rep["peak_hbm_per_chip"]),
                   "args_GiB": gib(m.get("arguments")), "kernels": m.get("tpu_custom_calls"),
                   "fits": rep["fits"], "compile_s": round(time.time() - t0, 1),
                   "error": rep.get("error")})
      print(rows[-1], flush=True)
  if args.decode:
    for attention in ("dense", "splash"):
      cfg = run_config(1024, chips, remat, attention, decode=True)
      cfg.data.max_prompt_len = 960  # 960 prompt slots + 64 new tokens = 1024 cache slots
      mcfg = model_config(cfg).replace(num_layers=args.layers)
      t0 = time.time()
      rep = compile_run(cfg, args.topology, model_cfg=mcfg)
      m = rep["programs"].get("decode", {})
      rows.append({"program": "decode", "T": 1024, "attention": attention,
                   "temp_GiB": gib(m.get("temps")), "peak_GiB": gib(m.get("total")),
                   "args_GiB": gib(m.get("arguments")), "kernels": m.get("tpu_custom_calls"),
                   "fits": rep["fits"], "compile_s": round(time.time() - t0, 1),
                   "error": rep.get("error")})
      print(rows[-1], flush=True)
  for r in rows:  # splash temp relative to dense at the same program and T
    base = next((x for x in rows if x["program"] == r["program"] and x["T"] == r["T"]
                 and x["attention"] == "dense"), None)
    if base and base["temp_GiB"] and r["temp_GiB"] is not None:
      r["temp_vs_dense"] = round(r["temp_GiB"] / base["temp_GiB"], 3)
  report(f"tpu_attention_aot_{args.remat}",
         ["program", "T", "attention", "temp_GiB", "temp_vs_dense", "peak_GiB", "args_GiB",
          "kernels", "fits", "compile_s"], rows,
         meta={"topology": args.topology, "chips": chips, "layers": args.layers,
               "remat": args.remat, "model": "qwen3_4b shapes", "rows_per_chip": 1})


if __name__ == "__main__":
  main()
