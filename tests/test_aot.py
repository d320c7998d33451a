"""AOT compilation for a TPU slice without TPU hardware (libtpu wheel): the :tiny run's
real train programs (the μ = 4 multi-update program and the fused μ = 1 step) and its
sampler compile for v5e:2x2 and report per-chip memory."""
import importlib.util
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("libtpu") is None,
    reason="libtpu is not installed (pip install -r requirements-tpu-aot.txt): "
           "deviceless TPU compilation needs it")


def test_tiny_fused_and_qlora_steps_compile_with_their_state_donated():
  """μ = 1: the fused step (π_old = sg(π_θ) inside it), the train program only, for `:tiny`
  and `:tiny,lora=2,qlora=8`. Under QLoRA the donated state is the adapters and their
  moments; the int8 base is an argument; XLA's and the analytic FLOPs are below full
  fine-tuning's (no weight gradient for the base; at rank 16 the tiny model's adapters,
  2·16·(64 + 64) per 64 × 64 projection, would cost as much as the gradient they save)."""
  from configs import cort_grpo
  from rljax.aot import compile_run, format_report
  reps = {}
  for arg in ("tiny", "tiny,lora=2,qlora=8"):
    cfg = cort_grpo.get_config(arg)
    cfg.train.inner_epochs = cfg.train.num_minibatches = 1
    reps[arg] = compile_run(cfg, "v5e:2x2", sampler=False)
  full, lora = reps["tiny"], reps["tiny,lora=2,qlora=8"]
  for rep in (full, lora):
    assert rep["train_program"] == "train_step" and rep["updates_per_step"] == 1
    assert set(rep["programs"]) == {"train_step"} and rep["flops"]["scoring"] == 0
    step = rep["programs"]["train_step"]
    assert step["aliased"] >= rep["state_bytes_per_chip"] > 0
    assert rep["fits"] and rep["peak_hbm_per_chip"] == step["total"]
  assert lora["lora"]["rank"] == 2 and lora["lora"]["base_bits"] == 8
  assert len(lora["lora"]["targets"]) == 7 and "LoRA rank 2" in format_report(lora)
  assert lora["opt_state_bytes_per_chip"] < full["opt_state_bytes_per_chip"] / 4
  step = lora["programs"]["train_step"]
  assert step["arguments"] >= lora["lora"]["base_bytes_per_chip"] > 0
  assert lora["flops"]["train_step"] < full["flops"]["train_step"]
  xla = lambda r: r["programs"]["train_step"]["xla_flops_scan_once"]
  assert xla(lora) < xla(full)


def test_analytic_flops_match_a_hand_count():
  """One layer, no attention span to speak of: 2 * params * tokens (+ unembedding)."""
  from rljax.aot import step_flops
  from rljax.models.config import ModelConfig
  c = ModelConfig(model_type="qwen3", vocab_size=10, hidden_size=4, intermediate_size=8,
                  num_layers=1, num_heads=2, num_kv_heads=1, head_dim=2)
  mm = 4 * 2 * (2 * 2 + 2 * 1) + 3 * 4 * 8  # q,k,v,o + gate,up,down = 144
  f = step_flops(c, rows=1, prompt=1, replay_prompt=1, response=2, remat=False, replay=False,
                 use_ref=False)
  attn = lambda t, s: 4 * 1 * 2 * 2 * t * s
  assert f["prefill"] == 2 * mm + attn(1, 2) + 2 * 4 * 10
  assert f["decode"] == 2 * mm + attn(1, 2) + 2 * 4 * 10
  assert f["train_step"] == 3 * (2 * mm * 3 + attn(3, 3)) + 4 * 2 * 4 * 10 * 2
  g = step_flops(c, rows=1, prompt=1, replay_prompt=1, response=2, remat=True, replay=True,
                 use_ref=False)
  assert g["train_step"] - f["train_step"] == (2 * mm * 3 + attn(3, 3)) * 2 + 2 * 2 * 4 * 10 * 2
  # remat="dots" keeps the projections: the backward recomputes attention's two products
  dots = step_flops(c, rows=1, prompt=1, replay_prompt=1, response=2, remat="dots",
                    replay=False, use_ref=False)
  assert dots["train_step"] - f["train_step"] == attn(3, 3)
  assert step_flops(c, 1, 1, 1, 2, "full", False, False) == step_flops(c, 1, 1, 1, 2, True,
                                                                       False, False)
  with pytest.raises(ValueError, match="remat='some'"):
    step_flops(c, 1, 1, 1, 2, "some", False, False)
  # μ = 2 epochs x 2 mini-batches: one scoring forward (π_old + replay) over the batch, then
  # every row trained twice
  h = step_flops(c, rows=1, prompt=1, replay_prompt=1, response=2, remat=True, replay=True,
                 use_ref=False, epochs=2, num_minibatches=2)
  score = (2 * mm * 3 + attn(3, 3)) + 2 * 2 * 4 * 10 * 2  # x+ and x- rows both 3 tokens
  policy = 4 * (2 * mm * 3 + attn(3, 3)) + 4 * 2 * 4 * 10 * 2
  assert h["scoring"] == 2 * score and h["train_step"] == 2 * score + 2 * policy
  assert h["prefill"] == f["prefill"] and h["decode"] == f["decode"]
  # bypass (π_old := log q): the x+ scoring forward is gone, unless CoRT needs ℓ+ from it
  b = step_flops(c, rows=1, prompt=1, replay_prompt=1, response=2, remat=True, replay=False,
                 use_ref=False, epochs=2, num_minibatches=2, bypass=True)
  assert b["scoring"] == 0 and b["train_step"] == 2 * policy
  assert step_flops(c, 1, 1, 1, 2, True, True, False, 2, 2, bypass=True) == h


def test_tpu_kernels_are_in_the_compiled_training_and_decode_programs():
  """attention="splash" compiled for v5e:2x2 (fsdp over 4 chips, one program so that it
  compiles once): the training gradient runs the splash kernels (forward, dq, dkv) and a
  bfloat16 decode step the paged-attention kernel, per shard. (Their memory against dense
  attention: bench/tpu_attention_aot.py.)"""
  import re

  import jax
  import jax.numpy as jnp
  from flax import nnx
  from jax.sharding import NamedSharding, PartitionSpec as P
  from rljax import sharding as shd
  from rljax.aot import _memory, topology_devices, tpu_xla_flags
  from rljax.models import _abstract, init_cache
  from rljax.models.config import ModelConfig
  mesh = shd.make_mesh((1, -1, 1), devices=topology_devices("v5e:2x2"))
  cfg = ModelConfig(model_type="qwen3", vocab_size=256, hidden_size=256, intermediate_size=512,
                    num_layers=1, num_heads=8, num_kv_heads=2, head_dim=128, qk_norm=True,
                    dtype="bfloat16", attention="splash")
  graphdef, state = nnx.split(_abstract(cfg, False))
  pure = nnx.to_pure_dict(state)
  shaped = lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s)
  params = jax.tree.map(shaped, pure, shd.param_shardings(pure, mesh))
  batch = lambda shape: jax.ShapeDtypeStruct(shape, jnp.int32,
                                             sharding=shd.batch_sharding(mesh, shape))
  cache = jax.eval_shape(lambda: init_cache(cfg, 4, 256))  # bfloat16, [L, B, K, S, E]
  cache = jax.tree.map(lambda x: shaped(x, NamedSharding(mesh, P(*{
      5: (None, ("data", "fsdp")), 2: (("data", "fsdp"),)}.get(x.ndim, ())))), cache)

  def run(params, ids, mask, tok, cache):
    with shd.mesh_scope(mesh):
      st = jax.tree.map(lambda x: x, state)
      nnx.replace_by_pure_dict(st, params)
      model = nnx.merge(graphdef, st)
      loss = lambda m: m(ids, jnp.cumsum(mask, 1), mask)[0].astype(jnp.float32).sum()
      step = model(tok, jnp.zeros_like(tok), jnp.ones_like(tok), cache, attend_len=256)[0]
      return nnx.grad(loss)(model), step

  from rljax.models.decoder import attention_impl
  with shd.mesh_scope(mesh):  # "auto" picks the kernels for a TPU program
    assert attention_impl(cfg.replace(attention="auto")) == "splash"
  with tpu_xla_flags():  # libtpu aborts on the tests' XLA:CPU flags
    compiled = jax.jit(run).lower(params, batch((4, 256)), batch((4, 256)), batch((4, 1)),
                                  cache).compile()
  lines = [x for x in compiled.as_text().splitlines()
           if 'custom_call_target="tpu_custom_call"' in x]
  kernels = sorted(re.match(r"\s*%?([a-z_]+)", x).group(1) for x in lines)
  assert _memory(compiled)["tpu_custom_calls"] == len(kernels)
  assert kernels == ["paged_attention", "splash_mha_dkv_segmented_no_residuals",
                     "splash_mha_dq_segmented_no_residuals",
                     "splash_mha_fwd_segmented_residuals"], kernels
  # per shard: one of the 4 rows per chip (the paged output is [B=1, H=8, 1, E])
  assert "f32[1,8,1,128]" in next(x for x in lines if "paged_attention" in x)


def test_tiny_update_program_and_sampler_compile_on_disjoint_halves_of_a_tpu_topology():
  """:tiny at its defaults (2 epochs x 2 mini-batches: the multi-update program Trainer jits
  for μ > 1) with rollout.placement=disaggregated: the sampler's prefill and decode on 2
  chips of v5e:2x2, the train step on the other 2, each per-chip peak reported; the state is
  donated; the sampler's chips hold no optimizer state; the FLOPs are the analytic count."""
  from configs import cort_grpo
  from rljax.aot import compile_run, format_report, model_config, step_flops
  cfg = cort_grpo.get_config("tiny")
  assert (cfg.train.inner_epochs, cfg.train.num_minibatches) == (2, 2)
  cfg.rollout.placement, cfg.rollout.num_devices, cfg.rollout.max_staleness = (
      "disaggregated", 2, 1)
  rep = compile_run(cfg, "v5e:2x2")
  assert rep["chip"] == "TPU v5 lite" and rep["hbm_per_chip"] == 16 << 30
  assert rep["train_program"] == "update_batch" and rep["updates_per_step"] == 4
  pl = rep["placement"]
  assert (pl["sampler_chips"], pl["trainer_chips"]) == (2, 2)
  assert rep["mesh"] == {"data": 1, "fsdp": 2, "tensor": 1}
  progs = rep["programs"]
  assert set(progs) == {"train_step", "prefill", "decode"}
  for m in progs.values():
    assert m["total"] > 0 and m["arguments"] > 0
  step = progs["train_step"]
  # the state is donated: its buffers are aliased to the outputs
  assert step["aliased"] >= rep["state_bytes_per_chip"] > 0
  assert step["arguments"] >= rep["state_bytes_per_chip"]
  assert pl["peak_hbm_per_trainer_chip"] == step["total"]
  assert pl["peak_hbm_per_sampler_chip"] == max(progs["prefill"]["total"],
                                                progs["decode"]["total"])
  assert pl["peak_hbm_per_sampler_chip"] < rep["opt_state_bytes_per_chip"] + \
      progs["decode"]["total"]
  assert rep["fits"] and rep["peak_hbm_per_chip"] < rep["hbm_per_chip"]
  text = format_report(rep)
  assert "per sampler chip" in text and "4 update(s) per step" in text and "decode" in text
  d, n = cfg.data, cfg.rollout.max_new_tokens
  want = step_flops(model_config(cfg), d.batch_size, d.max_prompt_len, d.max_replay_prompt_len,
                    n, False, True, False, epochs=2, num_minibatches=2)
  assert rep["flops"] == want and want["scoring"] > 0
  assert rep["ideal_step_seconds"] == pytest.approx(rep["flops"]["total"] / (4 * 197e12))


def test_aot_cli_is_the_shared_cli(capsys):
  """`python -m rljax.aot` takes the same flags as rljax.train: --help exits 0 and lists the
  config's keys; a missing topology is one line."""
  from rljax import aot
  with pytest.raises(SystemExit) as e:
    aot.main(["--config", "configs/cort_grpo.py:tiny", "--help"])
  assert e.value.code == 0
  out = capsys.readouterr().out
  assert "--topology" in out and "rollout.placement = 'colocated'" in out
  with pytest.raises(SystemExit) as e:
    aot.main(["--config", "configs/cort_grpo.py:tiny", "--config.rollout.max_staleness=1",
              "--print_config"])
  assert e.value.code == 0 and "max_staleness: 1" in capsys.readouterr().out
  with pytest.raises(SystemExit) as e:
    aot.main(["--config", "configs/cort_grpo.py:tiny"])
  assert e.value.code == 2 and "--topology is required" in capsys.readouterr().err


def test_memory_report_survives_an_unprintable_program():
  """libtpu 0.0.52 fails `compiled.as_text()` on some paper-size steps (a RET_CHECK on async
  instructions): the memory analysis is still reported, the kernel count left out."""
  from types import SimpleNamespace
  from rljax.aot import _memory
  stats = SimpleNamespace(argument_size_in_bytes=10, temp_size_in_bytes=5,
                          output_size_in_bytes=10, alias_size_in_bytes=10,
                          generated_code_size_in_bytes=1)

  def as_text():
    raise RuntimeError("INTERNAL: RET_CHECK failure async-update instruction should have 1 "
                       "operands but sees 3")
  m = _memory(SimpleNamespace(memory_analysis=lambda: stats, as_text=as_text))
  assert m["total"] == 15 and m["tpu_custom_calls"] is None
  assert "RET_CHECK" in m["as_text_error"]
  ok = _memory(SimpleNamespace(memory_analysis=lambda: stats, as_text=lambda: (
      'custom_call_target="tpu_custom_call" x custom_call_target="tpu_custom_call"')))
  assert ok["tpu_custom_calls"] == 2 and "as_text_error" not in ok


def test_a_paper_config_compiles_at_reduced_depth(tmp_path, capsys, monkeypatch):
  """The README's AOT command on configs/pod.py:model=qwen3_4b for v5p:2x2x2 with 1 of the 36
  layers (`--num_layers 1`), through `rljax.aot.main`: every other shape is the paper run's
  (128 rows of 512-token prompts and 2048-token responses, vocabulary 151936, width 2560,
  μ = 4 updates per step, grad_accum 2, remat full, fsdp over 8 chips), and so is the
  multi-update train program. `--train_only` keeps it to ≈ 2 min on 2 cores (the sampler's
  prefill and decode compile for `:tiny` above, and at full depth for the committed table);
  the pod config's causal query blocks of 512 keep the program small (blocks of 64: ≈ 6 min)."""
  import json
  from rljax import aot
  monkeypatch.chdir(ROOT)  # the config names configs/models/qwen3_4b
  out = tmp_path / "qwen3_4b_1_layer.json"
  assert aot.main(["--config", "configs/pod.py:model=qwen3_4b", "--topology", "v5p:2x2x2",
                   "--num_layers", "1", "--train_only", "--out", str(out)]) == 0
  rep = json.loads(out.read_text())
  assert rep["reduced_depth"] == {"num_layers": 1, "of": 36}
  m = rep["model"]
  assert (m["num_layers"], m["hidden_size"], m["vocab_size"], m["num_heads"]) == (1, 2560,
                                                                                  151936, 32)
  assert (rep["rows"], rep["updates_per_step"], rep["grad_accum"], rep["remat"]) == (
      128, 4, 2, "full")
  assert rep["mesh"] == {"data": 1, "fsdp": 8, "tensor": 1} and rep["chip"] == "TPU v5"
  assert set(rep["programs"]) == {"train_step"} and rep["train_program"] == "update_batch"
  step = rep["programs"]["train_step"]
  # the activations of 32-row micro-batches of 2560 tokens dominate: GiBs, not the params
  assert step["temps"] > 4 * step["arguments"] > 0
  assert rep["fits"] and 0 < rep["peak_hbm_per_chip"] < rep["hbm_per_chip"] == 95 << 30
  text = capsys.readouterr().out
  assert "1 of the model's 36 layers" in text and "peak per chip" in text
