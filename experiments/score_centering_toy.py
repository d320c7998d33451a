"""Study 1 — Score Centering, analytic (SPEC §5), from the project's own losses.

    python -m experiments.score_centering_toy [--quick] [--out DIR]

(a) Two actions, scalar logit θ, p(A) = σ(θ) = 0.8, sampler q(A) = 0.6, rewards (1, 0) + c:
    on-policy E_p[Qz], naive E_q[Qz] and SC for c in [0, 1] (SPEC: 0.16, 0.12 → −0.08, 0.24).
(b) Three tokens, logits as parameters, p = (½, ¼, ¼), q = (¼, ½, ¼): BPO's complementary
    weight ω = (1 + ε − q)/(1 + ε − p) with ε = 0, no cap, no mask gives ω = (3/2, 2/3, 1),
    Σ q ω = 23/24 and E_q[ω z] = (−10, 9, 1)/96 ≠ 0, while exact SC's mean score is 0;
    also the practical BPO (ε = 0.1, C = 3, sign mask) and every other estimator.
(c) Top-k SC's residual drift for a generic sampler tail: V = 256, trainer logits ℓ, sampler
    logits ℓ + σ ε, constant reward A = 1; the expected update Σ_a q_a(−∇L(a)) in logit space
    for k = 1 … V, against naive PG's drift and the bound 2·(sampler tail mass); and the
    control where the sampler's tail has the trainer's shape (drift 0).
Every expectation is a brute-force sum over actions through the library loss; the closed
form used by the mismatch study (`estimators.expected_ascent_logits`) is checked against it.
"""
from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np

from experiments import common
from experiments.estimators import ESTIMATORS, brute_force_ascent_logits, expected_ascent_logits

STUDY = "score_centering"
P2, Q2 = np.array([0.8, 0.2]), np.array([0.6, 0.4])


def two_action(loss: str, sampler, rewards) -> float:
  """−Σ_a s_a ∂L(a, A = Q_a)/∂θ for a scalar logit θ (p(A) = σ(θ))."""
  # scalar θ: logits (θ, 0); the ascent along θ is the first logit's component
  logits = jnp.array([np.log(4.0), 0.0], jnp.float32)
  name = {"pg": "PG", "sc": "SC"}[loss]
  logq = jnp.log(jnp.asarray(sampler, jnp.float32))
  # the reward differs per action: sum q_a · (−∂L(a)/∂θ) one action at a time
  return float(sum(_ascent_one_action(name, logits, logq, a, float(r))
                   for a, r in enumerate(rewards)))


def _ascent_one_action(name, logits, logq, a: int, reward: float) -> float:
  """q_a · (−∂L(a)/∂θ) with advantage `reward`, θ = the first logit."""
  from rljax.objectives import Normalizer
  from experiments.estimators import surrogate

  def loss(theta):
    lg = jnp.stack([theta, logits[1]])
    logp = jax.nn.log_softmax(lg)
    pol = {"logp_BxT": logp[a][None, None], "head_logp_BxTxK": logp[None, None]}
    batch = {"mask_BxT": jnp.ones((1, 1)), "adv_BxT": jnp.full((1, 1), reward),
             "old_logp_BxT": jax.lax.stop_gradient(logp[a])[None, None],
             "sampler_logp_BxT": logq[a][None, None],
             "head_logq_BxTxK": logq[None, None], "head_ids_BxTxK": jnp.arange(2)[None, None],
             "normalizer": Normalizer(*(jnp.float32(1),) * 4)}
    return surrogate(name, pol, batch)

  return float(jnp.exp(logq[a]) * -jax.grad(loss)(logits[0]))


def part_a() -> dict:
  cs = np.linspace(0.0, 1.0, 5)
  rows = []
  for c in cs:
    q_r = np.array([1.0, 0.0]) + c
    rows.append({"c": float(c), "on_policy": two_action("pg", P2, q_r),
                 "naive": two_action("pg", Q2, q_r), "sc": two_action("sc", Q2, q_r)})
  return {"rows": rows, "spec": {"on_policy": 0.16, "sc": 0.24, "naive": [0.12, -0.08]}}


def part_b() -> dict:
  from rljax.objectives import BPOConfig, bpo_weight
  p, q = np.array([0.5, 0.25, 0.25]), np.array([0.25, 0.5, 0.25])
  logp, logq = jnp.log(jnp.asarray(p, jnp.float32)), jnp.log(jnp.asarray(q, jnp.float32))
  raw = BPOConfig(smooth=0.0, cap=1e9, eps_low=0.999, eps_high=1e9)
  omega, _ = bpo_weight(logp, logq, jnp.ones(3), raw)
  omega = np.asarray(omega, np.float64)
  z_mean = q * omega - np.sum(q * omega) * p  # E_q[ω z] with z_a = e_a − p
  out = {"p": p, "q": q, "omega": omega, "sum_q_omega": float(np.sum(q * omega)),
         "E_q_omega_z": z_mean, "E_q_omega_z_times_96": z_mean * 96,
         "spec": {"omega": [1.5, 2 / 3, 1.0], "sum_q_omega": 23 / 24,
                  "E_q_omega_z_times_96": [-10, 9, 1]}}
  for a in (1.0, -1.0):  # every estimator through the library loss, constant reward ±1
    out[f"constant_reward_{a:+.0f}"] = {
        n: np.asarray(brute_force_ascent_logits(n, logp, logq, a, k=2)) for n in ESTIMATORS}
  return out


def generic_pair(rng, v: int, sigma: float):
  logits = 3.0 * rng.gumbel(size=v)
  return (jnp.asarray(logits, jnp.float32),
          jax.nn.log_softmax(jnp.asarray(logits + sigma * rng.normal(size=v), jnp.float32)))


def trainer_shaped_tail(logits, logq, k: int):
  """(log q', H): q with its top-k head H kept and the tail replaced by ρ·p, the case where
  top-k SC is exact (H is passed as the recorded head: ρ·p may outrank a head entry)."""
  p, q = jax.nn.softmax(logits), jnp.exp(logq)
  ids = jax.lax.top_k(logq, k)[1]
  head = jnp.zeros_like(q, bool).at[ids].set(True)
  rho = jnp.sum(jnp.where(head, 0.0, q)) / jnp.sum(jnp.where(head, 0.0, p))
  return jnp.log(jnp.where(head, q, rho * p)), ids


def part_c(n_draws: int, ks, sigmas, v: int, seed: int) -> dict:
  rows, check = [], 0.0
  for sigma in sigmas:
    rng = np.random.default_rng([seed, int(sigma * 1000)])
    pairs = [generic_pair(rng, v, sigma) for _ in range(n_draws)]
    naive = [float(jnp.linalg.norm(brute_force_ascent_logits("PG", l, lq, 1.0))) for l, lq in pairs]
    for k in ks:
      topk, bound, tail, ctrl, exact_sc = [], [], [], [], []
      for l, lq in pairs:
        bf = brute_force_ascent_logits("top-k SC", l, lq, 1.0, k=k)
        rb = expected_ascent_logits("top-k SC", jax.nn.log_softmax(l)[None], lq[None],
                                    jnp.ones(1), k=k)[0]
        check = max(check, float(jnp.max(jnp.abs(bf - rb))))
        topk.append(float(jnp.linalg.norm(bf)))
        t = 1.0 - float(jnp.sum(jax.lax.top_k(jnp.exp(lq), k)[0]))
        tail.append(t)
        bound.append(2 * max(t, 0.0))
        lq_shaped, ids = trainer_shaped_tail(l, lq, k)
        ctrl.append(float(jnp.linalg.norm(brute_force_ascent_logits(
            "top-k SC", l, lq_shaped, 1.0, k=k, ids_K=ids))))
        exact_sc.append(float(jnp.linalg.norm(brute_force_ascent_logits("SC", l, lq, 1.0))))
      rows.append({"sigma": sigma, "k": k, "tail_mass_q": common.mean_ci(tail),
                   "topk_sc_drift": common.mean_ci(topk), "naive_pg_drift": common.mean_ci(naive),
                   "ratio_to_naive": common.mean_ci(np.array(topk) / np.array(naive)),
                   "bound_2_tail_q": common.mean_ci(bound),
                   "max_over_draws_drift_minus_bound": float(np.max(np.array(topk) - bound)),
                   "trainer_shaped_tail_drift": common.mean_ci(ctrl),
                   "exact_sc_drift": common.mean_ci(exact_sc)})
  return {"rows": rows, "closed_form_vs_brute_force_max_abs": check}


def all_estimators(n_draws: int, v: int, sigma: float, k: int, seed: int) -> dict:
  rng = np.random.default_rng([seed, 7])
  norms = {n: [] for n in ESTIMATORS}
  check = 0.0
  for _ in range(n_draws):
    l, lq = generic_pair(rng, v, sigma)
    for n in ESTIMATORS:
      bf = brute_force_ascent_logits(n, l, lq, 1.0, k=k)
      rb = expected_ascent_logits(n, jax.nn.log_softmax(l)[None], lq[None], jnp.ones(1), k=k)[0]
      check = max(check, float(jnp.max(jnp.abs(bf - rb))))
      norms[n].append(float(jnp.linalg.norm(bf)))
  return {"sigma": sigma, "k": k, "v": v,
          "drift_norm": {n: common.mean_ci(x) for n, x in norms.items()},
          "closed_form_vs_brute_force_max_abs": check}


def figures(res: dict, out: str) -> list[str]:
  plt = common.pyplot()
  paths = []
  fig, ax = plt.subplots(figsize=(5, 3.6))
  rows = res["two_action"]["rows"]
  cs = [r["c"] for r in rows]
  for key, lab in (("on_policy", "on-policy $E_p[Qz]$"), ("naive", "naive off-policy $E_q[Qz]$"),
                   ("sc", "Score Centering")):
    ax.plot(cs, [r[key] for r in rows], marker="o", label=lab)
  ax.axhline(0, color="k", lw=0.6)
  common.finish_axes(ax, "reward added to both actions, c (reward units)",
                     "expected ascent along θ (per unit reward)",
                     "Two actions: p(A)=0.8, q(A)=0.6")
  fig.tight_layout()
  paths.append(f"{out}/two_action_shift.png")
  fig.savefig(paths[-1])
  plt.close(fig)
  fig, ax = plt.subplots(figsize=(5.6, 3.8))
  for sigma in sorted({r["sigma"] for r in res["topk_residual"]["rows"]}):
    rs = [r for r in res["topk_residual"]["rows"] if r["sigma"] == sigma]
    ks = [r["k"] for r in rs]
    m = np.array([r["topk_sc_drift"]["mean"] for r in rs])
    lo = np.array([r["topk_sc_drift"]["ci95"][0] for r in rs])
    hi = np.array([r["topk_sc_drift"]["ci95"][1] for r in rs])
    line, = ax.plot(ks, np.maximum(m, 1e-12), marker="o", label=f"top-k SC, σ={sigma}")
    ax.fill_between(ks, np.maximum(lo, 1e-12), np.maximum(hi, 1e-12), color=line.get_color(),
                    alpha=0.2)
    ax.plot(ks, [r["naive_pg_drift"]["mean"] for r in rs], ls="--", color=line.get_color(),
            label=f"naive PG, σ={sigma}")
    ax.plot(ks, [r["bound_2_tail_q"]["mean"] for r in rs], ls=":", color=line.get_color(),
            label=f"bound 2·tail mass, σ={sigma}")
  ax.set_xscale("log", base=2)
  ax.set_yscale("log")
  common.finish_axes(ax, "recorded head size k (tokens; V = 256)",
                     "‖E[update]‖, constant reward (logit space)",
                     "Top-k SC residual drift, generic sampler tail")
  fig.tight_layout()
  paths.append(f"{out}/topk_residual_drift.png")
  fig.savefig(paths[-1])
  plt.close(fig)
  return paths


def tables(res: dict) -> str:
  a = res["two_action"]
  s = "## (a) Two actions (SPEC §5)\n\n" + common.md_table(
      ["added reward c", "on-policy", "naive", "SC"],
      [[r["c"], r["on_policy"], r["naive"], r["sc"]] for r in a["rows"]])
  b = res["three_token"]
  s += "\n## (b) Three tokens, BPO's complementary weight (ε = 0, no cap, no mask)\n\n"
  s += common.md_table(["quantity", "measured", "SPEC"], [
      ["ω", np.round(b["omega"], 6).tolist(), "(3/2, 2/3, 1)"],
      ["Σ q ω", b["sum_q_omega"], "23/24 = 0.958333"],
      ["96 · E_q[ω z]", np.round(b["E_q_omega_z_times_96"], 5).tolist(), "(−10, 9, 1)"]])
  s += "\nExpected update Σ_a q_a(−∇L(a)) under a constant reward A = +1 (logit space), every " \
       "estimator (library loss, practical BPO: ε = 0.1, C = 3, sign mask; top-k with k = 2):\n\n"
  s += common.md_table(["estimator", "A = +1", "A = −1"], [
      [n, np.round(np.asarray(b["constant_reward_+1"][n], np.float64), 5).tolist(),
       np.round(np.asarray(b["constant_reward_-1"][n], np.float64), 5).tolist()]
      for n in ESTIMATORS])
  c = res["topk_residual"]
  s += ("\n## (c) Top-k SC residual drift, generic sampler tail (V = 256, constant reward)\n\n"
        f"n = {res['config']['n_draws']} random (p, q) pairs per σ; mean [95% bootstrap CI]; "
        "norms in logit space. Closed form vs brute force: max |Δ| = "
        f"{c['closed_form_vs_brute_force_max_abs']:.2e}.\n\n")
  ci = lambda d: f"{d['mean']:.3g} [{d['ci95'][0]:.3g}, {d['ci95'][1]:.3g}]"
  s += common.md_table(
      ["σ", "k", "sampler tail mass", "top-k SC drift", "naive PG drift", "top-k/naive",
       "bound 2·tail", "trainer-shaped tail", "exact SC"],
      [[r["sigma"], r["k"], ci(r["tail_mass_q"]), ci(r["topk_sc_drift"]),
        ci(r["naive_pg_drift"]), ci(r["ratio_to_naive"]), ci(r["bound_2_tail_q"]),
        f"{r['trainer_shaped_tail_drift']['mean']:.2g}", f"{r['exact_sc_drift']['mean']:.2g}"]
       for r in c["rows"]])
  e = res["all_estimators"]
  s += (f"\n## (d) Every estimator, generic pair (V = {e['v']}, σ = {e['sigma']}, top-k k = "
        f"{e['k']}), constant reward A = 1\n\n")
  s += common.md_table(["estimator", "‖expected update‖ mean [95% CI]"],
                       [[n, ci(d)] for n, d in e["drift_norm"].items()])
  return s


def run(out: str, quick: bool = False, seed: int = 0) -> dict:
  timer = common.Timer()
  cfg = {"n_draws": 4 if quick else 32, "v": 256, "sigmas": [0.3, 1.0],
         "ks": [1, 4, 16, 64, 256] if quick else [1, 2, 4, 8, 16, 32, 64, 128, 256],
         "seed": seed, "all_estimators": {"sigma": 1.0, "k": 16}}
  res = {"study": STUDY, "config": cfg, "two_action": part_a(), "three_token": part_b(),
         "topk_residual": part_c(cfg["n_draws"], cfg["ks"], cfg["sigmas"], cfg["v"], seed),
         "all_estimators": all_estimators(cfg["n_draws"], cfg["v"], 1.0, 16, seed)}
  res["figures"] = [os.path.basename(p) for p in figures(res, out)]
  with open(f"{out}/table.md", "w") as f:
    f.write(f"# Study 1: Score Centering, analytic\n\n{tables(res)}")
  res["environment"], res["runtime_s"] = common.environment(), timer()
  common.write_json(f"{out}/results.json", res)
  return res


def main(argv=None):
  common.study_main(STUDY, run, __doc__, argv)


if __name__ == "__main__":
  main()
