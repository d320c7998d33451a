"""Study 3 — the mismatch bias table on SmolLM2-135M-Instruct (SC paper's central claim).

    python -m experiments.mismatch_bias [--quick] [--out DIR] [--seed S]

Trainer θ_k = θ_0 (SmolLM2) after k Adam steps (lr 1e-5) on a fixed REINFORCE objective
(2 rollouts of one train-split prompt from θ_0, advantage CSR − 0.5); sampler = a rollout copy of θ_0
(rljax.rollout.make_sampler_params: none, bf16, int8, w8a8, w8a8+kv4), i.e. stale by k
updates and quantized. Held-out rubric prompts × G samples from the sampler (temperature 1,
no truncation) with the whole q recorded while sampling, scored by θ_k (full vocabulary).
Cells: every copy at k = 0; k = 4, 16, 64 for the copies none and w8a8+kv4 (CPU budget).

Gradient: restricted to the output-embedding matrix W (V × D = 49152 × 576 = 28.3 M
parameters, tied with the input embedding; only the LM-head use is differentiated), i.e.
g = Σ_t e_t h_tᵀ with e_t = −∂L/∂logits_t from the library loss. Every g is stored as a
Johnson-Lindenstrauss sketch Sᵀ g R (signed hashing of V into 4096 buckets, Gaussian R of
width 16; E‖sketch‖² = ‖g‖²), per prompt, so that CIs bootstrap over prompts.
(a) drift: the expected update under a constant reward A = 1, exact over the next token
    (experiments.estimators.expected_ascent_logits), Monte Carlo over the prefixes; reported
    in units of the signal: the exact on-policy expected update of a per-token reward of unit
    range (r = 1 on each position's most likely token) over the same prefixes.
(b) the Monte Carlo update with GRPO advantages from the real CSR reward, against the
    on-policy gradient (PG on θ_k's own rollouts of the same prompts, another seed):
    cosine and norm ratio; the noise ceiling is the cosine of two independent on-policy runs.
Checkpointed per cell (cells/*.json) so an interrupted run resumes.
"""
from __future__ import annotations

import argparse
import functools
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from experiments import common
from experiments.estimators import ESTIMATORS, expected_ascent_logits, surrogate

STUDY = "mismatch_bias"
BUCKETS, WIDTH, TOPK = 4096, 16, 32


# ----------------------------------------------------------------------------- model pieces
@functools.partial(jax.jit, static_argnums=(0, 4))
def _hidden(graphdef, state, ids, mask, n):
  from rljax.models.decoder import positions_from_mask
  model = nnx.merge(graphdef, state)
  h, _ = model(ids, positions_from_mask(mask), mask)
  return h[:, -n - 1:-1]


@functools.partial(jax.jit, static_argnums=0)
def _logits(graphdef, state, h):
  return nnx.merge(graphdef, state).logits(h)


def _pg_step_fn(graphdef, opt):
  from rljax.logprobs import token_logprobs
  from rljax.models.decoder import positions_from_mask
  from rljax.objectives import make_normalizer

  @jax.jit
  def step(state, opt_state, ids, mask, rmask, adv):
    def loss_fn(st):
      model = nnx.merge(graphdef, st)
      h, _ = model(ids, positions_from_mask(mask), mask)
      n = rmask.shape[1]
      lp = token_logprobs(h[:, -n - 1:-1], model.unembed_DxV(), ids[:, -n:])["logp_BxT"]
      batch = {"mask_BxT": rmask, "adv_BxT": adv[:, None] * rmask,
               "old_logp_BxT": jax.lax.stop_gradient(lp), "sampler_logp_BxT": lp,
               "normalizer": make_normalizer(rmask)}
      return surrogate("PG", {"logp_BxT": lp}, batch)
    loss, g = jax.value_and_grad(loss_fn)(state)
    upd, opt_state = opt.update(g, opt_state, state)
    return optax.apply_updates(state, upd), opt_state, loss

  return step


# ----------------------------------------------------------------------------- sketches
def sketch_params(v: int, d: int, seed: int):
  rng = np.random.default_rng([seed, 99])
  return (jnp.asarray(rng.integers(0, BUCKETS, v), jnp.int32),
          jnp.asarray(rng.choice([-1.0, 1.0], v), jnp.float32),
          jnp.asarray(rng.normal(size=(d, WIDTH)) / np.sqrt(WIDTH), jnp.float32))


def _sketch(e_TxV, h_TxD, sk):
  bucket, sign, r = sk
  eh = jax.ops.segment_sum((e_TxV * sign).T, bucket, BUCKETS)  # [BUCKETS, T]
  return eh @ (h_TxD.astype(jnp.float32) @ r)  # = Sᵀ (Σ_t e_t h_tᵀ) R


@functools.partial(jax.jit, static_argnums=(0,))
def _drift_chunk(name, logp_TxV, logq_TxV, mask_T, h_TxD, sk):
  e = expected_ascent_logits(name, logp_TxV, logq_TxV, jnp.ones(logp_TxV.shape[0]), TOPK)
  e = e * mask_T[:, None]
  return _sketch(e, h_TxD, sk), jnp.sum(jnp.linalg.norm(e, axis=-1))


def signal_logits(logp_TxV):
  """The exact on-policy expected update of a per-token reward of unit range, r = 1 on each
  position's most likely token under p (0 elsewhere), in logit space: E_p[r ∇log p] =
  ∇p(argmax) = p_max (e_argmax − p). The drift's unit: a real, non-constant reward's expected
  gradient over the same prefixes, with no sampling noise."""
  p = jnp.exp(logp_TxV)
  top = jnp.argmax(logp_TxV, -1)
  return jnp.max(p, -1, keepdims=True) * (jax.nn.one_hot(top, p.shape[-1], dtype=p.dtype) - p)


@jax.jit
def _signal_chunk(logp_TxV, mask_T, h_TxD, sk):
  return _sketch(signal_logits(logp_TxV) * mask_T[:, None], h_TxD, sk)


@functools.partial(jax.jit, static_argnums=(0,))
def _mc_chunk(name, logits_TxV, logq_TxV, tok_T, logq_rec_T, mask_T, adv_T, n_tokens, h_TxD, sk):
  """−∂L/∂logits of the library loss on the sampled tokens (global token-mean), sketched."""
  from rljax.objectives import Normalizer
  head = ESTIMATORS[name][3]
  ids = None
  if head == "full":
    ids = jnp.broadcast_to(jnp.arange(logq_TxV.shape[-1], dtype=jnp.int32), logq_TxV.shape)
  elif head == "topk":
    ids = jax.lax.top_k(logq_TxV, TOPK)[1].astype(jnp.int32)

  def loss(logits):
    logp_all = jax.nn.log_softmax(logits)
    lp = jnp.take_along_axis(logp_all, tok_T[:, None], -1)[:, 0]
    pol = {"logp_BxT": lp[None]}
    batch = {"mask_BxT": mask_T[None], "adv_BxT": (adv_T * mask_T)[None],
             "old_logp_BxT": jax.lax.stop_gradient(lp)[None], "sampler_logp_BxT": logq_rec_T[None],
             "normalizer": Normalizer(n_tokens, jnp.float32(1), jnp.float32(1), jnp.float32(1))}
    if ids is not None:
      pol["head_logp_BxTxK"] = jnp.take_along_axis(logp_all, ids, -1)[None]
      batch["head_logq_BxTxK"] = jnp.take_along_axis(logq_TxV, ids, -1)[None]
      batch["head_ids_BxTxK"] = ids[None]
    return surrogate(name, pol, batch, agg="token-mean")

  e = -jax.grad(loss)(logits_TxV)
  return _sketch(e, h_TxD, sk)


# ----------------------------------------------------------------------------- data
def prompts(tok, seed: int, split: str, n: int):
  from rljax.data import rubric
  exs = list(rubric.generate_examples(seed, split, n))
  rows = [tok(rubric.chat_prompt(e["prompt_plus"], tok), add_special_tokens=False)["input_ids"]
          for e in exs]
  return exs, rows


def rollout(sampler, exs, rows, tok, cfg, key_seed: int, full_q: bool = False) -> dict:
  """Samples G responses per prompt; with `full_q` the sampler records its whole q."""
  from rljax.rewards import get_reward
  from rljax.rollout import SamplerConfig, generate
  scfg = SamplerConfig(max_new_tokens=cfg["max_new_tokens"], temperature=1.0,
                       num_generations=cfg["G"], stop_token_ids=(tok.eos_token_id,),
                       pad_token_id=tok.pad_token_id or 0, record_topk=-1 if full_q else 0)
  ids, mask = common.left_pad(rows, tok.pad_token_id or 0, cfg["prompt_len"])
  r = generate(sampler, ids, mask, jax.random.key(key_seed), scfg)
  toks, rm = np.asarray(r.tokens_BxN), np.asarray(r.mask_BxN)
  texts = tok.batch_decode([t[m > 0] for t, m in zip(toks, rm)], skip_special_tokens=True)
  rewards, _ = get_reward("csr")(texts, [e for e in exs for _ in range(cfg["G"])])
  return {"ids": np.concatenate([np.asarray(r.prompt_ids_BxP), toks], 1),
          "mask": np.concatenate([np.asarray(r.prompt_mask_BxP), rm], 1).astype(np.int32),
          "tokens": toks, "rmask": rm.astype(np.float32), "logq": np.asarray(r.logq_BxN),
          "rewards": np.asarray(rewards, np.float32),
          **({"logq_full": np.asarray(r.topk_logq_BxNxK)} if full_q else {})}


def grpo_adv(rewards, g: int):
  from rljax import registry
  e = registry.get("advantage", "grpo")
  return np.asarray(e(jnp.asarray(rewards), g, e.make_config())[0])


# ----------------------------------------------------------------------------- one cell
def per_prompt_sketches(ro, h_p, w_logits, q_logits, cfg, sk, names, drift: bool, adv):
  """{name: [n_prompts, BUCKETS, WIDTH]} sketches (and per-token logit-space norms)."""
  g, n = cfg["G"], cfg["max_new_tokens"]
  n_tok = jnp.float32(ro["rmask"].sum())
  out = {k: [] for k in names + (["signal"] if drift else [])}
  enorm = {k: 0.0 for k in names}
  for i in range(len(ro["rewards"]) // g):
    sl = slice(i * g, (i + 1) * g)
    h = h_p[sl].reshape(g * n, -1)
    logits = w_logits(h_p[sl]).reshape(g * n, -1)
    m = jnp.asarray(ro["rmask"][sl].reshape(-1))
    # after a row's stop token the recorded q is -inf (padding): use p there (masked anyway)
    logq = jnp.where(m[:, None] > 0, jax.nn.log_softmax(q_logits(sl).reshape(g * n, -1)),
                     jax.nn.log_softmax(logits))
    if drift:
      out["signal"].append(np.asarray(_signal_chunk(jax.nn.log_softmax(logits), m, h, sk)))
    for k in names:
      if drift:
        s, en = _drift_chunk(k, jax.nn.log_softmax(logits), logq, m, h, sk)
        enorm[k] += float(en)
      else:
        s = _mc_chunk(k, logits, logq, jnp.asarray(ro["tokens"][sl].reshape(-1)),
                      jnp.asarray(ro["logq"][sl].reshape(-1)), m,
                      jnp.asarray(np.repeat(adv[sl], n)), n_tok, h, sk)
      out[k].append(np.asarray(s))
  return {k: np.stack(v) for k, v in out.items()}, enorm


def _boot(fn, n_prompts: int, n_boot: int, seed: int):
  rng = np.random.default_rng(seed)
  vals = [fn(rng.integers(0, n_prompts, n_prompts)) for _ in range(n_boot)]
  return [float(np.quantile(vals, 0.025)), float(np.quantile(vals, 0.975))]


def cos(a, b):
  return float(np.vdot(a, b) / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-30))


def cell_stats(drift, enorm, mc, ref_a, ceiling, n_tok, n_boot, seed) -> dict:
  """ceiling: (cos, ci95) of two independent on-policy estimates (measured at k = 0)."""
  np_ = ref_a.shape[0]
  all_i = np.arange(np_)
  ga = lambda idx: ref_a[idx].sum(0)
  sig = lambda idx: np.linalg.norm(drift["signal"][idx].sum(0)) / n_tok
  out = {"on_policy_norm": float(np.linalg.norm(ga(all_i))),
         "signal_norm": float(sig(all_i)), "signal_norm_ci95": _boot(sig, np_, n_boot, seed),
         "ceiling_cos": ceiling[0], "ceiling_cos_ci95": ceiling[1], "estimators": {}}
  for k in (k for k in drift if k != "signal"):
    d = lambda idx: np.linalg.norm(drift[k][idx].sum(0)) / n_tok
    e = lambda idx: mc[k][idx].sum(0)
    out["estimators"][k] = {
        "drift_norm": float(d(all_i)), "drift_norm_ci95": _boot(d, np_, n_boot, seed),
        "drift_over_signal": float(d(all_i) / max(out["signal_norm"], 1e-30)),
        "drift_over_signal_ci95": _boot(lambda i: d(i) / max(sig(i), 1e-30), np_, n_boot,
                                        seed),
        "drift_over_on_policy_norm": float(d(all_i) / max(out["on_policy_norm"], 1e-30)),
        "drift_logit_norm_per_token": enorm[k] / n_tok,
        "cos_on_policy": cos(e(all_i), ga(all_i)),
        "cos_on_policy_ci95": _boot(lambda i: cos(e(i), ga(i)), np_, n_boot, seed),
        "norm_ratio": float(np.linalg.norm(e(all_i)) / max(out["on_policy_norm"], 1e-30)),
        "norm_ratio_ci95": _boot(lambda i: np.linalg.norm(e(i)) / max(np.linalg.norm(ga(i)), 1e-30),
                                 np_, n_boot, seed)}
  return out


# ----------------------------------------------------------------------------- driver
def _unembed(graphdef, state):
  return nnx.merge(graphdef, state).unembed_DxV()


def _logits_fn(w):
  return lambda h: jnp.einsum("btd,dv->btv", jnp.asarray(h), w.astype(jnp.asarray(h).dtype),
                              preferred_element_type=jnp.float32)


def _save_npz(path, d):
  np.savez(path, **{k: np.asarray(v, np.float32) if v.dtype.name == "bfloat16" else v
                    for k, v in d.items()})


def copy_rollouts(model, tok, exs, rows, cfg, cache):
  """Per copy: its rollout of the prompts (from θ_0) with the whole q it sampled from
  (record_topk = full: teacher-forced re-scoring by a fake-quantized copy is not the decode
  path's q, rounding is not bit-stable between the two); cached as npz."""
  from rljax.rollout import make_sampler_params
  out = {}
  for c in cfg["copies"]:
    path = f"{cache}/rollout_{c.replace('+', '_')}.npz"
    gd, st = make_sampler_params(model, c, key=jax.random.key(cfg["seed"]), force_copy=True)
    if os.path.exists(path):
      ro = dict(np.load(path))
    else:
      ro = rollout((gd, st), exs, rows, tok, cfg, cfg["seed"] * 1000 + 17, full_q=True)
      np.savez(path, **ro)
    out[c] = ro
    del gd, st
  return out


def stale_objective(model, tok, cfg):
  exs, rows = prompts(tok, cfg["seed"], "train", cfg["stale_prompts"])
  ro = rollout(model, exs, rows, tok, dict(cfg, G=cfg["stale_G"], prompt_len=max(map(len, rows))),
               cfg["seed"] * 1000 + 5)
  return ro, ro["rewards"] - 0.5  # a fixed objective: never all-zero advantages


def cell_copies(cfg, k: int) -> list[str]:
  """Every copy at k = 0; with k > 0 only `stale_copies` (the CPU budget of one session)."""
  return cfg["copies"] if k == 0 else [c for c in cfg["copies"] if c in cfg["stale_copies"]]


def make_config(quick: bool, seed: int) -> dict:
  return {"model": "SmolLM2-135M-Instruct (bundled GGUF, float32)",
         "n_prompts": 2 if quick else 8, "G": 2 if quick else 4,
         "max_new_tokens": 4 if quick else 16, "temperature": 1.0,
         "copies": ["none", "w8a8+kv4"] if quick else ["none", "bf16", "int8", "w8a8", "w8a8+kv4"],
         "staleness": [0, 1] if quick else [0, 4, 16, 64], "stale_lr": 1e-5,
         "stale_copies": ["none", "w8a8+kv4"],
         "stale_prompts": 1, "stale_G": 2, "stale_adv": "CSR - 0.5",
         "topk_sc_k": TOPK, "sketch": {"buckets": BUCKETS, "width": WIDTH},
         "n_boot": 20 if quick else 1000, "seed": seed,
         "gradient": "output embedding W (V x D), LM-head path only, JL-sketched",
         "estimators": {k: {"loss": v[0], "transform": v[1], "weight": v[2], "head": v[3]}
                        for k, v in ESTIMATORS.items()}}


def run(out: str, quick: bool = False, seed: int = 0) -> dict:
  timer = common.Timer()
  cfg = make_config(quick, seed)
  cells_dir, cache = f"{out}/cells", f"{out}/cache"
  os.makedirs(cells_dir, exist_ok=True)
  os.makedirs(cache, exist_ok=True)
  model, tok = common.load_smollm2()
  graphdef, state = nnx.split(model)
  exs, rows = prompts(tok, seed, "heldout", cfg["n_prompts"])
  cfg["prompt_len"] = max(map(len, rows))
  v, d = model.cfg.vocab_size, model.cfg.hidden_size
  sk = sketch_params(v, d, seed)
  names = list(ESTIMATORS)
  copies = copy_rollouts(model, tok, exs, rows, cfg, cache)
  stale_ro, stale_adv = stale_objective(model, tok, cfg)
  opt = optax.adam(cfg["stale_lr"])
  step = _pg_step_fn(graphdef, opt)
  opt_state, k_now, losses = opt.init(state), 0, []
  n = cfg["max_new_tokens"]
  exists = lambda c, k: os.path.exists(f"{cells_dir}/{c}_k{k}.json") and "signal_norm" in \
      json.load(open(f"{cells_dir}/{c}_k{k}.json"))  # cells from before the signal unit rerun
  needed = [k for k in cfg["staleness"] if any(not exists(c, k) for c in cell_copies(cfg, k))]
  snaps = {0: state}  # θ_k for every needed k (k = 0 first, then the largest k first)
  order = ([0] if 0 in needed else []) + sorted((k for k in needed if k > 0), reverse=True)
  ceiling = None
  for k in order:
    if k not in snaps:
      while k_now < max(needed):  # k Adam steps on the fixed objective (deterministic)
        state, opt_state, loss = step(state, opt_state, jnp.asarray(stale_ro["ids"]),
                                      jnp.asarray(stale_ro["mask"]),
                                      jnp.asarray(stale_ro["rmask"]), jnp.asarray(stale_adv))
        losses.append(float(loss))
        k_now += 1
        if k_now in needed:
          snaps[k_now] = state
    st_k = snaps[k]
    todo = [c for c in cell_copies(cfg, k) if not exists(c, k)]
    w_p = _unembed(graphdef, st_k)
    p_logits = _logits_fn(w_p)
    refs = []
    # on-policy references from θ_k itself; the second (noise ceiling) only at k = 0
    for r_seed in ((1, 2) if k == 0 else (1,)):
      ro = rollout((graphdef, st_k), exs, rows, tok, cfg, seed * 1000 + 100 * k + r_seed)
      h = _hidden(graphdef, st_k, jnp.asarray(ro["ids"]), jnp.asarray(ro["mask"]), n)
      s, _ = per_prompt_sketches(ro, h, p_logits, lambda sl, h=h: p_logits(h[sl]), cfg, sk,
                                 ["PG"], False, grpo_adv(ro["rewards"], cfg["G"]))
      refs.append(s["PG"])
    if k == 0:
      ceiling = (cos(refs[1].sum(0), refs[0].sum(0)),
                 _boot(lambda i: cos(refs[1][i].sum(0), refs[0][i].sum(0)), cfg["n_prompts"],
                       cfg["n_boot"], seed))
    elif ceiling is None:
      c0 = json.load(open(f"{cells_dir}/{cfg['copies'][0]}_k0.json"))
      ceiling = (c0["ceiling_cos"], c0["ceiling_cos_ci95"])
    for c in todo:
      t0 = common.Timer()
      ro = copies[c]
      h_p = _hidden(graphdef, st_k, jnp.asarray(ro["ids"]), jnp.asarray(ro["mask"]), n)
      q_logits = lambda sl, ro=ro: jnp.asarray(ro["logq_full"][sl])  # the sampler's true q
      drift, enorm = per_prompt_sketches(ro, h_p, p_logits, q_logits, cfg, sk, names, True, None)
      adv = grpo_adv(ro["rewards"], cfg["G"])
      mc, _ = per_prompt_sketches(ro, h_p, p_logits, q_logits, cfg, sk, names, False, adv)
      lp = jax.nn.log_softmax(p_logits(h_p))
      lq = jax.nn.log_softmax(q_logits(slice(None)))
      m = jnp.asarray(ro["rmask"])
      lq = jnp.where(m[..., None] > 0, lq, lp)
      kl = float(jnp.sum(jnp.sum(jnp.exp(lq) * (lq - lp), -1) * m) / jnp.sum(m))
      lp_tok = np.asarray(jnp.take_along_axis(lp, jnp.asarray(ro["tokens"])[..., None], -1)[..., 0])
      n_tok = float(ro["rmask"].sum())
      stats = cell_stats(drift, enorm, mc, refs[0], ceiling, n_tok, cfg["n_boot"], seed)
      stats.update({"copy": c, "staleness": k, "n_prompts": cfg["n_prompts"], "G": cfg["G"],
                    "n_tokens": n_tok, "kl_q_p_per_token": kl,
                    "mean_abs_log_ratio_sampled": float(np.sum(np.abs(lp_tok - ro["logq"]) * ro["rmask"]) / n_tok),
                    "mean_csr": float(ro["rewards"].mean()),
                    "stale_losses": list(losses[:k]), "ceiling_from_k": 0,
                    "runtime_s": t0()})
      common.write_json(f"{cells_dir}/{c}_k{k}.json", stats)
      print(f"cell {c} k={k}: KL {kl:.4f}  drift PG {stats['estimators']['PG']['drift_norm']:.3g} "
            f"SC {stats['estimators']['SC']['drift_norm']:.3g}  ({t0()} s)", flush=True)
  cells = [json.load(open(f"{cells_dir}/{c}_k{k}.json"))
           for k in cfg["staleness"] for c in cell_copies(cfg, k)]
  res = {"study": STUDY, "config": cfg, "cells": cells}
  res["figures"] = figures(cells, cfg, out)
  with open(f"{out}/table.md", "w") as f:
    f.write(f"# Study 3: mismatch bias table (SmolLM2-135M)\n\n{tables(cells, cfg)}")
  res["environment"], res["runtime_s"] = common.environment(), timer()
  common.write_json(f"{out}/results.json", res)
  return res


def _ci(x, lo, hi, f="{:.3g}"):
  return f"{f.format(x)} [{f.format(lo)}, {f.format(hi)}]"


def tables(cells, cfg) -> str:
  names = list(ESTIMATORS)
  s = (f"Gradient w.r.t. the output embedding W (28.3 M params, LM-head path), JL-sketched; "
       f"{cfg['n_prompts']} held-out prompts × G = {cfg['G']}, {cfg['max_new_tokens']} new "
       f"tokens, temperature 1; staleness = Adam steps (lr {cfg['stale_lr']}) of the trainer "
       f"after the sampler's snapshot. [95% CI]: bootstrap over prompts ({cfg['n_boot']}).\n\n")
  s += "## Mismatch level per cell\n\n" + common.md_table(
      ["copy", "staleness k", "KL(q‖p) per token (nats)", "mean |log p − log q| sampled",
       "mean CSR"],
      [[c["copy"], c["staleness"], c["kl_q_p_per_token"], c["mean_abs_log_ratio_sampled"],
        c["mean_csr"]] for c in cells])
  s += ("\n## (a) Drift: ‖E[g]‖ under a constant reward A = 1 (exact over the next token), "
        "in units of the signal ‖E_p[r ∇log p]‖ for r = 1 on each position's most likely token "
        "(exact, the same prefixes: no sampling noise in the unit) [95% CI]\n\n"
        "The SC, TIS+SC and MIS+SC columns are an identity check that cannot fail: each "
        "subtracts a centering built from the same recorded mass, so its expected update under "
        "a constant reward is 0 by construction and the ≈ 1e-8 is float32 noise. The evidence "
        "is in the PG, TIS, MIS, BPO and top-k SC columns.\n\n")
  s += common.md_table(["copy", "k", "signal ‖E[g]‖"] + names, [
      [c["copy"], c["staleness"], f"{c['signal_norm']:.3g}"] + [
          _ci(c["estimators"][n]["drift_over_signal"],
              *c["estimators"][n]["drift_over_signal_ci95"]) for n in names] for c in cells])
  s += ("\nThe same drift over the norm of one Monte Carlo on-policy CSR gradient (a noisy "
        "unit: only the prompts whose G answers differ in CSR contribute):\n\n")
  s += common.md_table(["copy", "k"] + names, [
      [c["copy"], c["staleness"]] + [f"{c['estimators'][n]['drift_over_on_policy_norm']:.3g}"
                                     for n in names] for c in cells])
  s += "\nAbsolute drift norm ‖E[g]‖ with [95% CI]:\n\n" + common.md_table(
      ["copy", "k"] + names, [[c["copy"], c["staleness"]] + [
          _ci(c["estimators"][n]["drift_norm"], *c["estimators"][n]["drift_norm_ci95"])
          for n in names] for c in cells])
  s += ("\n## (b) Real CSR reward (GRPO advantages): cosine to the on-policy gradient "
        "[95% CI]; ceiling = two independent on-policy estimates\n\n")
  s += common.md_table(["copy", "k", "ceiling"] + names, [
      [c["copy"], c["staleness"], _ci(c["ceiling_cos"], *c["ceiling_cos_ci95"], "{:.2f}")] + [
          _ci(c["estimators"][n]["cos_on_policy"], *c["estimators"][n]["cos_on_policy_ci95"],
              "{:.2f}") for n in names] for c in cells])
  s += "\nNorm ratio ‖g_est‖ / ‖g_on-policy‖ [95% CI]:\n\n" + common.md_table(
      ["copy", "k"] + names, [[c["copy"], c["staleness"]] + [
          _ci(c["estimators"][n]["norm_ratio"], *c["estimators"][n]["norm_ratio_ci95"], "{:.2f}")
          for n in names] for c in cells])
  return s


def figures(cells, cfg, out) -> list[str]:
  plt = common.pyplot()
  names = list(ESTIMATORS)
  paths = []
  for key, ylab, fname, log in (
      ("drift_over_signal", "‖E[g]‖ (constant reward) / signal", "drift.png", True),
      ("cos_on_policy", "cosine to on-policy CSR gradient", "cosine.png", False)):
    fig, axes = plt.subplots(1, len(cfg["copies"]), figsize=(3.2 * len(cfg["copies"]), 3.4),
                             sharey=True, squeeze=False)
    for ax, c in zip(axes[0], cfg["copies"]):
      cs = [x for x in cells if x["copy"] == c]
      ks = [x["staleness"] for x in cs]
      for nm in names:
        y = [max(x["estimators"][nm][key], 1e-12) if log else x["estimators"][nm][key] for x in cs]
        # (log panel: exact zeros, e.g. MIS+SC with every ratio inside its band, sit at 1e-12)
        ax.plot(ks, y, marker="o", label=nm)
      if not log:
        ax.plot(ks, [x["ceiling_cos"] for x in cs], "k--", label="on-policy ceiling")
      if log:
        ax.set_yscale("log")
      if len(ks) > 1:
        ax.set_xscale("symlog", linthresh=1)
      else:  # one cell (k = 0): no staleness axis to draw
        ax.set_xlim(-1, 1)
        ax.set_xticks([0])
      common.finish_axes(ax, "staleness k (trainer updates)", ylab if c == cfg["copies"][0] else "",
                         f"sampler copy: {c}", legend=False)
    axes[0][-1].legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(f"{out}/{fname}")
    plt.close(fig)
    paths.append(fname)
  return paths


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--quick", action="store_true")
  ap.add_argument("--out", default=None)
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--collect", action="store_true",
                  help="write results.json from the finished cells only, then redraw")
  ap.add_argument("--replot", action="store_true",
                  help="only redraw the figures and the table from results.json")
  a = ap.parse_args(argv)
  out = common.out_dir_for(STUDY, a.out)
  if a.collect:  # whatever cells finished (an interrupted run), without computing more
    cfg = make_config(a.quick, a.seed)
    cells, missing = [], []
    for k in cfg["staleness"]:
      for c in cell_copies(cfg, k):
        path = f"{out}/cells/{c}_k{k}.json"
        (cells.append(json.load(open(path))) if os.path.exists(path) else missing.append(f"{c}_k{k}"))
    common.write_json(f"{out}/results.json", {"study": STUDY, "config": cfg, "cells": cells,
                                              "missing_cells": missing,
                                              "figures": ["drift.png", "cosine.png"],
                                              "environment": common.environment(),
                                              "runtime_s": sum(c["runtime_s"] for c in cells)})
  if a.replot or a.collect:
    res = json.load(open(f"{out}/results.json"))
    figures(res["cells"], res["config"], out)
    with open(f"{out}/table.md", "w") as f:
      f.write(f"# Study 3: mismatch bias table (SmolLM2-135M)\n\n{tables(res['cells'], res['config'])}")
    return
  res = run(out, a.quick, a.seed)
  print(open(f"{out}/table.md").read())
  print(f"runtime {res['runtime_s']} s -> {out}")


if __name__ == "__main__":
  main()
