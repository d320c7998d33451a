"""The GPU check: rljax on one NVIDIA GPU in a single call of at most 8 minutes.

    python bench/device/run.py --out DIR              # on the GPU (JAX with the CUDA plugin)
    python bench/device/run.py --dry-run --out DIR    # on CPU, tiny shapes: tests/test_device_bench.py

Sections, in order; each is recorded in DIR/device.json as soon as it ends (an error is
recorded and the next section runs), so a call stopped at its time limit keeps what ran:

- env:      versions (JAX, jaxlib, flax, optax, orbax), the device, cuDNN.
- parity:   `jax.nn.dot_product_attention` as rljax calls it (attention="cudnn") against the
            dense float32 reference, bfloat16 inputs with left / right padding: output and
            q / k / v gradients; whether the compiled program holds cuDNN's fused attention;
            the decoder's hidden states with attention "cudnn" vs "dense" in bfloat16.
- matmul:   a 8192³ bfloat16 matmul: the chip's achievable rate, beside its datasheet peak.
- step:     the fused GRPO step (μ = 1; float32 master weights and AdamW, bfloat16
            matmuls, float32 softmax / norms / log-probs; remat none) on random weights of
            SmolLM2-135M's and Qwen2.5-0.5B's shapes: seconds, tokens/s, and MFU = the
            step's analytic FLOPs (`rljax.aot.step_flops`) / time / the datasheet peak.
- sampler:  `rljax.rollout.generate` (prefill with cuDNN attention, XLA decode, G = 8, no
            early stop) at batch 64 and 256: new tokens/s.
- main_job: `configs/cort_grpo.py:cpu,gpu` (the README's main job in bfloat16 with cuDNN
            attention) for 3 steps on a random SmolLM2-shaped model with SmolLM2's
            tokenizer (`--tokenizer`; the GGUF's weights do not fit in a device call):
            seconds per step and per stage from its metrics.jsonl. Learning is not measured.
            (The dry run runs `:tiny` as the tests do, in float32.)

Then DIR/device_table.md: the table for bench/README.md.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# bfloat16 dense datasheet peaks, FLOP/s, by device_kind prefix (MFU's denominator)
PEAKS = {"NVIDIA H200": 989e12, "NVIDIA H100": 989e12, "NVIDIA A100": 312e12}

SHAPES = {  # random weights, the real models' shapes
    "smollm2_135m": dict(model_type="llama", vocab_size=49152, hidden_size=576,
                         intermediate_size=1536, num_layers=30, num_heads=9, num_kv_heads=3,
                         head_dim=64, rope_theta=100000.0, tie_embeddings=True),
    "qwen2.5_0.5b": dict(model_type="qwen2", vocab_size=151936, hidden_size=896,
                         intermediate_size=4864, num_layers=24, num_heads=14, num_kv_heads=2,
                         head_dim=64, rope_theta=1e6, qkv_bias=True, tie_embeddings=True),
}
TINY = dict(model_type="qwen3", vocab_size=256, hidden_size=64, intermediate_size=128,
            num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16, qk_norm=True,
            tie_embeddings=True)


def _median_time(fn, repeats: int) -> tuple[float, list[float]]:
  fn()  # compile / warm up
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t0)
  return statistics.median(times), times


def section_env(args):
  import flax
  import jax
  import optax
  import orbax.checkpoint as ocp
  d = jax.devices()[0]
  out = {"jax": jax.__version__, "jaxlib": jax.lib.__version__, "flax": flax.__version__,
         "optax": optax.__version__, "orbax": getattr(ocp, "__version__", "?"),
         "python": sys.version.split()[0], "backend": jax.default_backend(),
         "device_kind": d.device_kind, "num_devices": jax.device_count()}
  try:
    from jax._src.lib import cuda_versions
    out["cudnn"] = cuda_versions.cudnn_get_version() if cuda_versions else None
  except Exception as e:  # noqa: BLE001 - informational only
    out["cudnn"] = f"unknown ({type(e).__name__})"
  from rljax.models import backend
  out["platform"] = backend.platform()
  return out


def section_parity(args):
  """bfloat16 cuDNN (on GPU) / XLA (dry run) attention vs the float32 dense reference."""
  import functools
  import jax
  import jax.numpy as jnp
  import numpy as np
  from flax import nnx
  from rljax.models import backend, create_model, positions_from_mask
  from rljax.models.attention import attention, sdpa_attention
  from rljax.models.config import ModelConfig
  b, t, h, kh, e = (2, 32, 4, 2, 16) if args.dry_run else (4, 512, 9, 3, 64)
  ks = jax.random.split(jax.random.key(0), 4)
  q, k, v = (jax.random.normal(ks[i], (b, t, n, e)) for i, n in ((0, h), (1, kh), (2, kh)))
  pos = jnp.arange(t)[None]
  mask = (pos >= jnp.array([0, t // 3] + [0] * (b - 2))[:, None]) & (
      pos < t - jnp.array([0, 0] + [t // 4] * (b - 2))[:, None])
  allowed = jnp.tril(jnp.ones((t, t), bool))[None] & mask[:, None, :]
  w = jax.random.normal(ks[3], (b, t, h, e)) * mask[:, :, None, None]
  impl = backend.sdpa_implementation()
  bf = lambda x: x.astype(jnp.bfloat16)
  sdpa = functools.partial(sdpa_attention, causal=True, implementation=impl)
  fn = jax.jit(lambda q, k, v: jax.vjp(lambda *a: sdpa(*a, allowed), q, k, v))
  hlo = jax.jit(lambda q, k, v: sdpa(q, k, v, allowed)).lower(bf(q), bf(k), bf(v)).compile()
  o, vjp = fn(bf(q), bf(k), bf(v))
  g = vjp(bf(w))
  o_ref, vjp_ref = jax.vjp(lambda *a: attention(*a, allowed), q, k, v)
  g_ref = vjp_ref(w)
  real = np.asarray(mask)[:, :, None, None]
  f32 = lambda x: np.asarray(x, np.float32)
  out = {"implementation": impl, "cudnn_kernel_in_program": "cudnn" in hlo.as_text().lower(),
         "out_max_abs_err": float(np.abs(np.where(real, f32(o) - f32(o_ref), 0)).max()),
         "out_finite": bool(np.isfinite(f32(o)).all())}
  for name, a, r in zip("qkv", g, g_ref):
    out[f"d{name}_max_abs_err"] = float(np.abs(f32(a) - f32(r)).max())
    out[f"d{name}_scale"] = float(np.abs(f32(r)).max())
  # the decoder in bfloat16: attention "auto" (cudnn on GPU) vs "dense", same weights
  shape = TINY if args.dry_run else SHAPES["smollm2_135m"]
  cfg = ModelConfig(**shape, dtype="bfloat16", attention="dense")
  ids = jax.random.randint(jax.random.key(1), (b, t), 0, cfg.vocab_size)
  m32 = mask.astype(jnp.int32)
  graphdef, state = nnx.split(create_model(cfg, seed=0))
  # "cudnn": the fused kernel on GPU, XLA's implementation of the same call in a dry run
  auto = nnx.graphdef(nnx.eval_shape(lambda: create_model(cfg.replace(attention="cudnn"))))

  def hidden(gd, st):
    hs, _ = nnx.merge(gd, st)(ids, positions_from_mask(m32), m32)
    return hs.astype(jnp.float32)

  h_dense = jax.jit(hidden, static_argnums=0)(graphdef, state)
  h_auto = jax.jit(hidden, static_argnums=0)(auto, state)
  real_t = np.asarray(mask)[:, :, None]
  diff = np.abs(np.where(real_t, np.asarray(h_auto) - np.asarray(h_dense), 0))
  out.update(auto_attention=backend.attention_impl(cfg.replace(attention="auto")),
             decoder_hidden_max_abs_diff=float(diff.max()),
             decoder_hidden_mean_abs_diff=float(diff[np.broadcast_to(real_t, diff.shape)].mean()),
             decoder_hidden_scale=float(np.abs(np.asarray(h_dense)).max()))
  # bfloat16 q / k / v (8 bits of mantissa): errors of a few 1e-2 of the outputs' O(1) scale
  out["ok"] = bool(out["out_finite"] and out["out_max_abs_err"] < 5e-2
                   and all(out[f"d{n}_max_abs_err"] < 5e-2 * max(1.0, out[f"d{n}_scale"])
                           for n in "qkv"))
  return out


def section_matmul(args):
  import jax
  import jax.numpy as jnp
  n = 512 if args.dry_run else 8192
  a = jnp.ones((n, n), jnp.bfloat16)
  f = jax.jit(lambda a: a @ a)
  t, _ = _median_time(lambda: f(a).block_until_ready(), 5)
  return {"n": n, "seconds": t, "tflops": 2 * n**3 / t / 1e12}


def _grpo_step(cfg, rows, prompt, response, seed=0):
  """The trainer's fused GRPO step (μ = 1) on random weights; (run, flops)."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  from flax import nnx
  from rljax.aot import step_flops
  from rljax.loop import TrainBatch
  from rljax.models import create_model, params_dict
  from rljax.objectives import build_objective
  from rljax.train_step import StepConfig, init_state, make_optimizer
  from rljax.update import jit_update
  model = create_model(cfg, seed=seed)
  rng = np.random.RandomState(seed)
  toks = rng.randint(0, cfg.vocab_size, (rows, prompt + response)).astype(np.int32)
  mask = np.ones((rows, prompt + response), np.int32)
  mask[: rows // 2, : prompt // 4] = 0  # left padding in half the rows
  batch = TrainBatch(tokens_BxL=toks, attn_mask_BxL=mask,
                     mask_BxN=np.ones((rows, response), np.float32),
                     adv_B=rng.randn(rows).astype(np.float32),
                     sampler_logp_BxN=np.full((rows, response), -2.0, np.float32),
                     minus_tokens_BxM=toks[:, prompt // 2:].copy(),
                     minus_attn_mask_BxM=mask[:, prompt // 2:]).arrays()
  obj = build_objective(advantage="grpo", transforms=(), loss="grpo", num_generations=8)
  graphdef, _ = nnx.split(model)
  opt = make_optimizer(1e-6)
  sc = StepConfig(objective=obj, response_len=response, replay=False, chunk_size=256)
  step = jit_update(graphdef, opt, sc)
  state = [init_state(jax.tree.map(jnp.copy, params_dict(model)), opt, obj)]
  batch = jax.device_put(batch)
  key = jax.random.key(0)
  compiled = step.lower(state[0], batch, None, key).compile()
  extra = () if sc.fused_scoring else (key,)

  def run():
    state[0], m = compiled(state[0], batch, None, *extra)
    jax.block_until_ready(m)
    return m

  flops = step_flops(cfg, rows, prompt, 0, response, "none", replay=False,
                     use_ref=False)["train_step"]
  return run, flops


def section_step(args, peak):
  from rljax.models.config import ModelConfig
  out = {}
  runs = ({"tiny": (TINY, 4, 16, 16)} if args.dry_run else
          {"smollm2_135m": (SHAPES["smollm2_135m"], 64, 128, 384),
           "qwen2.5_0.5b": (SHAPES["qwen2.5_0.5b"], 32, 128, 384)})
  for name, (shape, rows, prompt, response) in runs.items():
    cfg = ModelConfig(**shape, dtype="bfloat16", attention="auto")
    t0 = time.perf_counter()
    run, flops = _grpo_step(cfg, rows, prompt, response)
    compile_s = time.perf_counter() - t0
    m = run()
    loss = float(m["loss"]) if "loss" in m else None
    t, times = _median_time(run, 2 if args.dry_run else 5)
    tokens = rows * (prompt + response)
    out[name] = {"rows": rows, "prompt": prompt, "response": response, "tokens": tokens,
                 "compile_s": compile_s, "seconds": t, "times": times,
                 "tokens_per_s": tokens / t, "flops": flops, "tflops": flops / t / 1e12,
                 "mfu": flops / t / peak if peak else None, "loss_finite":
                 loss is None or loss == loss}
  return out


def section_sampler(args):
  import jax
  import numpy as np
  from rljax.models import create_model
  from rljax.models.config import ModelConfig
  from rljax.rollout import SamplerConfig, generate
  shape = TINY if args.dry_run else SHAPES["smollm2_135m"]
  cfg = ModelConfig(**shape, dtype="bfloat16", param_dtype="bfloat16", attention="auto")
  model = create_model(cfg, seed=0)
  prompt, new = (8, 8) if args.dry_run else (128, 256)
  out = {}
  for batch in ((16,) if args.dry_run else (64, 256)):
    g = 8
    ids = np.random.RandomState(0).randint(0, cfg.vocab_size, (batch // g, prompt))
    mask = np.ones_like(ids)
    sc = SamplerConfig(max_new_tokens=new, num_generations=g, stop_token_ids=())
    keys = iter(range(100))

    def run():
      r = generate(model, ids, mask, next(keys), sc)
      jax.block_until_ready(r.tokens_BxN)
      return r

    t, times = _median_time(run, 2 if args.dry_run else 3)
    out[f"batch_{batch}"] = {"batch": batch, "prompt": prompt, "new_tokens": new,
                             "seconds": t, "times": times, "new_tokens_per_s": batch * new / t}
  return out


def section_main_job(args):
  from configs.common import base_config
  from rljax.trainer import Trainer
  cfg = base_config("tiny" if args.dry_run else "cpu,gpu")
  if not args.dry_run:
    cfg.model.tiny = True  # random weights of SmolLM2's shapes, SmolLM2's tokenizer
    shape = dict(SHAPES["smollm2_135m"])
    shape.pop("vocab_size")
    cfg.model.tiny_config = shape
    cfg.model.tokenizer = args.tokenizer
  cfg.train.steps = 1 if args.dry_run else 3
  cfg.eval.every, cfg.eval.at_start = 0, False
  cfg.log.tensorboard = cfg.log.plot = False
  cfg.checkpoint.every = 0
  workdir = tempfile.mkdtemp(prefix="rljax_device_main_job_")
  t0 = time.perf_counter()
  Trainer(cfg, workdir).run()
  wall = time.perf_counter() - t0
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    rows = [json.loads(line) for line in f if line.strip()]
  steps = [r for r in rows if "time/step" in r or any(k.startswith("time/") for k in r)]
  times = {k: [r[k] for r in steps if k in r] for r in steps for k in r if k.startswith("time/")}
  return {"config": "configs/cort_grpo.py:" + ("tiny" if args.dry_run else "cpu,gpu"),
          "steps": cfg.train.steps, "wall_s": wall, "stage_times": times,
          "rows_per_step": cfg.data.batch_size, "max_new_tokens": cfg.rollout.max_new_tokens}


def table(res: dict) -> str:
  env = res.get("env", {})
  lines = [f"Device check: {env.get('device_kind', '?')}, JAX {env.get('jax', '?')} "
           f"(jaxlib {env.get('jaxlib', '?')}, cuDNN {env.get('cudnn', '?')}), "
           f"`python bench/device/run.py`{' --dry-run' if res.get('dry_run') else ''}, "
           f"{res.get('date', '?')}.", ""]
  p = res.get("parity", {})
  if "error" not in p and p:
    lines += [f"- parity ({p['implementation']}, fused kernel in program: "
              f"{p['cudnn_kernel_in_program']}): output max |err| {p['out_max_abs_err']:.3g}, "
              f"dq / dk / dv {p['dq_max_abs_err']:.3g} / {p['dk_max_abs_err']:.3g} / "
              f"{p['dv_max_abs_err']:.3g}; decoder hidden max |diff| "
              f"{p['decoder_hidden_max_abs_diff']:.3g} (scale {p['decoder_hidden_scale']:.3g}); "
              f"ok = {p['ok']}"]
  mm = res.get("matmul", {})
  if "tflops" in mm:
    lines.append(f"- {mm['n']}³ bfloat16 matmul: {mm['tflops']:.0f} TFLOP/s "
                 f"(datasheet peak {res.get('peak_tflops') or '?'} TFLOP/s)")
  lines += ["", "| run | shape | s | tokens/s | TFLOP/s | MFU |", "|---|---|---|---|---|---|"]
  for name, r in (res.get("step") or {}).items():
    if isinstance(r, dict) and "seconds" in r:
      mfu = f"{100 * r['mfu']:.1f} %" if r.get("mfu") else "–"
      lines.append(f"| GRPO step {name} | {r['rows']}×({r['prompt']}+{r['response']}) | "
                   f"{r['seconds']:.3f} | {r['tokens_per_s']:,.0f} | {r['tflops']:.1f} | {mfu} |")
  for name, r in (res.get("sampler") or {}).items():
    if isinstance(r, dict) and "seconds" in r:
      lines.append(f"| sampler {name} | {r['batch']} rows, {r['prompt']} → +{r['new_tokens']} | "
                   f"{r['seconds']:.3f} | {r['new_tokens_per_s']:,.0f} new | – | – |")
  mj = res.get("main_job", {})
  if "wall_s" in mj:
    st = mj["stage_times"].get("time/step", [])
    per = f"{st[-1]:.2f}" if st else "–"
    lines.append(f"| main job {mj['config']} | {mj['rows_per_step']} rows, +{mj['max_new_tokens']}"
                 f" | {per} per step | – | – | – |")
  for name in ("env", "parity", "matmul", "step", "sampler", "main_job"):
    if isinstance(res.get(name), dict) and "error" in res[name]:
      lines.append(f"\n{name}: failed: {res[name]['error'].splitlines()[-1]}")
  return "\n".join(lines) + "\n"


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--out", required=True, help="folder for device.json and device_table.md")
  ap.add_argument("--dry-run", action="store_true", help="CPU, tiny shapes (a test)")
  ap.add_argument("--tokenizer", default=".device/smollm2_tokenizer",
                  help="SmolLM2's tokenizer as a directory (bench/device/prepare.sh writes it)")
  ap.add_argument("--only", default="", help="comma-separated sections to run")
  args = ap.parse_args(argv)
  if args.dry_run:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
  os.makedirs(args.out, exist_ok=True)
  res = {"dry_run": args.dry_run, "date": time.strftime("%Y-%m-%d"), "argv": sys.argv[1:]}
  path = os.path.join(args.out, "device.json")

  def save():
    with open(path, "w") as f:
      json.dump(res, f, indent=1, default=str)
    with open(os.path.join(args.out, "device_table.md"), "w") as f:
      f.write(table(res))

  only = set(filter(None, args.only.split(",")))
  peak = None
  sections = [("env", section_env), ("parity", section_parity), ("matmul", section_matmul),
              ("step", lambda a: section_step(a, peak)), ("sampler", section_sampler),
              ("main_job", section_main_job)]
  for name, fn in sections:
    if only and name not in only:
      continue
    t0 = time.perf_counter()
    try:
      res[name] = fn(args)
    except Exception:  # noqa: BLE001 - recorded; the next section still runs
      res[name] = {"error": traceback.format_exc()}
    res[name]["section_s"] = time.perf_counter() - t0
    if name == "env" and "device_kind" in res[name]:
      kind = res[name]["device_kind"]
      peak = next((v for k, v in PEAKS.items() if kind.startswith(k)), None)
      res["peak_tflops"] = peak / 1e12 if peak else None
    print(f"[device] {name}: {res[name]['section_s']:.1f} s"
          + (" FAILED" if "error" in res[name] else ""), flush=True)
    save()
  print(table(res))
  failed = [n for n, _ in sections if isinstance(res.get(n), dict) and "error" in res[n]]
  bad_parity = isinstance(res.get("parity"), dict) and res["parity"].get("ok") is False
  return 1 if failed or bad_parity else 0


if __name__ == "__main__":
  sys.exit(main())
