"""LoRA / QLoRA: the adapter forward against the merged weights, B = 0 against the full model
(loss and the chain rule through the full-weight gradient), the frozen base, QLoRA storage."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from rljax.models import create_model, params_dict, positions_from_mask
from rljax.models.decoder import Decoder
from rljax.models.lora import (LoraConfig, adapter_shapes, init_adapters, merge, nbytes,
                               quantize_base)
from rljax.train_step import init_state, jit_train_step
from tests.test_train_step import CFG, make_batch, setup

LORA = LoraConfig(rank=4, alpha=8.0)


def lora_graphdef(lora=LORA, cfg=CFG):
  return nnx.split(nnx.eval_shape(lambda: Decoder(cfg, nnx.Rngs(0), lora=lora)))[0]


def random_adapters(lora=LORA, seed=1, scale=0.1):
  """Adapters with B != 0 (a trained state)."""
  ad = init_adapters(CFG, lora, seed=seed)
  key = jax.random.key(seed + 100)
  return {n: {"a": ab["a"], "b": scale * jax.random.normal(jax.random.fold_in(key, i),
                                                           ab["b"].shape)}
          for i, (n, ab) in enumerate(ad.items())}


@jax.jit(static_argnums=0)
def logits(graphdef, params, tokens, mask, adapters=None):
  model = nnx.merge(graphdef, params)
  h, _ = model(tokens, positions_from_mask(mask), mask, adapters=adapters)
  return model.logits(h)


def mean_logp(graphdef, params, batch, adapters=None):
  """Mean log-probability of the batch's response tokens."""
  tok, mask = batch["tokens_BxL"], batch["attn_mask_BxL"]
  lp = jax.nn.log_softmax(logits(graphdef, params, tok, mask, adapters), -1)
  n = batch["mask_BxN"].shape[1]
  got = jnp.take_along_axis(lp[:, -n - 1:-1], tok[:, -n:, None], -1)[..., 0]
  return float((got * batch["mask_BxN"]).sum() / batch["mask_BxN"].sum())


def test_config_names_and_shapes():
  assert LORA.names == ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")
  assert LoraConfig(rank=2, targets="w[qv]").names == ("wq", "wv")
  assert LoraConfig(rank=8, alpha=16).scale == 2.0
  s = adapter_shapes(CFG, LORA)
  assert s["wq"]["a"].shape == (2, 32, 4) and s["wq"]["b"].shape == (2, 4, 4 * 8)
  assert s["wo"]["a"].shape == (2, 32, 4) and s["w_down"]["a"].shape == (2, 64, 4)
  for bad, msg in [(dict(rank=0), "rank"), (dict(rank=4, targets="lm_head"), "matches no"),
                   (dict(rank=4, base_bits=2), "base_bits"), (dict(rank=4, targets="("), "regex")]:
    with pytest.raises(ValueError, match=msg):
      LoraConfig(**bad)


@pytest.mark.numerics
@pytest.mark.parametrize("targets", [LORA.targets, "wq|wv|w_down"])
def test_adapter_forward_equals_merged_weights(targets):
  lora = LoraConfig(rank=4, alpha=8.0, targets=targets)
  params = params_dict(create_model(CFG, seed=0))
  ad = random_adapters(lora)
  b = make_batch()
  tokens, mask = b["tokens_BxL"], b["attn_mask_BxL"]
  via_adapters = logits(lora_graphdef(lora), params, tokens, mask, ad)
  plain = nnx.split(create_model(CFG, seed=0))[0]
  via_merged = logits(plain, merge(params, ad, lora), tokens, mask)
  base = logits(plain, params, tokens, mask)
  np.testing.assert_allclose(via_adapters, via_merged, rtol=1e-5, atol=1e-5)
  assert float(jnp.max(jnp.abs(via_adapters - base))) > 1e-2  # the adapters do something


@pytest.mark.numerics
def test_b0_step_equals_full_model_step_by_the_chain_rule():
  """With B = 0: the same loss; the adapters' gradients are the chain rule through the
  full-weight gradient G: dA = s G Bᵀ = 0, dB = s Aᵀ G (SGD(1): the change is -grad)."""
  sgd = optax.sgd(1.0)
  graphdef, params, _, sc, obj = setup(opt=sgd)
  batch = make_batch()
  full, m_full = jit_train_step(graphdef, sgd, sc)(init_state(params, sgd, obj), batch, None)
  grad_full = jax.tree.map(lambda new, old: old - new, full.params, params)
  ad = init_adapters(CFG, LORA, seed=3)
  sc_l = dataclasses.replace(sc, lora=True)
  new, m_lora = jit_train_step(lora_graphdef(), sgd, sc_l)(init_state(ad, sgd, obj), batch,
                                                           params)
  # float32 means over the batch's tokens, summed in another order by the adapter path's
  # fusions: a few ulps of each term, ≈ 1e-6 relative on some CPUs
  np.testing.assert_allclose(m_lora["loss"], m_full["loss"], rtol=1e-5)
  for k in ("transform/cort/weight_mean", "cort/delta_abs_mean", "actor/entropy"):
    np.testing.assert_allclose(m_lora[k], m_full[k], rtol=1e-5)
  for n in LORA.names:
    g = np.asarray(grad_full["layers"][n]).reshape(CFG.num_layers, ad[n]["a"].shape[1], -1)
    a = np.asarray(ad[n]["a"])
    want_b = LORA.scale * np.einsum("lir,lio->lro", a, g)
    got_b = np.asarray(ad[n]["b"] - new.params[n]["b"])
    np.testing.assert_allclose(got_b, want_b, rtol=1e-5, atol=1e-5 * np.abs(want_b).max())
    np.testing.assert_array_equal(np.asarray(new.params[n]["a"]), a)  # dA = s G Bᵀ = 0
  assert np.abs(want_b).max() > 1e-4  # a gradient that can be wrong


def test_base_untouched_and_no_state_for_it():
  """The optimizer state covers the adapters only; the base arrays are read, never written
  (bit-identical after several AdamW steps)."""
  graphdef, params, opt, sc, obj = setup()
  before = jax.tree.map(np.asarray, params)
  ad = init_adapters(CFG, LORA, seed=3)
  step = jit_train_step(lora_graphdef(), opt, dataclasses.replace(sc, lora=True))
  state = init_state(ad, opt, obj)
  assert nbytes(state.opt_state) <= 2 * nbytes(ad) + 64  # two moments of the adapters
  for i in range(3):
    state, m = step(state, make_batch(seed=i), params)
    assert m["actor/update_skipped"] == 0
  for x, y in zip(jax.tree.leaves(before), jax.tree.leaves(params)):
    np.testing.assert_array_equal(x, np.asarray(y))
  assert float(jnp.abs(state.params["wq"]["b"]).max()) > 0


def test_missing_base_is_refused():
  graphdef, params, opt, sc, obj = setup()
  step = jit_train_step(lora_graphdef(), opt, dataclasses.replace(sc, lora=True))
  with pytest.raises(ValueError, match="frozen base as ref_params"):
    step(init_state(init_adapters(CFG, LORA), opt, obj), make_batch(), None)


@pytest.mark.parametrize("bits", [8, 4])
def test_qlora_base_is_integer_and_close_to_the_float_base(bits):
  """The base (projections, embedding) stored as int8 / packed int4 with per-channel scales:
  ≤ 0.3x (int8) / ≤ 0.17x (int4) the float base's bytes; the likelihood within its
  quantization error."""
  params = params_dict(create_model(CFG, seed=0))
  lora = LoraConfig(rank=4, alpha=8.0, base_bits=bits)
  base = quantize_base(params, bits)
  names = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")
  for n in names:
    assert base["layers"][n].dtype == jnp.int8
  assert base["embed"].dtype == jnp.int8 and base["embed_scale"].shape == (CFG.vocab_size, 1)
  assert nbytes(base) <= (0.3 if bits == 8 else 0.17) * nbytes(params), (nbytes(base),
                                                                          nbytes(params))
  # the QLoRA decoder dequantizes in the matmul: equal to the float model of the rounded base
  b = make_batch()
  q_logits = logits(lora_graphdef(lora), base, b["tokens_BxL"], b["attn_mask_BxL"])
  plain = nnx.split(create_model(CFG, seed=0))[0]
  deq = merge(base, None, lora)
  np.testing.assert_allclose(q_logits, logits(plain, deq, b["tokens_BxL"], b["attn_mask_BxL"]),
                             rtol=1e-5, atol=1e-5)
  # the log-likelihood moves by about the quantization error of the weights
  rel_w = max(float(jnp.abs(deq["layers"][n] - params["layers"][n]).max()
                    / jnp.abs(params["layers"][n]).max()) for n in names)
  rel_w = max(rel_w, float(jnp.abs(deq["embed"] - params["embed"]).max()
                           / jnp.abs(params["embed"]).max()))
  assert 0 < rel_w < {8: 0.01, 4: 0.1}[bits]
  lp_q, lp_f = mean_logp(lora_graphdef(lora), base, b), mean_logp(plain, params, b)
  assert 0 < abs(lp_q - lp_f) < 4 * rel_w * abs(lp_f), (lp_q, lp_f, rel_w)
