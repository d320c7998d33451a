"""`python -m rljax.aot --config configs/pod.py:model=qwen3_4b --topology v5p:2x2x2`

Compiles, for a TPU slice and without TPU hardware (the `libtpu` wheel from
requirements-tpu-aot.txt), the run's real programs: what the trainer jits for one rollout
batch (`rljax.update.jit_update` on the trainer's `rljax.loop.TrainBatch` layout at the
config's longest prompts), with the config's StepConfig, optimizer and shardings — the fused
step when μ = inner_epochs × num_minibatches = 1, else the multi-update program (the π_old /
replay scoring forward, the token transforms and the `lax.scan` over μ mini-batch updates),
the per-criterion replay rows included — and the sampler's prefill and decode
(`rljax.rollout.sampler._build`). Parameters are shapes
only (`nnx.eval_shape`), so a model's config.json is all it needs. Prints, per chip, the
HBM each program needs (arguments, temporaries, outputs, less donated aliases) against
the chip's capacity, the FLOPs of one RL step (counted analytically: XLA's
cost_analysis counts a scanned layer once) and its time at the chip's peak.
`--out FILE.json` writes the report. Topology names are those
`jax.experimental.topologies.get_topology_desc` takes ("v5e:2x2", "v5p:2x2x2").
`--num_layers N` compiles the same programs with the first N layers only (a quick check).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import time

# chip -> (peak dense bf16 FLOP/s, HBM bytes); device_kind as libtpu reports it
CHIPS = {"TPU v4": (275e12, 32 << 30), "TPU v5 lite": (197e12, 16 << 30),
         "TPU v5": (459e12, 95 << 30), "TPU v6 lite": (918e12, 32 << 30)}


def topology_devices(name: str):
  """The devices of a TPU topology, deviceless (needs the libtpu wheel)."""
  os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # other local jax processes
  os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")  # no GCE metadata server here
  try:
    import libtpu  # noqa: F401
  except ImportError:
    raise ImportError("AOT compilation for TPU needs the libtpu wheel: "
                      "pip install -r requirements-tpu-aot.txt") from None
  from jax.experimental import topologies
  return topologies.get_topology_desc(topology_name=name, platform="tpu").devices


def model_config(cfg):
  """The ModelConfig of a run config: a config.json directory (no weights needed), a
  bundled model's GGUF metadata, or the tiny random model over the tokenizer's vocab."""
  from rljax.models.bundled import resolve
  from rljax.models.config import ModelConfig, load_hf_config
  c = cfg.model
  if c.tiny:
    from rljax.models.tokenizer import load_tokenizer
    tok = load_tokenizer(resolve(c.tokenizer or c.path))
    return ModelConfig(vocab_size=len(tok), eos_token_id=tok.eos_token_id,
                       param_dtype=c.param_dtype, dtype=c.dtype,
                       attention=c.attention, causal_block=c.get("causal_block", 64),
                       **c.tiny_config.to_dict())
  kw = dict(param_dtype=c.param_dtype, dtype=c.dtype, attention=c.attention,
            causal_block=c.get("causal_block", 64))
  path = resolve(c.path)
  if os.path.isdir(path):
    return load_hf_config(path, **kw)
  from rljax.models.checkpoint import gguf_config
  return gguf_config(path, **kw)


def _shaped(tree, shardings):
  import jax
  return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                      tree, shardings)


def _per_chip_bytes(tree) -> int:
  import jax
  import numpy as np
  total = 0
  for x in jax.tree.leaves(tree):
    shape = x.sharding.shard_shape(x.shape) if getattr(x, "sharding", None) else x.shape
    total += int(np.prod(shape)) * np.dtype(x.dtype).itemsize
  return total


def _memory(compiled) -> dict:
  m = compiled.memory_analysis()
  out = {"arguments": m.argument_size_in_bytes, "temps": m.temp_size_in_bytes,
         "outputs": m.output_size_in_bytes, "aliased": m.alias_size_in_bytes,
         "code": m.generated_code_size_in_bytes}
  out["total"] = out["arguments"] + out["temps"] + out["outputs"] - out["aliased"]
  # Pallas (Mosaic) kernels in the compiled program (splash / paged attention); the program
  # text is not always printable (libtpu 0.0.52 fails a RET_CHECK on some async
  # instructions of compiled paper-size steps): then the count is left out, not the report
  try:
    out["tpu_custom_calls"] = compiled.as_text().count(
        'custom_call_target="tpu_custom_call"')
  except Exception as e:  # noqa: BLE001 - jax.errors.JaxRuntimeError
    out["tpu_custom_calls"] = None
    out["as_text_error"] = str(e).splitlines()[0][:200]
  return out


class DoesNotFit(Exception):
  """XLA refused to compile a program for lack of HBM (CompileTimeHbmOom)."""


@contextlib.contextmanager
def tpu_xla_flags():
  """XLA_FLAGS without XLA:CPU's own flags (`--xla_cpu_*`) while compiling for TPU: libtpu
  parses XLA_FLAGS when it compiles and aborts the process on a flag it does not know
  ("Unknown flag in XLA_FLAGS: --xla_cpu_use_fusion_emitters=false")."""
  old = os.environ.get("XLA_FLAGS")
  if old is not None:
    os.environ["XLA_FLAGS"] = " ".join(f for f in old.split() if not f.startswith("--xla_cpu_"))
  try:
    yield
  finally:
    if old is not None:
      os.environ["XLA_FLAGS"] = old


def _compile(lowered):
  try:
    with tpu_xla_flags():
      return lowered.compile()
  except Exception as e:  # jax.errors.JaxRuntimeError
    if "RESOURCE_EXHAUSTED" in str(e) or "HbmOom" in str(e):
      raise DoesNotFit(str(e).splitlines()[0]) from None
    raise


def step_flops(mcfg, rows: int, prompt: int, replay_prompt: int, response: int,
               remat: str | bool, replay: bool, use_ref: bool, epochs: int = 1,
               num_minibatches: int = 1, fused: bool | None = None,
               bypass: bool = False, lora=None) -> dict:
  """FLOPs (multiply-add = 2) of one RL step: rollout (prefill + decode at full length)
  and the training of one rollout batch. μ = epochs × num_minibatches = 1: the fused step
  (forward, backward, remat recompute, replay and ref forwards). `remat` (model.remat;
  True = "full", False = "none"): "full" recomputes every layer's forward in the backward;
  "dots" saves the projections (dots without batch dimensions) and recomputes the rest,
  of which only attention's two batched products count. μ > 1: one scoring
  forward of π_old (and the replay) over the batch, then every row trained `epochs` times
  (each update: forward, backward, remat, ref forward); `fused` False scores first at μ = 1
  too (grad_accum with truncated scoring or rejection). `bypass` (π_old := the sampler's log q)
  drops the π_old forward unless the CoRT replay needs ℓ⁺. `lora` (a LoraConfig): the
  backward computes no weight gradient of the frozen base (projections and unembedding: the
  input gradient only) and adds the adapters' products (forward, input and adapter
  gradients). Attention is counted dense over its key span (what the code computes,
  masked)."""
  c = mcfg
  d, e, h, k, f, v, n_l = (c.hidden_size, c.head_dim, c.num_heads, c.num_kv_heads,
                           c.intermediate_size, c.vocab_size, c.num_layers)
  mm = n_l * (d * e * (2 * h + 2 * k) + 3 * d * f)  # matmul params per layer stack

  attn = lambda tokens, keys: 4 * n_l * h * e * tokens * keys  # q·k and p·v

  def fwd(tokens, keys):
    return 2 * mm * tokens + attn(tokens, keys)

  remat = {True: "full", False: "none"}.get(remat, remat)
  if remat not in ("none", "dots", "full"):
    raise ValueError(f"step_flops: remat={remat!r}; choose 'none', 'dots' or 'full'")

  unembed = 2 * d * v
  slots = prompt + response - 1
  prefill = rows * (fwd(prompt, slots) + unembed)
  decode = rows * (response - 1) * (fwd(1, slots) + unembed)
  length = prompt + response
  score = lambda t: rows * (fwd(t, t) + 2 * unembed * response)  # a forward-only pass
  recompute = {"none": 0, "dots": attn(length, length), "full": fwd(length, length)}[remat]
  if lora is None:
    policy = rows * (3 * fwd(length, length) + recompute + 4 * unembed * response)
  else:
    from rljax.models.lora import io_sizes
    adapters = n_l * lora.rank * sum(sum(io_sizes(c)[t]) for t in lora.names)
    policy = rows * (2 * fwd(length, length) + attn(length, length) + recompute
                     + 3 * unembed * response + 3 * 2 * adapters * length)
  replay_fwd = score(replay_prompt + response) if replay else 0
  ref = score(length) if use_ref else 0
  if fused is None:
    fused = epochs * num_minibatches == 1
  if fused:  # the fused step: π_old = sg(π_θ) of its own forward
    train, scoring = policy + replay_fwd + ref, 0
  else:
    scoring = (0 if bypass and not replay else score(length)) + replay_fwd
    train = scoring + epochs * (policy + ref)
  return {"prefill": prefill, "decode": decode, "train_step": train, "scoring": scoring,
          "total": prefill + decode + train}


def compile_run(cfg, topology: str, model_cfg=None, sampler: bool = True) -> dict:
  """Compiles the train program and (with `sampler`) the sampler for `topology`; the report
  as a dict. A program XLA cannot fit in HBM ends the report there with fits=False and
  XLA's message. model_cfg replaces the config's model (shapes only)."""
  from flax import nnx
  from rljax import sharding as shd
  from rljax.config_check import validate_config
  from rljax.models import _abstract
  from rljax.loop import build_step_parts
  from rljax.loop.build import lora_config
  import jax
  import numpy as np

  from rljax.loop.placement import make_placement
  devices = topology_devices(topology)
  kind = devices[0].device_kind
  peak, hbm = CHIPS.get(kind, (float("nan"), 0))
  for w in validate_config(cfg, len(devices)):
    print("warning:", w, file=sys.stderr)
  place = make_placement(cfg, devices)  # rollout.placement: one mesh, or two disjoint ones
  mesh = place.trainer_mesh
  mcfg = model_config(cfg) if model_cfg is None else model_cfg
  abstract = _abstract(mcfg, cfg.model.remat)
  remat = abstract.remat  # "none" | "dots" | "full", as the Decoder resolved it
  graphdef, abs_state = nnx.split(abstract)
  pure = nnx.to_pure_dict(abs_state)
  params = _shaped(pure, shd.param_shardings(pure, mesh))
  objective, optimizer, step_cfg = build_step_parts(cfg, mcfg.vocab_size)
  lora = lora_config(cfg)
  train = _lora_train_parts(mcfg, cfg.model.remat, lora, mesh) if lora else None
  report = {"topology": topology, "chip": kind, "chips": len(devices),
            "mesh": dict(mesh.shape), "hbm_per_chip": hbm, "peak_flops_per_chip": peak,
            "model": {k: getattr(mcfg, k) for k in (
                "model_type", "vocab_size", "hidden_size", "intermediate_size", "num_layers",
                "num_heads", "num_kv_heads", "head_dim", "param_dtype", "dtype", "attention")},
            "remat": remat, "programs": {}}
  if lora:
    report["lora"] = {"rank": lora.rank, "alpha": lora.alpha, "targets": list(lora.names),
                      "base_bits": lora.base_bits,
                      "trained_params": int(sum(np.prod(x.shape)
                                                for x in jax.tree.leaves(train[1]))),
                      "base_bytes_per_chip": _per_chip_bytes(train[2])}
  if place.disaggregated:
    report["placement"] = {"sampler_chips": place.sampler_mesh.size,
                           "sampler_mesh": dict(place.sampler_mesh.shape),
                           "trainer_chips": mesh.size}
  d, r, t = cfg.data, cfg.rollout, cfg.train
  mu = 1 if step_cfg.fused_scoring else t.inner_epochs * t.num_minibatches
  report.update(updates_per_step=mu, grad_accum=t.grad_accum, rows=d.batch_size)
  flops = step_flops(mcfg, d.batch_size, d.max_prompt_len, d.max_replay_prompt_len,
                     r.max_new_tokens, remat, step_cfg.replay, step_cfg.use_ref,
                     epochs=t.inner_epochs, num_minibatches=t.num_minibatches,
                     fused=step_cfg.fused_scoring, bypass=step_cfg.old_policy == "bypass",
                     lora=lora)
  report.update(flops=flops, ideal_step_seconds=flops["total"] / (peak * len(devices)))
  t0 = time.time()
  try:
    _compile_programs(report, cfg, mcfg, place, graphdef, abs_state, params, objective,
                      optimizer, step_cfg, sampler, train)
  except DoesNotFit as e:
    report.update(fits=False, error=str(e), peak_hbm_per_chip=None)
  report["compile_seconds"] = time.time() - t0
  return report


def _lora_train_parts(mcfg, remat, lora, mesh):
  """(the LoRA decoder's graphdef, the adapters, the frozen base — integers for QLoRA) as
  sharded shapes: what a LoRA run's update reads."""
  from flax import nnx
  from rljax import sharding as shd
  from rljax.models.decoder import Decoder
  from rljax.models.lora import adapter_shapes
  graphdef, state = nnx.split(nnx.eval_shape(lambda: Decoder(mcfg, nnx.Rngs(0), remat=remat,
                                                             lora=lora)))
  base = nnx.to_pure_dict(state)
  adapters = adapter_shapes(mcfg, lora)
  return (graphdef, _shaped(adapters, shd.param_shardings(adapters, mesh)),
          _shaped(base, shd.param_shardings(base, mesh)))


def _compile_programs(report, cfg, mcfg, place, graphdef, abs_state, params, objective,
                      optimizer, step_cfg, sampler=True, train=None):
  """The train program (report["programs"]["train_step"]) on the trainer's mesh and the
  sampler's on its own (the same mesh when colocated), and the peak per chip. `train`: a
  LoRA run's (graphdef, adapters, base) (`_lora_train_parts`); the sampler then reads the
  merged float weights (`params`)."""
  mesh = place.trainer_mesh
  s_graphdef, s_params = graphdef, params
  if train is not None:
    graphdef, params, base = train
  import jax
  from rljax import sharding as shd
  from rljax.loop import batch_layout, needs_ref_params
  from rljax.train_step import init_state
  from rljax.update import jit_update
  # the train state in the shardings the trainer creates it in (shd.init_sharded)
  init_fn = lambda p: init_state(p, optimizer, objective)
  state = _shaped(jax.eval_shape(init_fn, params), shd.state_shardings(init_fn, params, mesh))
  # the trainer's batch (rljax.loop.TrainBatch) at the config's longest prompts
  batch = batch_layout(cfg, step_cfg).spec(mesh)
  # a frozen reference copy, as the trainer holds one (KL, or the CoRT replay scored by it);
  # with LoRA, the frozen base
  ref = base if train is not None else params if needs_ref_params(step_cfg) else None
  sh = lambda tree: None if tree is None else jax.tree.map(lambda x: x.sharding, tree)
  t = cfg.train
  update = jit_update(graphdef, optimizer, step_cfg, epochs=t.inner_epochs,
                      num_minibatches=t.num_minibatches, grad_accum=t.grad_accum,
                      state_shardings=sh(state), batch_shardings=sh(batch),
                      ref_shardings=sh(ref), replicated=shd.replicated(mesh))
  key = jax.ShapeDtypeStruct((), jax.random.key(0).dtype, sharding=shd.replicated(mesh))
  compiled = _compile(update.lower(state, batch, ref, key))  # what Trainer.update runs
  report["train_program"] = "train_step" if step_cfg.fused_scoring else "update_batch"
  report["programs"]["train_step"] = _memory(compiled)
  # XLA counts each scan body (layers, μ updates, grad_accum micro-batches) once
  report["programs"]["train_step"]["xla_flops_scan_once"] = float(
      (compiled.cost_analysis() or {}).get("flops", 0.0))
  report["state_bytes_per_chip"] = _per_chip_bytes(state)
  report["opt_state_bytes_per_chip"] = _per_chip_bytes(state.opt_state)
  s_mesh = place.sampler_mesh
  if sampler:
    if place.disaggregated:
      s_params = _shaped(s_params, shd.param_shardings(s_params, s_mesh))
    _compile_sampler(report, cfg, mcfg, s_mesh, s_graphdef, abs_state, s_params)
  # peak per chip: the train program (state donated in place), or a sampler program plus
  # the optimizer state (and a LoRA run's frozen base, beside the merged weights the sampler
  # reads) that stay resident while it runs (colocated); disaggregated, the sampler's chips
  # hold its programs alone (a LoRA run's base too: the adapters merge into it there)
  opt = 0 if place.disaggregated else report["opt_state_bytes_per_chip"]
  if train is not None:
    opt += report["lora"]["base_bytes_per_chip"]
  progs = report["programs"]
  sampling = [progs[k]["total"] + opt for k in ("prefill", "decode") if k in progs]
  peak_bytes = max([progs["train_step"]["total"]] + sampling)
  if place.disaggregated:
    report["placement"].update(peak_hbm_per_trainer_chip=progs["train_step"]["total"],
                               peak_hbm_per_sampler_chip=max(sampling, default=None))
  hbm = report["hbm_per_chip"]
  report.update(peak_hbm_per_chip=peak_bytes, fits=bool(hbm) and peak_bytes <= hbm)


def _compile_sampler(report, cfg, mcfg, mesh, graphdef, abs_state, params):
  """The sampler's prefill and decode on the trainer's params (rollout.copy="none")."""
  import jax
  import jax.numpy as jnp
  from flax import nnx
  from rljax import sharding as shd
  from rljax.config_check import sampler_config
  from rljax.rollout import sampler as smp
  from rljax.rollout.config import cache_slots, resolve_stop_ids
  d, r = cfg.data, cfg.rollout
  b, i32 = d.batch_size, jnp.int32
  scfg = sampler_config(cfg, stop_ids=(mcfg.eos_token_id or 0,), pad_id=0)
  prompts = b // r.num_generations
  slots = cache_slots(scfg, d.max_prompt_len)
  stop_ids = resolve_stop_ids(scfg, mcfg.eos_token_id)
  share = smp.shares_prefix(mcfg, 0, mesh)  # rollout.copy="none": a float cache
  prefill, decode = smp._build(graphdef, scfg, slots, d.max_prompt_len, stop_ids, mesh, share)
  put = lambda s, t: jax.ShapeDtypeStruct(s, t, sharding=jax.sharding.NamedSharding(
      mesh, shd.logical_to_spec(("batch",) + (None,) * (len(s) - 1), s, mesh)))
  s_state = jax.tree.map(lambda x: x, abs_state)
  nnx.replace_by_pure_dict(s_state, params)
  ids = put((prompts, d.max_prompt_len), i32)
  keys = put((prompts,), jax.random.key(0).dtype)
  pre = _compile(prefill.lower(s_state, ids, ids, keys))
  report["programs"]["prefill"] = _memory(pre)
  ds_shape = jax.eval_shape(prefill, s_state, ids, ids, keys)[0]
  ds = _shaped(ds_shape, pre.output_shardings[0])
  until = jax.ShapeDtypeStruct((), i32, sharding=shd.replicated(mesh))  # decode's stop step
  dec = _compile(decode.lower(s_state, ds, until))
  report["programs"]["decode"] = _memory(dec)


def format_report(rep: dict) -> str:
  gib = lambda x: f"{x / 2**30:.2f} GiB" if x >= 2**30 else f"{x / 2**20:.1f} MiB"
  lines = [f"{rep['topology']}: {rep['chips']} x {rep['chip']}, mesh {rep['mesh']}, "
           f"remat={rep['remat']}, {rep['rows']} rows, {rep['updates_per_step']} update(s) "
           f"per step, grad_accum {rep['grad_accum']}"]
  rd = rep.get("reduced_depth")
  if rd:
    lines.append(f"  {rd['num_layers']} of the model's {rd['of']} layers (--num_layers): "
                 "the memory and FLOPs below are those of the cut-down model")
  lo = rep.get("lora")
  if lo:
    lines.append(f"  LoRA rank {lo['rank']} on {', '.join(lo['targets'])}: "
                 f"{lo['trained_params']:,} trained params; frozen base "
                 f"{'int%d' % lo['base_bits'] if lo['base_bits'] else 'float'}, "
                 f"{gib(lo['base_bytes_per_chip'])} per chip")
  pl = rep.get("placement")
  if pl:
    lines.append(f"  disaggregated: sampler on {pl['sampler_chips']} chips {pl['sampler_mesh']}, "
                 f"trainer on {pl['trainer_chips']} chips {rep['mesh']}")
  for name, m in rep["programs"].items():
    lines.append(f"  {name:10s} per chip: arguments {gib(m['arguments'])}, temps "
                 f"{gib(m['temps'])}, outputs {gib(m['outputs'])}, aliased "
                 f"{gib(m['aliased'])} -> {gib(m['total'])}")
  if rep.get("error"):
    lines.append(f"  DOES NOT FIT in {gib(rep['hbm_per_chip'])} HBM per chip: {rep['error']}")
  else:
    if pl and pl.get("peak_hbm_per_sampler_chip") is not None:
      lines.append(f"  peak per trainer chip {gib(pl['peak_hbm_per_trainer_chip'])}, per "
                   f"sampler chip {gib(pl['peak_hbm_per_sampler_chip'])}")
    lines.append(f"  peak per chip {gib(rep['peak_hbm_per_chip'])} of "
                 f"{gib(rep['hbm_per_chip'])} HBM: {'fits' if rep['fits'] else 'DOES NOT FIT'}")
  f = rep["flops"]
  lines.append(f"  FLOPs per RL step {f['total']:.3e} (prefill {f['prefill']:.2e}, decode "
               f"{f['decode']:.2e}, training {f['train_step']:.2e} of which scoring "
               f"{f['scoring']:.2e}); at peak "
               f"{rep['ideal_step_seconds']:.3g} s on {rep['chips']} chips")
  return "\n".join(lines)


def main(argv=None) -> int:
  """`python -m rljax.aot --config FILE[:ARG] [--config.a.b=v ...] [--topology T] [--out F]`"""
  from rljax import cli
  os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the host runs nothing; TPU only compiles
  ap = cli.parser("python -m rljax.aot", __doc__, config=True)
  ap.add_argument("--topology", default=None,
                  help="TPU topology, e.g. v5p:2x2x2 (default: the config's `topology`)")
  ap.add_argument("--out", default=None, help="write the report as JSON here")
  ap.add_argument("--num_layers", type=int, default=0,
                  help="compile only the first N decoder layers (every other shape as the "
                       "config): a quick check of the same programs; 0 = all layers")
  ap.add_argument("--train_only", action="store_true",
                  help="compile the train program only, not the sampler's prefill / decode")
  args, cfg = cli.parse_with_config(ap, argv)
  cli.set_verbosity(args.verbosity)
  topology = args.topology or cfg.get("topology")
  if not topology:
    ap.exit(2, f"{ap.prog}: error: --topology is required (the config names none), "
               "e.g. v5p:2x2x2\n")
  try:
    mcfg = model_config(cfg)
    if args.num_layers:
      if not 0 < args.num_layers <= mcfg.num_layers:
        ap.exit(2, f"{ap.prog}: error: --num_layers={args.num_layers}: the model has "
                   f"{mcfg.num_layers} layers\n")
      full, mcfg = mcfg.num_layers, dataclasses.replace(mcfg, num_layers=args.num_layers)
    rep = compile_run(cfg, topology, model_cfg=mcfg, sampler=not args.train_only)
    if args.num_layers:
      rep["reduced_depth"] = {"num_layers": args.num_layers, "of": full}
  except ImportError as e:  # no libtpu wheel
    ap.exit(2, f"{ap.prog}: error: {e}\n")
  rep["config"] = args.config
  print(format_report(rep))
  if args.out:
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as fh:
      json.dump(rep, fh, indent=2, default=str)
  return 0


if __name__ == "__main__":
  sys.exit(main())
