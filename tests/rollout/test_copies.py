"""Rollout copies: no-copy shares memory, mismatch grows with quantization, the quantized
sampler still records its own q, staleness lags by exactly N - 1 updates."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rljax.rollout import (RolloutCopy, SamplerConfig, SamplerSync, fake_quant_weight, generate,
                           make_sampler_params, mismatch_metrics, score_rollout)
from rljax.rollout.quant import WEIGHT_INPUT_AXES
from tests.rollout.helpers import ragged_prompts, tiny_model


@pytest.fixture(scope="module")
def model():
  return tiny_model(seed=2)


def _leaves(state):
  return jax.tree.leaves(nnx.to_pure_dict(state))


def test_no_mismatch_copy_shares_the_trainer_buffers(model):
  graphdef, state = nnx.split(model)
  for spec in ("none", "kv4"):  # a KV-only copy changes arithmetic, not weights
    g, s = make_sampler_params(model, spec)
    for a, b in zip(_leaves(state), _leaves(s)):
      assert a is b and a.unsafe_buffer_pointer() == b.unsafe_buffer_pointer()
  assert make_sampler_params(model, "none")[0] == graphdef
  shared = SamplerSync("none", every=1).params(0, model)[1]
  assert all(a is b for a, b in zip(_leaves(state), _leaves(shared)))
  snap = SamplerSync("none", every=2).params(0, model)[1]  # stale: must be a snapshot
  for a, b in zip(_leaves(state), _leaves(snap)):
    assert a.unsafe_buffer_pointer() != b.unsafe_buffer_pointer()
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_mismatch_grows_float32_bf16_w8a8_int4kv(model):
  cfg = SamplerConfig(max_new_tokens=12, temperature=1.0, num_generations=2, stop_token_ids=())
  ids, mask = ragged_prompts([7, 4, 6, 5, 7, 3, 6, 7], seed=1)
  rows = {}
  for spec in ("none", "bf16", "w8a8", "w8a8+kv4"):
    sampler = make_sampler_params(model, spec)
    r = generate(sampler, ids, mask, jax.random.key(0), cfg)
    logp = score_rollout(model, r, cfg)["logp_BxN"]
    rows[spec] = {k: float(v) for k, v in mismatch_metrics(r.logq_BxN, logp, r.mask_BxN).items()}
    if spec == "w8a8+kv4":  # the quantized sampler records its own distribution
      own = score_rollout(sampler, r, cfg)["logp_BxN"]
      assert float(jnp.mean(jnp.abs(own - r.logq_BxN))) < 1e-3
  assert rows["none"]["abs_log_ratio_mean"] < 1e-5 and rows["none"]["prob_corr"] > 0.99999
  order = [rows[s] for s in ("none", "bf16", "w8a8", "w8a8+kv4")]
  for key in ("abs_log_ratio_mean", "kl_q_p"):
    vals = [r[key] for r in order]
    assert all(a < b for a, b in zip(vals, vals[1:])), (key, vals)
  vals = [r["frac_ratio_outside_0.9_1.1"] for r in order]
  assert all(a <= b for a, b in zip(vals, vals[1:])) and vals[0] < vals[-1], vals
  assert order[-1]["prob_corr"] < order[1]["prob_corr"] < 1.0


def test_weight_copies_are_the_rounded_trainer_weights(model):
  _, state = nnx.split(model)
  pure = nnx.to_pure_dict(state)
  fq = jax.jit(fake_quant_weight, static_argnums=(1, 2, 3))
  for spec, bits, group in (("int8", 8, 0), ("w8a8", 8, 0), ("int4+g16", 4, 16)):
    g, s = make_sampler_params(model, spec)
    got = nnx.to_pure_dict(s)
    for name, axes in WEIGHT_INPUT_AXES.items():
      want = fq(pure["layers"][name], axes, bits, group)
      np.testing.assert_array_equal(np.asarray(got["layers"][name]), np.asarray(want))
    np.testing.assert_array_equal(np.asarray(got["embed"]), np.asarray(pure["embed"]))
    assert (nnx.merge(g, s).numerics is not None) == (spec == "w8a8")
  g, s = make_sampler_params(model, "bf16+noise0.05")
  copy = nnx.merge(g, s)
  assert copy.cfg.dtype == copy.cfg.param_dtype == "bfloat16"
  a = np.asarray(pure["layers"]["wq"])
  b = np.asarray(nnx.to_pure_dict(s)["layers"]["wq"], np.float32)
  rel = np.std((b - a) / a)
  assert 0.04 < rel < 0.06


def test_staleness_lags_by_exactly_n_minus_1_and_requantizes_at_each_sync(model):
  graphdef, state = make_sampler_params(model, "none", force_copy=True)  # ours to donate
  base = float(nnx.to_pure_dict(state)["final_norm"][0])

  def update(state, step):  # a trainer update: final_norm += 1; old buffers are donated
    pure = nnx.to_pure_dict(state)
    new = jax.tree.map(lambda x: x, state)
    nnx.replace_by_pure_dict(new, {**pure, "final_norm": pure["final_norm"] + 1.0,
                                   "layers": {**pure["layers"],
                                              "wq": pure["layers"]["wq"] * (1 + 0.01 * step)}})
    pure["final_norm"].delete()
    return new

  for every in (1, 3):
    sync = SamplerSync(RolloutCopy.parse("int8"), every=every)
    trainer, lags = make_sampler_params((graphdef, state), "none", force_copy=True)[1], []
    for step in range(8):
      g, s = sync.params(step, (graphdef, trainer))
      version = float(nnx.to_pure_dict(s)["final_norm"][0]) - base
      lags.append(step - round(version))
      assert sync.lag(step) == lags[-1]
      if step == sync.last_sync_step:  # re-quantized from the current trainer weights
        want = fake_quant_weight(nnx.to_pure_dict(trainer)["layers"]["wq"], (1,), 8)
        np.testing.assert_array_equal(np.asarray(nnx.to_pure_dict(s)["layers"]["wq"]),
                                      np.asarray(want))
      trainer = update(trainer, step + 1)
    assert lags == [i % every for i in range(8)] and max(lags) == every - 1
    assert sync.num_syncs == -(-8 // every)
  saved = sync.state_dict()
  assert saved == {"every": 3, "last_sync_step": 6, "num_syncs": 3}
  restored = SamplerSync("int8", every=1)
  restored.load_state_dict(saved)
  assert restored.every == 3 and restored.due(7)
  restored.params(7, (graphdef, trainer))
  assert restored.state_dict() == {"every": 3, "last_sync_step": 7, "num_syncs": 4}


def test_copy_spec_errors():
  assert RolloutCopy.parse("bf16+w8a8+kv4+g32+noise0.01") == RolloutCopy(
      "w8a8", "bfloat16", 32, 4, 0.01)
  for bad, msg in (("w9a9", "unknown part"), ("kv3", "unknown part"),
                   ("none+g64", "group_size"), ("int8+noise-1", "noise")):
    with pytest.raises(ValueError, match=msg):
      RolloutCopy.parse(bad)
  with pytest.raises(ValueError, match="every"):
    SamplerSync("none", every=0)
  with pytest.raises(ValueError, match="does not divide"):
    fake_quant_weight(jnp.ones((1, 6, 4)), (1,), 8, group_size=4)
