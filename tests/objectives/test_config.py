"""The config layer: registry-checked names, refused combinations, a jit-static Objective."""
import functools
import pathlib
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax import objectives, registry
from rljax.objectives import broadcast_advantage, build_objective, catalog, validate
from tests.objectives import policy


def build(**kw):
  kw.setdefault("num_generations", 4)
  return build_objective(**kw)


@pytest.mark.parametrize("kw,match", [
    (dict(advantage="ppo"), "valid advantage names: dr_grpo, grpo, rloo"),
    (dict(loss="ppo"), "valid loss names: dapo, grpo, gspo"),
    (dict(transforms=("cort", "tiss")), "valid transform names: bpo, cort"),
    (dict(loss_kwargs={"epsilon": 0.2}), "valid options: agg, beta"),
    (dict(loss_kwargs={"agg": "mean"}), "valid: seq-mean-token-mean"),
    (dict(loss_kwargs={"kl": "k4"}), "valid: k1, k2, k3"),
    (dict(loss_kwargs={"dual_clip": 0.5}), "dual_clip must be 0"),
    (dict(transforms="cort", transform_kwargs={"cort": {"eta": 3.0}}), "eta must be in"),
    (dict(transforms="cort_no_norm", transform_kwargs={"cort_no_norm": {"normalize": True}}),
     "fixed"),
    (dict(transform_kwargs={"cort": {}}), "not in the chain"),
    (dict(transforms=("tis", "tis")), "listed twice"),
    (dict(num_generations=0), "num_generations must be"),
    (dict(advantage="rloo", num_generations=1), "rloo needs group_size >= 2|rloo needs"),
    (dict(loss="real", transforms="cort"), "token reweighting"),
    (dict(loss="real", transforms="tis"), "token reweighting"),
    (dict(loss="topk_sc"), "top-k head"),
    (dict(loss="sc", sampler_topk=20, vocab_size=100), "full recorded q"),
    (dict(loss="sc_tis", sampler_topk=20), "full recorded q"),
    (dict(loss="sc", transforms="tis", sampler_topk=-1), "weighted score"),
    (dict(loss="topk_sc", transforms="bpo", sampler_topk=8), "weighted score"),
    (dict(transforms=("tis", "mis")), "applied twice"),
    (dict(loss="pg", transforms="tis", loss_kwargs={"is_weight": "tis"}), "keep one"),
    (dict(loss="grpo", loss_kwargs={"is_weight": "tis"}), "pg / SC losses only"),
    (dict(loss="gspo_token", transforms="mis_seq_geo"), "sequence-level IS"),
    (dict(loss="gspo_token", transforms="tis_seq_prod"), "sequence-level IS"),
    (dict(loss="gspo", transforms="cort"), "cancel exactly"),
    (dict(transforms=("tis", "cort_perturb_only")), "put it first"),
    (dict(loss="real", loss_kwargs={"group_size": 3}), "group_size must equal"),
])
def test_bad_configs_are_refused_with_a_reason(kw, match):
  with pytest.raises(ValueError, match=match):
    build(**kw)


def test_good_configs_and_warnings():
  with pytest.warns(UserWarning, match="forces scale_rewards='none'"):
    obj = build(loss="real")
  assert obj.advantage_cfg.scale_rewards == "none" and obj.loss_cfg.group_size == 4
  assert validate(loss="real", num_generations=4,
                  advantage_kwargs={"scale_rewards": "none"}) == []
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    build(loss="real", advantage="dr_grpo")  # already unscaled: no warning
    build(loss="gspo_token", transforms="tis")
    build(loss="gspo", transforms="cort_no_norm")
    build(loss="sc_mis", sampler_topk=-1)
    build(loss="sc", sampler_topk=100, vocab_size=100)
    build(loss="topk_sc_tis", sampler_topk=8)
    build(loss="pg", transforms="mis")
  assert any("without KL" in w for w in validate(loss="dapo", num_generations=4,
                                                 loss_kwargs={"beta": 0.1}))
  obj = build(loss="dapo", transforms="cort, bpo")
  assert [n for n, _ in obj.transforms] == ["cort", "bpo"]
  assert obj.loss_cfg.eps_high == 0.28 and obj.loss_cfg.agg == "token-mean"
  assert obj.transforms[1][1].eps_high == 0.28  # BPO's mask follows the PPO clip
  assert build(loss="gspo").loss_cfg.eps_low == 3e-4
  assert "`cort_perturb_only`" in catalog() and "`topk_sc_mis`" in catalog()


def test_objective_is_hashable_and_runs_as_a_jit_static_arg():
  kw = dict(advantage="grpo", transforms=("cort_no_ramp", "tis"), loss="grpo",
            loss_kwargs={"beta": 0.01, "entropy_coef": 0.01})
  obj = build(**kw)
  assert hash(obj) == hash(build(**kw)) and obj == build(**kw)
  prob = policy.make_problem(seed=0, B=8, T=3)
  b = {k: jnp.asarray(v) for k, v in prob["batch"].items()}
  b["logp_plus_BxT"] = b["old_logp_BxT"] + 0.5
  b["logp_minus_BxT"] = b["old_logp_BxT"] - jnp.arange(3.0)
  rewards = jnp.array([1.0, 0.0, 0.5, 0.5, 1.0, 1.0, 1.0, 1.0])

  @functools.partial(jax.jit, static_argnums=0)
  def step(obj, W, batch, state):
    adv_B, _ = obj.advantages(rewards)
    batch = dict(batch, adv_B=adv_B)
    t = obj.token_transform()
    adv_BxT, state, t_metrics = t.update(broadcast_advantage(adv_B, batch["mask_BxT"]),
                                         batch, state)
    batch["adv_BxT"] = adv_BxT

    def loss(W):
      pol = policy.pol_from(W, prob["X"], prob["tokens"], prob["head_ids"])
      return obj.loss_fn(pol, batch)

    (value, metrics), grad = jax.value_and_grad(loss, has_aux=True)(W)
    return value, grad, state, {**metrics, **t_metrics}

  value, grad, state, metrics = step(obj, jnp.asarray(prob["W"]), b,
                                     obj.token_transform().init())
  assert np.isfinite(float(value)) and bool(jnp.all(jnp.isfinite(grad)))
  assert int(state[0].step) == 1
  assert {"ppo/clip_frac", "loss/kl", "loss/entropy", "cort/weight_mean",
          "tis/weight_max"} <= set(metrics)


def test_readme_lists_every_registered_name():
  text = (pathlib.Path(objectives.__file__).parent / "README.md").read_text()
  for kind in ("advantage", "transform", "loss", "aggregation", "kl"):
    for name in registry.names(kind):
      assert f"`{name}`" in text, (kind, name)
