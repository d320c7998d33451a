"""Sharded forward / logprob + gradient equal unsharded, on 8 fake CPU devices."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

from rljax import sharding as shd
from rljax.logprobs import token_logprobs
from rljax.models import create_model, load_model, model_shardings, params_dict, positions_from_mask
from rljax.models.config import ModelConfig
from tests.models.hf_fixtures import make_hf_model

TINY = ModelConfig(model_type="qwen3", vocab_size=64, hidden_size=32, intermediate_size=64,
                   num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8, qk_norm=True)


def _batch(b=8, t=10, seed=0):
  rng = np.random.RandomState(seed)
  ids = rng.randint(0, TINY.vocab_size, (b, t)).astype(np.int32)
  mask = np.ones((b, t), np.int32)
  mask[::2, :3] = 0
  return jnp.asarray(ids), jnp.asarray(mask)


def _loss_and_grad(model, ids, mask):
  graphdef, state = nnx.split(model)

  @jax.jit
  def f(state, ids, mask):
    def loss(state):
      m = nnx.merge(graphdef, state)
      h, _ = m(ids, positions_from_mask(mask), mask)
      out = token_logprobs(h[:, :-1], m.unembed_DxV(), ids[:, 1:], chunk_size=16)
      lp = out["logp_BxT"] * mask[:, 1:]
      return lp.sum() / mask[:, 1:].sum(), (h, out["logp_BxT"])
    (l, aux), g = jax.value_and_grad(loss, has_aux=True)(state)
    return l, aux, g

  return f(state, ids, mask)


def test_mesh_helper_errors():
  assert len(jax.devices()) == 8
  with pytest.raises(ValueError, match="needs 6 devices, but 8"):
    shd.make_mesh((2, 3, 1))
  assert dict(shd.make_mesh((2, 4)).shape) == {"data": 2, "fsdp": 4, "tensor": 1}
  assert dict(shd.make_mesh((2, -1, 2)).shape) == {"data": 2, "fsdp": 2, "tensor": 2}


def test_rules_map_every_param_and_drop_nondividing_axes():
  mesh = shd.make_mesh((1, 2, 4))
  sh = model_shardings(TINY, mesh)
  assert sh["layers"]["wq"].spec == P(None, "fsdp", "tensor", None)
  assert sh["layers"]["wk"].spec == P(None, "fsdp", None, None)  # 2 kv heads over tensor=4
  assert sh["embed"].spec == P("tensor", "fsdp")


@pytest.mark.parametrize("mesh_shape", [(2, 4, 1), (8, 1, 1), (1, 2, 4)])
def test_sharded_equals_unsharded(mesh_shape):
  ids, mask = _batch()
  ref_model = create_model(TINY, seed=3)
  l0, (h0, lp0), g0 = _loss_and_grad(ref_model, ids, mask)

  mesh = shd.make_mesh(mesh_shape)
  model = create_model(TINY, mesh=mesh, seed=3)
  for path, leaf in jax.tree_util.tree_leaves_with_path(params_dict(model)):
    assert isinstance(leaf.sharding, NamedSharding)
  # created directly in shards: no device holds a whole wq when it is split
  wq = model.layers.wq[...]
  if mesh.shape["tensor"] * mesh.shape["fsdp"] > 1:
    assert wq.addressable_shards[0].data.size < wq.size
  ids_s = jax.device_put(ids, shd.batch_sharding(mesh, ids.shape))
  mask_s = jax.device_put(mask, shd.batch_sharding(mesh, ids.shape))
  l1, (h1, lp1), g1 = _loss_and_grad(model, ids_s, mask_s)
  m = np.asarray(mask).astype(bool)
  np.testing.assert_allclose(np.asarray(h1)[m], np.asarray(h0)[m], atol=1e-5, rtol=1e-5)
  np.testing.assert_allclose(lp1, lp0, atol=1e-5, rtol=1e-5)
  np.testing.assert_allclose(l1, l0, atol=1e-5, rtol=1e-5)
  for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g0)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5, rtol=1e-4)


def test_load_directly_into_shardings(tmp_path):
  make_hf_model("qwen3_qk_norm", str(tmp_path))
  mesh = shd.make_mesh((1, 2, 4))
  sharded = load_model(str(tmp_path), mesh=mesh)
  plain = load_model(str(tmp_path))
  w = sharded.layers.w_gate[...]
  assert w.sharding.spec == P(None, "fsdp", "tensor")
  assert w.addressable_shards[0].data.shape == (2, 32, 24)
  np.testing.assert_array_equal(np.asarray(w), np.asarray(plain.layers.w_gate[...]))


def test_train_state_moments_are_sharded_like_their_params():
  """Left to XLA, Adam's zeros_like moments come out replicated: 2x the params per chip."""
  import optax
  from rljax.train_step import init_state
  from rljax.objectives import build_objective
  mesh = shd.make_mesh((1, 8, 1))
  params = {"layers": {"w_up": jax.device_put(jnp.ones((2, 16, 8)), NamedSharding(
      mesh, P(None, "fsdp", None)))}, "final_norm": jax.device_put(jnp.ones((16,)),
                                                                  NamedSharding(mesh, P()))}
  opt = optax.adamw(1e-3)
  obj = build_objective(advantage="grpo", transforms=(), loss="grpo", num_generations=2)
  init = lambda p: init_state(p, opt, obj)
  state = shd.init_sharded(init, params, mesh)
  mu = state.opt_state[0].mu["layers"]["w_up"]
  assert mu.sharding.spec == P(None, "fsdp", None)
  assert state.params["layers"]["w_up"].sharding.spec == P(None, "fsdp", None)
  assert state.opt_state[0].count.sharding.is_fully_replicated
  assert shd.state_shardings(init, params, mesh).opt_state[0].nu["final_norm"].spec == P()
