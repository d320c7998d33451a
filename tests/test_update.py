"""Multi-update PPO (rljax.update): whole groups per mini-batch, the clip acts with μ > 1,
REAL per mini-batch against the ms-swift formula, NaN-safe ratio."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rljax.scoring import response_outputs
from rljax.train_step import init_state, jit_train_step
from rljax.update import jit_update_batch, minibatch_rows
from tests.objectives.test_real import real_numpy
from tests.test_train_step import G, N, make_batch, setup


@pytest.mark.parametrize("m", [1, 2, 4])
def test_minibatches_hold_whole_groups_and_cover_every_group_per_epoch(m):
  rows = np.asarray(minibatch_rows(jax.random.key(3), 32, 4, epochs=3, num_minibatches=m))
  assert rows.shape == (3 * m, 32 // m)
  for e in range(3):
    epoch = rows[e * m:(e + 1) * m]
    assert sorted(epoch.ravel()) == list(range(32))  # each row once per epoch
    for mb in epoch:
      groups = mb.reshape(-1, 4)
      assert (groups == groups[:, :1] + np.arange(4)).all() and (groups[:, 0] % 4 == 0).all()
  assert not (rows[:m] == rows[m:2 * m]).all()  # a fresh permutation per epoch


def _flat(params):
  return np.concatenate([np.ravel(x) for x in jax.tree.leaves(params)])


def test_clip_acts_with_several_updates():
  """μ = 4 updates per batch: the ratio leaves 1 after the first mini-batch, the clip ranges
  (GRPO 0.2/0.2, GSPO 3e-4/4e-4, DAPO 0.2/0.28, same aggregation) act, and the three
  updates differ (with μ = 1 the ratio is exactly 1 and they coincide)."""
  out = {}
  for name in ("grpo", "gspo", "dapo"):
    graphdef, params, opt, sc, obj = setup((), loss=name, opt=optax.sgd(0.3))
    obj = dataclasses.replace(obj, loss_cfg=dataclasses.replace(
        obj.loss_cfg, agg="seq-mean-token-mean"))
    sc = dataclasses.replace(sc, objective=obj)
    f = jit_update_batch(graphdef, opt, sc, epochs=2, num_minibatches=2)
    state, metrics = f(init_state(params, opt, obj), make_batch(16), None, jax.random.key(0))
    out[name] = (_flat(state.params), metrics)
    assert float(metrics["actor/num_updates"]) == 4 and float(metrics["actor/approx_kl"]) > 0
    assert float(metrics["loss/ppo/clip_frac"]) > 0, name
  for a, b in (("grpo", "gspo"), ("grpo", "dapo"), ("gspo", "dapo")):
    assert np.abs(out[a][0] - out[b][0]).max() > 1e-6, (a, b)
  m = out["grpo"][1]
  assert float(m["loss/ppo/clip_frac_low"]) > 0 and float(m["loss/ppo/clip_frac_high"]) > 0


@pytest.mark.parametrize("m", [2, 4])
def test_real_minibatch_loss_is_the_ms_swift_formula(m):
  """Each of the μ updates sees whole groups, and its loss is the ms-swift REAL loss of that
  mini-batch (s̄ = mean_t log π_θ/π_old at the params of that update, / its own groups)."""
  batch = make_batch(16)
  batch["adv_B"] = np.array([1, -1, 0, 2, 1, 1, 1, 1, -1, 0.5, -2, 0, 0, 0, 3, 0], np.float32)
  graphdef, params, opt, sc, obj = setup((), loss="real", opt=optax.sgd(0.5))
  f = jit_update_batch(graphdef, opt, sc, epochs=2, num_minibatches=m, per_update=True)
  _, metrics = f(init_state(params, opt, obj), batch, None, jax.random.key(1))
  rows = np.asarray(minibatch_rows(jax.random.key(1), 16, G, 2, m))
  # replay the same μ updates one by one with the single step (host-side reference)
  logp = jax.jit(lambda p, t, k: response_outputs(graphdef, p, t, k, N, sc)["logp_BxT"])
  old = np.asarray(logp(params, batch["tokens_BxL"], batch["attn_mask_BxL"]))
  step = jit_train_step(graphdef, opt, dataclasses.replace(sc, fused_scoring=False))
  state = init_state(params, opt, obj)
  full = dict(batch, old_logp_BxN=old, adv_BxN=batch["adv_B"][:, None] * batch["mask_BxN"])
  for u, idx in enumerate(rows):
    assert (idx.reshape(-1, G) % G == np.arange(G)).all()  # whole groups
    mb = {k: np.asarray(v)[idx] for k, v in full.items()}
    cur = np.asarray(logp(state.params, mb["tokens_BxL"], mb["attn_mask_BxL"]))
    mask = mb["mask_BxN"]
    s = ((cur - mb["old_logp_BxN"]) * mask).sum(1) / mask.sum(1)
    want = real_numpy(s, mb["adv_B"], G, 0.5)
    np.testing.assert_allclose(float(metrics["per_update/loss"][u]), want, rtol=2e-5,
                               atol=1e-6)
    state, _ = step(state, mb, None)
  assert float(np.max(metrics["per_update/loss"])) > 0


def test_nonfinite_ratio_tokens_are_masked_and_counted_not_skipped():
  """Trainer scoring truncated to top-16 of 64 while the sampled tokens are random: log p =
  −inf on most tokens. The update uses the finite ones and counts the rest instead of skipping."""
  graphdef, params, opt, sc, obj = setup((), top_k=16)
  state, metrics = jit_train_step(graphdef, opt, sc)(init_state(params, opt, obj),
                                                       make_batch(16), None)
  assert float(metrics["actor/update_skipped"]) == 0 and int(state.num_skipped) == 0
  assert 0 < float(metrics["actor/nonfinite_tokens"]) < float(make_batch(16)["mask_BxN"].sum())
  assert all(np.isfinite(float(v)) for v in metrics.values())
  assert np.isfinite(_flat(state.params)).all()
  assert np.abs(_flat(state.params) - _flat(params)).max() > 0
