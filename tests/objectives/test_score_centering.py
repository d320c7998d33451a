"""SPEC §5: Score Centering golden numbers, drift-free expectations, top-k and α checks."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax import registry
from rljax.objectives import BPOConfig, Normalizer, binary_kl, bpo, bpo_weight
from rljax.objectives import centering_coefficients, importance_weights, ISConfig
from tests.objectives import policy

# golden / equivalence tests on float results: also run under another XLA:CPU ISA
# (tests/test_portability.py)
pytestmark = pytest.mark.numerics


def _loss(name, **kw):
  entry = registry.get("loss", name)
  return entry, entry.make_config(**kw)


def _enumerated_batch(logp_V, logq_V, adv_V, head_ids=None):
  """Row v samples token v (T = 1); every row shares the same prefix."""
  V = logp_V.shape[0]
  ids = jnp.arange(V) if head_ids is None else jnp.asarray(head_ids)
  K = ids.shape[0]
  pol = {"logp_BxT": logp_V[:, None],
         "head_logp_BxTxK": jnp.broadcast_to(logp_V[ids], (V, 1, K))}
  batch = {"mask_BxT": jnp.ones((V, 1)), "adv_BxT": adv_V[:, None],
           "old_logp_BxT": jax.lax.stop_gradient(logp_V)[:, None],
           "sampler_logp_BxT": logq_V[:, None],
           "head_logq_BxTxK": jnp.broadcast_to(logq_V[ids], (V, 1, K)),
           # counts of 1: every mode sums the V rows (T = 1)
           "normalizer": Normalizer(*(jnp.float32(1.0),) * 2, jnp.float32(V), jnp.float32(1.0))}
  return pol, batch


@functools.lru_cache(maxsize=None)
def _ascent_fn(name, logits_fn, head_ids, transform, kw):
  entry, cfg = _loss(name, **dict(kw))

  def total(params, logq_V, adv_V):
    logp_V = jax.nn.log_softmax(logits_fn(params))
    pol, batch = _enumerated_batch(logp_V, logq_V, adv_V, head_ids)
    if transform is not None:
      batch["adv_BxT"], _, _ = transform.update(batch["adv_BxT"], batch, transform.init())
    return entry(pol, batch, cfg)[0]

  return jax.jit(jax.grad(total))


def expected_ascent(name, logits_fn, params, q_V, Q_V, head_ids=None, transform=None, **kw):
  """−Σ_v q_v ∇L(v, A = Q_v): the expected ascent update under the sampler q.

  The losses are linear in A, so the q-weighting rides on the advantage.
  """
  head = None if head_ids is None else tuple(int(i) for i in head_ids)
  fn = _ascent_fn(name, logits_fn, head, transform, tuple(sorted(kw.items())))
  q_V = np.asarray(q_V, np.float64)
  logq_V = jnp.asarray(np.log(np.where(q_V > 0, q_V, 1.0)) + np.where(q_V > 0, 0, -np.inf),
                       jnp.float32)
  return -fn(params, logq_V, jnp.asarray(q_V * Q_V, jnp.float32))


# ----------------------------------------------------------- two actions

TWO = lambda th: jnp.stack([th, jnp.zeros_like(th)])  # p(A) = σ(θ)
THETA = jnp.float32(np.log(4.0))  # σ(θ) = 0.8
P2, Q2 = np.array([0.8, 0.2]), np.array([0.6, 0.4])


def test_two_action_golden_numbers():
  assert float(jax.nn.softmax(TWO(THETA))[0]) == pytest.approx(0.8)
  z = jax.jacobian(lambda th: jax.nn.log_softmax(TWO(th)))(THETA)
  np.testing.assert_allclose(z, [0.2, -0.8], atol=1e-6)
  ones = np.ones(2)
  m_q = expected_ascent("pg", TWO, THETA, Q2, ones)  # E_q[z]
  assert float(m_q) == pytest.approx(-0.2, abs=1e-6)
  Q = np.array([1.0, 0.0])
  v_q = float(Q2 @ Q)
  assert v_q * float(m_q) == pytest.approx(-0.12, abs=1e-6)  # drift V_q m_q
  assert float(expected_ascent("pg", TWO, THETA, P2, Q)) == pytest.approx(0.16, abs=1e-6)
  naive = float(expected_ascent("pg", TWO, THETA, Q2, Q))
  sc = float(expected_ascent("sc", TWO, THETA, Q2, Q))
  assert naive == pytest.approx(0.12, abs=1e-6)
  assert sc == pytest.approx(0.24, abs=1e-6)
  assert sc == pytest.approx(naive - v_q * float(m_q), abs=1e-6)  # SC = Cov_q(Q, z)
  Q = np.array([2.0, 1.0])
  assert float(expected_ascent("pg", TWO, THETA, Q2, Q)) == pytest.approx(-0.08, abs=1e-6)
  assert float(expected_ascent("sc", TWO, THETA, Q2, Q)) == pytest.approx(0.24, abs=1e-6)


def test_two_action_added_reward_sweep():
  for c in np.linspace(0.0, 1.0, 5):
    Q = np.array([1.0, 0.0]) + c
    assert float(expected_ascent("pg", TWO, THETA, P2, Q)) == pytest.approx(0.16, abs=1e-6)
    assert float(expected_ascent("sc", TWO, THETA, Q2, Q)) == pytest.approx(0.24, abs=1e-6)
    naive = float(expected_ascent("pg", TWO, THETA, Q2, Q))
    assert naive == pytest.approx(0.12 - 0.2 * c, abs=1e-6)  # 0.12 -> -0.08


# --------------------------------------------------------- three tokens

P3, Q3 = np.array([0.5, 0.25, 0.25]), np.array([0.25, 0.5, 0.25])
ELL = jnp.log(jnp.asarray(P3, jnp.float32))  # logits as parameters: z_a = e_a − p


def test_three_token_golden_numbers():
  no_mask = BPOConfig(smooth=0.0, cap=100.0, eps_low=100.0, eps_high=100.0)
  omega, _ = bpo_weight(jnp.log(P3), jnp.log(Q3), jnp.zeros(3), no_mask)
  np.testing.assert_allclose(omega, [1.5, 2 / 3, 1.0], rtol=1e-6)
  assert float(Q3 @ np.asarray(omega)) == pytest.approx(23 / 24, rel=1e-6)
  # E_q[ω z] through the project's BPO transform + naive PG loss.
  e_q_wz = expected_ascent("pg", lambda l: l, ELL, Q3, np.ones(3), transform=bpo(no_mask))
  np.testing.assert_allclose(e_q_wz, np.array([-10, 9, 1]) / 96, atol=1e-6)
  # Exact SC: the mean centered score is 0.
  # (float32 sums of O(1) terms: a few ulp, 1.2e-7 each, on any CPU's summation order)
  np.testing.assert_allclose(expected_ascent("sc", lambda l: l, ELL, Q3, np.ones(3)),
                             0.0, atol=1e-6)


def test_binary_kl_gradient_is_complementary_ratio():
  for a in range(3):
    g = jax.grad(lambda l: jax.nn.log_softmax(l)[a]
                 + binary_kl(jnp.log(Q3[a]), jax.nn.log_softmax(l)[a]))(ELL)
    z = np.eye(3)[a] - P3
    np.testing.assert_allclose(g, (1 - Q3[a]) / (1 - P3[a]) * z, atol=1e-6)


def test_bpo_sign_mask_and_cap():
  cfg = BPOConfig(smooth=0.1, cap=3.0, eps_low=0.2, eps_high=0.2)
  # p high, q low -> ω large: masked for A > 0, capped for A < 0.
  logp, logq = jnp.log(jnp.array([0.95, 0.95, 0.2, 0.2])), jnp.log(jnp.array([0.1, 0.1, 0.9, 0.9]))
  adv = jnp.array([1.0, -1.0, 1.0, -1.0])
  w, omega = bpo_weight(logp, logq, adv, cfg)
  np.testing.assert_allclose(omega[:2], (1.1 - 0.1) / (1.1 - 0.95), rtol=1e-5)
  np.testing.assert_allclose(omega[2:], (1.1 - 0.9) / (1.1 - 0.2), rtol=1e-5)
  np.testing.assert_allclose(w, [0.0, 3.0, omega[2], 0.0], rtol=1e-6)


# ----------------------------------- constant reward: expected gradient

V, D = 6, 3
RNG = np.random.default_rng(1)
X = jnp.asarray(RNG.normal(size=(D,)), jnp.float32)
W0 = jnp.asarray(RNG.normal(size=(V, D)), jnp.float32)
LIN = lambda W: W @ X
P6 = np.asarray(jax.nn.softmax(LIN(W0)), np.float64)
Q6 = np.asarray(jax.nn.softmax(LIN(W0) + 1.5 * jnp.asarray(RNG.normal(size=V))), np.float64)
HEAD = np.argsort(-Q6)[:3]
TAIL = np.setdiff1d(np.arange(V), HEAD)
Q_FILL = Q6.copy()  # sampler whose tail has the trainer's shape (top-k SC's model)
Q_FILL[TAIL] = (1 - Q6[HEAD].sum()) * P6[TAIL] / P6[TAIL].sum()
Q_TRUNC = np.where(np.isin(np.arange(V), HEAD), Q6, 0.0)  # top-k truncated sampler
Q_TRUNC /= Q_TRUNC.sum()
C = np.full(V, 0.7)  # a constant reward


def test_mismatch_is_strong_enough_to_matter():
  r = P6 / Q6
  assert (r > 2).any() and ((r < 0.5) | (r > 5)).any()


@pytest.mark.parametrize("name,q,head", [
    ("sc", Q6, None), ("sc_tis", Q6, None), ("sc_mis", Q6, None),
    ("topk_sc", Q_FILL, HEAD), ("topk_sc_tis", Q_FILL, HEAD),
    ("topk_sc_mis", Q_FILL, HEAD), ("topk_sc", Q_TRUNC, HEAD),
])
def test_sc_variants_have_zero_expected_gradient_under_constant_reward(name, q, head):
  g = expected_ascent(name, LIN, W0, q, C, head_ids=head)
  assert float(jnp.max(jnp.abs(g))) < 1e-6


@pytest.mark.parametrize("transform", [None, "tis", "mis"])
def test_uncentered_variants_drift_under_constant_reward(transform):
  t = None if transform is None else importance_weights(ISConfig(weight=transform))
  g = expected_ascent("pg", LIN, W0, Q6, C, transform=t)
  assert float(jnp.max(jnp.abs(g))) > 1e-2


def test_topk_sc_residual_drift_with_a_generic_sampler_tail():
  # With a tail not shaped like p, top-k SC leaves V_q (m_q − m̂_q) != 0 (SPEC §5 caveat).
  g = expected_ascent("topk_sc", LIN, W0, Q6, C, head_ids=HEAD)
  assert float(jnp.max(jnp.abs(g))) > 1e-4


# ------------------------------------------ top-k with k = V, α checks


@pytest.mark.parametrize("w", ["", "_tis", "_mis"])
def test_topk_sc_with_full_head_equals_exact_sc(w):
  prob = policy.make_problem(seed=3, full_head=True)
  batch = {k: jnp.asarray(v) for k, v in prob["batch"].items()}
  outs = []
  for name in (f"sc{w}", f"topk_sc{w}"):
    entry, cfg = _loss(name)
    f = lambda W: entry(policy.pol_from(W, prob["X"], prob["tokens"], prob["head_ids"]),
                        batch, cfg)[0]
    outs.append(jax.jit(jax.value_and_grad(f))(jnp.asarray(prob["W"])))
  (v0, g0), (v1, g1) = outs
  np.testing.assert_allclose(v1, v0, rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(g1, g0, rtol=1e-5, atol=1e-7)


def _head(seed=4):
  prob = policy.make_problem(seed=seed)
  pol = policy.pol_from(jnp.asarray(prob["W"]), prob["X"], prob["tokens"], prob["head_ids"])
  return pol["head_logp_BxTxK"], jnp.asarray(prob["batch"]["head_logq_BxTxK"])


def test_identity_weight_gives_alpha_one_and_zero_coefficients():
  head_logp, head_logq = _head()
  _, cfg = _loss("topk_sc", is_weight="is")
  coef, aux = centering_coefficients(head_logp, head_logq, jnp.isfinite(head_logq), cfg, True)
  assert bool(jnp.all(aux["has_tail"]))
  # float32 ratios and differences of probabilities ≤ 1: a few ulp (1.2e-7) in any order
  np.testing.assert_allclose(aux["alpha"], 1.0, rtol=1e-6)
  np.testing.assert_allclose(coef, 0.0, atol=1e-6)


def test_unit_weight_gives_alpha_rho():
  head_logp, head_logq = _head()
  _, cfg = _loss("topk_sc")
  coef, aux = centering_coefficients(head_logp, head_logq, jnp.isfinite(head_logq), cfg, True)
  np.testing.assert_allclose(aux["alpha"], aux["rho"], rtol=1e-6)  # float32: a few ulp
  p, q = jnp.exp(head_logp), jnp.exp(head_logq)
  rho = (1 - q.sum(-1)) / (1 - p.sum(-1))
  np.testing.assert_allclose(aux["rho"], rho, rtol=1e-5)
  np.testing.assert_allclose(coef, q - rho[..., None] * p, atol=1e-6)


def test_empty_head_slots_are_ignored():
  head_logp, head_logq = _head()
  _, cfg = _loss("topk_sc")
  valid = jnp.isfinite(head_logq)
  c0, _ = centering_coefficients(head_logp[..., :2], head_logq[..., :2], valid[..., :2], cfg, True)
  padded_q = head_logq.at[..., 2].set(-jnp.inf)
  c1, _ = centering_coefficients(head_logp, padded_q, jnp.isfinite(padded_q), cfg, True)
  # a sum over 3 slots against one over 2 (float32, values ≤ 1): a few ulp
  np.testing.assert_allclose(c1[..., :2], c0, atol=1e-6)
  np.testing.assert_allclose(c1[..., 2], 0.0, atol=0)  # structural: the empty slot is masked
