"""Rollout correction in the step: the tokens in the loss under truncated scoring (normalizer,
CoRT normalization at μ = 1 and μ > 1), rejection in the step (baseline over the kept
responses, everything rejected), bypass vs decoupled π_old, and the refusals."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rljax.objectives import build_objective, cort_weights, CortConfig
from rljax.scoring import response_outputs
from rljax.train_step import init_state, jit_train_step, score_batch, tokens_in_loss
from rljax.train_step import apply_transforms
from rljax.update import jit_update_batch
from tests.test_train_step import G, N, make_batch, setup


def _flat(params):
  return np.concatenate([np.ravel(x) for x in jax.tree.leaves(params)])


def trainer_logp(graphdef, params, batch, sc):
  f = jax.jit(lambda p, t, m: response_outputs(graphdef, p, t, m, N, sc)["logp_BxT"])
  return np.asarray(f(params, batch["tokens_BxL"], batch["attn_mask_BxL"]))


def truncated_case(seed=0, b=8):
  """A batch of random response tokens: under trainer scoring truncated to the top 40 of 64
  ids (`top_k=40`), π_old = 0 on a good part of them (a support mismatch)."""
  return make_batch(b, seed)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_normalizer_counts_only_the_tokens_in_the_loss(agg):
  """Under truncated scoring the fused step's loss and gradient equal the loss evaluated on
  the tokens with a finite π_old only, normalized over them (they were normalized over every
  response token, shrinking the update by the kept fraction)."""
  graphdef, params, _, sc, obj = setup((), top_k=40)
  obj = dataclasses.replace(obj, loss_cfg=dataclasses.replace(obj.loss_cfg, agg=agg))
  sc = dataclasses.replace(sc, objective=obj)
  batch = truncated_case()
  logp = trainer_logp(graphdef, params, batch, sc)
  finite = np.isfinite(logp) & (batch["mask_BxN"] > 0)
  assert 0.3 < finite.sum() / batch["mask_BxN"].sum() < 0.9  # a real support mismatch
  opt = optax.sgd(1.0)  # the parameter change is the gradient
  state, m = jit_train_step(graphdef, opt, sc)(init_state(params, opt, obj), batch, None)
  assert float(m["actor/nonfinite_tokens"]) == batch["mask_BxN"].sum() - finite.sum()
  assert float(m["actor/tokens_in_loss"]) == finite.sum()

  def reference(p):  # the loss written out on the finite tokens, in NumPy-visible terms
    lp = response_outputs(graphdef, p, batch["tokens_BxL"], batch["attn_mask_BxL"], N, sc)
    lp = jnp.where(finite, lp["logp_BxT"], 0.0)
    ratio = jnp.exp(lp - jax.lax.stop_gradient(lp))  # = 1, gradient ∇log π
    a = batch["adv_B"][:, None] * finite
    tok = -ratio * a
    if agg == "token-mean":
      return (tok * finite).sum() / finite.sum()
    t_b = finite.sum(1)
    seqs = (t_b > 0).sum()
    if agg == "seq-mean-token-sum":
      return (tok * finite).sum() / seqs
    return ((tok * finite).sum(1) / np.maximum(t_b, 1)).sum() / seqs

  want_loss, want_grad = jax.value_and_grad(reference)(params)
  np.testing.assert_allclose(float(m["loss"]), float(want_loss), rtol=1e-5, atol=1e-7)
  step = _flat(params) - _flat(state.params)
  np.testing.assert_allclose(step, _flat(want_grad), rtol=1e-4, atol=1e-6)


def test_cort_weights_have_mean_one_over_the_tokens_in_the_loss_at_mu_1_and_mu_gt_1():
  """The μ > 1 path (score first, transforms once per batch) normalizes CoRT's weights over
  the same tokens as the fused μ = 1 step: per response mean 1 over the tokens in the loss."""
  graphdef, params, _, sc, obj = setup(("cort_no_ramp",), top_k=40)
  batch = truncated_case(1)
  sc_mb = dataclasses.replace(sc, fused_scoring=False)
  scores = score_batch(graphdef, params, batch, sc_mb)
  prepared, p_old, _ = tokens_in_loss(sc_mb, dict(batch, adv_B=np.ones(8, np.float32)),
                                      scores["old_logp_BxN"])
  w, _, _ = apply_transforms(obj.token_transform().init(), prepared,
                             dict(scores, old_logp_BxN=p_old), sc_mb)
  in_loss = np.asarray(prepared["mask_BxN"]) > 0
  assert in_loss.sum() < (batch["mask_BxN"] > 0).sum()
  w = np.asarray(w)
  for i in range(8):
    if in_loss[i].any():
      np.testing.assert_allclose(w[i][in_loss[i]].mean(), 1.0, rtol=1e-5)
  # the weights are CoRT's over exactly those tokens
  delta = np.asarray(scores["plus_logp_BxN"] - scores["minus_logp_BxN"])
  want, _ = cort_weights(jnp.asarray(delta), jnp.asarray(in_loss, jnp.float32), 1.0,
                         dataclasses.replace(CortConfig(), ramp=False))
  np.testing.assert_allclose(w[in_loss], np.asarray(want)[in_loss], rtol=1e-5)
  # and the fused μ = 1 step equals the score-first path with one update (same tokens, same
  # weights, same normalizer)
  opt = optax.sgd(1.0)
  fused, mf = jit_train_step(graphdef, opt, sc)(init_state(params, opt, obj), batch, None)
  split, ms = jit_update_batch(graphdef, opt, sc, epochs=1, num_minibatches=1)(
      init_state(params, opt, obj), batch, None, jax.random.key(0))
  np.testing.assert_allclose(_flat(fused.params), _flat(split.params), rtol=1e-5, atol=1e-7)
  assert float(mf["actor/tokens_in_loss"]) == float(ms["actor/tokens_in_loss"])


def test_rejected_responses_are_out_of_the_loss_and_of_the_baseline():
  graphdef, params, _, sc, _ = setup(())
  batch = make_batch(8)
  p = trainer_logp(graphdef, params, batch, sc)
  mask = batch["mask_BxN"]
  q = p.copy()
  q[1] -= 2.0  # rows 1 and 6 are far off the sampler: rejected by the sequence ratio
  q[6] += 3.0
  rewards = np.array([1, 0, 0.5, 0, 1, 1, 0, 0.25], np.float32)
  batch.update(sampler_logp_BxN=q, rewards_B=rewards)
  obj = build_objective(transforms=("rej_seq_prod",), num_generations=G)
  sc = dataclasses.replace(sc, objective=obj)
  out, _, m = jax.jit(lambda b, p: tokens_in_loss(sc, b, p))(batch, p)
  kept = np.ones(8, bool)
  kept[[1, 6]] = False
  np.testing.assert_array_equal(np.asarray(out["mask_BxN"]), mask * kept[:, None])
  assert float(m["transform/rej_seq_prod/num_seqs_rejected"]) == 2
  # the group advantage over the kept responses: group 0 = rows 0, 2, 3; group 1 = 4, 5, 7
  from tests.objectives.test_rejection import kept_reference
  np.testing.assert_allclose(np.asarray(out["adv_B"]), kept_reference(rewards, kept, G, "grpo"),
                             rtol=1e-5)
  assert float(m["adv/num_in_baseline"]) == 6
  # baseline="all": the rejected rewards stay in the baseline (the assembled advantages)
  obj_all = build_objective(transforms=("rej_seq_prod",), num_generations=G,
                            transform_kwargs={"rej_seq_prod": {"baseline": "all"}})
  out_all, _, _ = tokens_in_loss(dataclasses.replace(sc, objective=obj_all), batch, p)
  np.testing.assert_array_equal(np.asarray(out_all["adv_B"]), batch["adv_B"])
  np.testing.assert_array_equal(np.asarray(out_all["mask_BxN"]), mask * kept[:, None])


def test_a_batch_where_every_response_is_rejected_is_a_finite_no_op():
  graphdef, params, opt, sc, _ = setup(())
  batch = make_batch(8)
  batch["sampler_logp_BxN"] = trainer_logp(graphdef, params, batch, sc) + 10.0
  batch["rewards_B"] = np.arange(8, dtype=np.float32)
  obj = build_objective(transforms=("rej_veto",), num_generations=G)
  sc = dataclasses.replace(sc, objective=obj)
  state, m = jit_train_step(graphdef, opt, sc)(init_state(params, opt, obj), batch, None)
  assert all(np.isfinite(float(v)) for v in m.values())
  assert float(m["actor/update_skipped"]) == 0 and float(m["loss"]) == 0.0
  assert float(m["transform/rej_veto/num_seqs_rejected"]) == 8
  assert float(m["actor/tokens_in_loss"]) == 0
  np.testing.assert_array_equal(_flat(state.params), _flat(params))


def _quantized_q(batch, sc):
  """log q of the batch's tokens under a W8A8 + int4-KV copy of the trainer (`setup`'s model)."""
  from flax import nnx
  from rljax.models import create_model, params_dict
  from rljax.rollout.copies import make_sampler_params
  from tests.test_train_step import CFG
  sgraph, sstate = make_sampler_params(create_model(CFG, seed=0), "w8a8+kv4")
  return trainer_logp(sgraph, params_dict(nnx.merge(sgraph, sstate)), batch, sc)


def test_bypass_equals_decoupled_on_policy_and_moves_the_ratio_by_the_mismatch():
  graphdef, params, _, sc, obj = setup(())
  opt = optax.sgd(0.3)
  batch = make_batch(16)
  p = trainer_logp(graphdef, params, batch, sc)
  run = lambda policy, b: jit_update_batch(
      graphdef, opt, dataclasses.replace(sc, old_policy=policy), epochs=2, num_minibatches=2)(
          init_state(params, opt, obj), b, None, jax.random.key(0))
  on = dict(batch, sampler_logp_BxN=p)  # copy none: q = p
  (dec, md), (byp, mb) = run("decoupled", on), run("bypass", on)
  # π_old's log-probs come from the update's own forward (decoupled) or from `p`, computed by
  # another program (bypass): equal up to float32 rounding, which four SGD updates at lr 0.3
  # carry to ≈ 2e-8 on parameters (seen compiled with the classic fusion emitters; bitwise
  # equal with the MLIR ones). The updates themselves are ≈ 4e-4 (median) to 0.04.
  np.testing.assert_allclose(_flat(dec.params), _flat(byp.params), rtol=1e-6, atol=2e-7)
  np.testing.assert_allclose(float(md["loss"]), float(mb["loss"]), rtol=1e-5)
  # a quantized sampler: at the first update the PPO ratio is π_θ/π_old = 1 (decoupled) but
  # p/q under bypass — the measured mismatch
  q = _quantized_q(batch, sc)
  off = dict(batch, sampler_logp_BxN=q)
  one = lambda policy: jit_update_batch(
      graphdef, opt, dataclasses.replace(sc, old_policy=policy), epochs=1, num_minibatches=1)(
          init_state(params, opt, obj), off, None, jax.random.key(0))[1]
  m_dec, m_byp = one("decoupled"), one("bypass")
  mask = batch["mask_BxN"] > 0
  r = np.exp(p - q)[mask]
  assert abs(r.mean() - 1) > 1e-4  # the copy really differs
  np.testing.assert_allclose(float(m_dec["loss/ppo/ratio_mean"]), 1.0, atol=1e-6)
  np.testing.assert_allclose(float(m_byp["loss/ppo/ratio_mean"]), r.mean(), rtol=1e-5)
  np.testing.assert_allclose(float(m_byp["loss/ppo/ratio_max"]), r.max(), rtol=1e-5)
  np.testing.assert_allclose(float(m_dec["mismatch/kl_q_p"]),
                             np.mean(r - 1 - np.log(r)), rtol=1e-3, atol=1e-7)


def test_bypass_skips_one_forward():
  """μ = 2: the bypass update compiles to one x⁺ forward fewer (XLA's count; the update scan's
  body is counted once either way)."""
  graphdef, params, opt, sc, obj = setup(())
  batch = make_batch(16)
  state = init_state(params, opt, obj)

  def flops(policy):
    f = jit_update_batch(graphdef, opt, dataclasses.replace(sc, old_policy=policy), epochs=1,
                         num_minibatches=2)
    return f.lower(state, batch, None, jax.random.key(0)).compile().cost_analysis()["flops"]

  fwd = jax.jit(lambda p, t, m: response_outputs(graphdef, p, t, m, N, sc)["logp_BxT"]).lower(
      params, batch["tokens_BxL"], batch["attn_mask_BxL"]).compile().cost_analysis()["flops"]
  saved = flops("decoupled") - flops("bypass")
  assert 0.9 * fwd < saved < 1.1 * fwd, (saved, fwd)


def test_refusals():
  graphdef, params, opt, sc, obj = setup(())
  batch = make_batch(8)
  state = init_state(params, opt, obj)
  rej = build_objective(transforms=("rej",), num_generations=G)
  with pytest.raises(ValueError, match="grad_accum > 1"):
    jit_train_step(graphdef, opt, dataclasses.replace(sc, objective=rej), grad_accum=2)(
        init_state(params, opt, rej), dict(batch, rewards_B=np.zeros(8, np.float32)), None)
  with pytest.raises(ValueError, match="grad_accum > 1.*truncated"):
    jit_train_step(graphdef, opt, dataclasses.replace(sc, top_k=40), grad_accum=2)(
        state, batch, None)
  sc_obj = build_objective(loss="topk_sc", num_generations=G, sampler_topk=4)
  with pytest.raises(ValueError, match="truncated trainer distribution"):
    jit_train_step(graphdef, opt, dataclasses.replace(sc, objective=sc_obj, top_k=40, head_k=4))(
        init_state(params, opt, sc_obj), batch, None)


def test_oracle_credit_in_the_step_at_mu_1_and_mu_gt_1():
  """The batch's credit labels reach the transform in the fused μ = 1 step and in the
  score-first path, which give the same update and the same credit metrics."""
  graphdef, params, _, sc, _ = setup(())
  obj = build_objective(transforms=("oracle_credit",), num_generations=G,
                        transform_kwargs={"oracle_credit": {"factor": 3.0, "ramp": False}})
  sc = dataclasses.replace(sc, objective=obj)
  batch = make_batch(8, seed=2)
  rng = np.random.default_rng(0)
  batch["credit_label_BxN"] = (rng.random(batch["mask_BxN"].shape) < 0.25).astype(np.float32)
  opt = optax.sgd(1.0)
  fused, mf = jit_train_step(graphdef, opt, sc)(init_state(params, opt, obj), batch, None)
  split, ms = jit_update_batch(graphdef, opt, sc, epochs=1, num_minibatches=1)(
      init_state(params, opt, obj), batch, None, jax.random.key(0))
  np.testing.assert_allclose(_flat(fused.params), _flat(split.params), rtol=1e-5, atol=1e-7)
  for k in ("label_token_frac", "label_adv_share", "label_weight", "other_weight"):
    np.testing.assert_allclose(float(mf[f"transform/credit/{k}"]),
                               float(ms[f"transform/credit/{k}"]), rtol=1e-5)
  assert float(mf["transform/credit/label_weight"]) > 1.0
  grpo = build_objective(num_generations=G)
  plain, _ = jit_train_step(graphdef, opt, dataclasses.replace(sc, objective=grpo))(
      init_state(params, opt, grpo), batch, None)
  assert not np.allclose(_flat(plain.params), _flat(fused.params))  # the weights acted
