"""Study 2 — CoRT Figure 1 analogue on SmolLM2-135M-Instruct (scoring only).

    python -m experiments.cort_delta [--quick] [--out DIR] [--seed S]

Held-out rubric prompts (rljax.data.rubric, split "heldout"); one response each from the
library sampler (rljax.rollout.generate, temperature 0.7, no truncation); the response is
scored by the library scorer (rljax.rollout.score_rollout, the trainer's logprobs at the
sampler's temperature) under x⁺ (rubric), x⁻ (rubric-free) and x⁺ minus one criterion at a
time (per-criterion replay). Δ = ℓ⁺ − ℓ⁻ per token; Δ_c = ℓ⁺ − ℓ^{(−c)}. Tokens overlapping
the characters that bear a criterion (experiments.criterion_spans) are "criterion" tokens.
w̃ = 1 + η λ (σ(Δ/τ) − ½) with λ = 1, η = 0.5, τ = 1 (rljax.objectives.cort_weights).
The seed's claim (CoRT Fig. 1): criterion-bearing tokens carry most of Δ.
"""
from __future__ import annotations


import json
import os

import jax
import jax.numpy as jnp
import numpy as np

from experiments import common
from experiments.criterion_spans import bearing_spans, label_tokens, token_char_spans

STUDY = "cort_delta"


def auroc(scores, labels) -> float:
  """P(score of a positive > score of a negative), ties count ½ (Mann-Whitney)."""
  from scipy.stats import rankdata
  s, y = np.asarray(scores, np.float64), np.asarray(labels, bool)
  n1, n0 = y.sum(), (~y).sum()
  if n1 == 0 or n0 == 0:
    return float("nan")
  r = rankdata(s)
  return float((r[y].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def cluster_boot(groups, stat, n_boot: int, seed: int):
  """Percentile 95% CI of stat(concatenated groups) resampling whole responses."""
  rng = np.random.default_rng(seed)
  vals = []
  for _ in range(n_boot):
    idx = rng.integers(0, len(groups), len(groups))
    v = stat([groups[i] for i in idx])
    if np.isfinite(v):
      vals.append(v)
  if not vals:
    return [float("nan"), float("nan")]
  return [float(np.quantile(vals, 0.025)), float(np.quantile(vals, 0.975))]


def _cat(groups, k):
  return np.concatenate([g[k] for g in groups]) if groups else np.zeros(0)


def class_stats(groups, key: str, n_boot: int, seed: int) -> dict:
  """Mean of `key` on criterion / other tokens, AUROC, share of mass; cluster-bootstrap CIs."""
  mean_on = lambda gs, lab: (lambda x, y: float(x[y == lab].mean()) if (y == lab).any()
                             else float("nan"))(_cat(gs, key), _cat(gs, "label"))
  au = lambda gs: auroc(_cat(gs, key), _cat(gs, "label"))
  share = lambda gs, f: (lambda x, y: float(f(x)[y].sum() / max(f(x).sum(), 1e-12)))(
      _cat(gs, key), _cat(gs, "label").astype(bool))
  out = {"n_responses": len(groups), "n_tokens": int(_cat(groups, "label").size),
         "n_criterion_tokens": int(_cat(groups, "label").sum())}
  for name, fn in (("mean_criterion", lambda gs: mean_on(gs, 1)),
                   ("mean_other", lambda gs: mean_on(gs, 0)),
                   ("auroc", au),
                   ("share_abs", lambda gs: share(gs, np.abs)),
                   ("share_pos", lambda gs: share(gs, lambda x: np.maximum(x, 0)))):
    out[name] = {"value": fn(groups), "ci95": cluster_boot(groups, fn, n_boot, seed)}
  out["token_share_criterion"] = out["n_criterion_tokens"] / max(out["n_tokens"], 1)
  return out


def collect(cfg: dict, cache: str | None = None):
  """Generates and scores; returns per-response records (numpy) and the tokenizer. `cache`:
  a folder where each generated and scored batch is kept (`batch_<s>.npz`, with the config
  it was drawn under), so a stopped run resumes at the first batch not there."""
  from rljax.data import rubric
  from rljax.objectives import CortConfig, cort_weights
  from rljax.rewards import get_reward
  from rljax.rollout import Rollout, SamplerConfig, generate, score_rollout
  model, tok = common.load_smollm2()
  eos, pad = tok.eos_token_id, tok.pad_token_id or 0
  exs = list(rubric.generate_examples(cfg["seed"], "heldout", cfg["n_prompts"]))
  enc = lambda t: tok(t, add_special_tokens=False)["input_ids"]
  plus = [enc(rubric.chat_prompt(e["prompt_plus"], tok)) for e in exs]
  minus = [enc(rubric.chat_prompt(e["prompt_minus"], tok)) for e in exs]
  drops = [(i, j) for i, e in enumerate(exs) for j in range(len(e["criteria_spans"]))]
  drop_ids = [enc(rubric.chat_prompt(rubric.remove_criteria(exs[i], [j]), tok)) for i, j in drops]
  p_len, m_len = max(map(len, plus + drop_ids)), max(map(len, minus))
  scfg = SamplerConfig(max_new_tokens=cfg["max_new_tokens"], temperature=cfg["temperature"],
                       stop_token_ids=(eos,), pad_token_id=pad)
  b, n = cfg["batch"], len(exs)
  pad_rows = lambda rows: rows + [rows[-1]] * (-len(rows) % b)
  key = jax.random.key(cfg["seed"])
  toks, rmask, lp, lm = [], [], [], []
  tries = []
  stamp = json.dumps(cfg, sort_keys=True, default=str)
  for s in range(0, n, b):
    path = cache and os.path.join(cache, f"batch_{s}.npz")
    got = np.load(path) if path and os.path.exists(path) else None
    if got is None or str(got["cfg"]) != stamp:
      ids, mask = common.left_pad(pad_rows(plus[s:s + b]), pad, p_len)
      r, used = generate_until_eos(model, ids, mask, jax.random.fold_in(key, s), scfg,
                                   cfg.get("tries", 1))
      mids, mmask = common.left_pad(pad_rows(minus[s:s + b]), pad, m_len)
      got = {"tries": np.asarray(used), "lp": np.asarray(score_rollout(model, r, scfg)["logp_BxN"]),
             "lm": np.asarray(score_rollout(model, r._replace(
                 prompt_ids_BxP=jnp.asarray(mids), prompt_mask_BxP=jnp.asarray(mmask)),
                 scfg)["logp_BxN"]),
             "toks": np.asarray(r.tokens_BxN), "rmask": np.asarray(r.mask_BxN)}
      if path:
        os.makedirs(cache, exist_ok=True)
        np.savez(path + ".tmp.npz", cfg=stamp, **got)
        os.replace(path + ".tmp.npz", path)
    for acc, k in ((tries, "tries"), (lp, "lp"), (lm, "lm"), (toks, "toks"), (rmask, "rmask")):
      acc.append(got[k])
    print(f"[cort_delta] generated and scored {min(s + b, n)}/{n}", flush=True)
  cat = lambda xs: np.concatenate(xs)[:n]
  toks, rmask, lp, lm, tries = cat(toks), cat(rmask), cat(lp), cat(lm), cat(tries)
  lc = np.zeros((len(drops), toks.shape[1]), np.float32)
  for s in range(0, len(drops), b):
    rows = [i for i, _ in drops[s:s + b]]
    rows_p = rows + [rows[-1]] * (-len(rows) % b)
    ids, mask = common.left_pad(pad_rows(drop_ids[s:s + b]), pad, p_len)
    r = Rollout(jnp.asarray(toks[rows_p]), jnp.asarray(rmask[rows_p]), None, None, None, None,
                jnp.asarray(ids), jnp.asarray(mask))
    lc[s:s + len(rows)] = np.asarray(score_rollout(model, r, scfg)["logp_BxN"])[:len(rows)]
  texts = tok.batch_decode([t[m > 0] for t, m in zip(toks, rmask)], skip_special_tokens=True)
  _, info = get_reward("csr")(texts, exs)
  delta = (lp - lm) * rmask
  w_raw, _ = cort_weights(jnp.asarray(delta), jnp.asarray(rmask), jnp.float32(1.0),
                          CortConfig(eta=cfg["eta"], tau=cfg["tau"], normalize=False))
  w_raw = np.asarray(w_raw)
  recs = []
  for i, e in enumerate(exs):
    m = rmask[i] > 0
    ids = [int(t) for t in toks[i][m]]
    cs = token_char_spans(tok, ids)
    text = tok.decode(ids, skip_special_tokens=True)
    per_crit, any_lab = [], np.zeros(len(ids), bool)
    for j, (iid, kw) in enumerate(zip(e["instruction_id_list"], e["kwargs"])):
      lab = np.array(label_tokens(cs, bearing_spans(iid, kw, text)), bool)
      any_lab |= lab
      k = drops.index((i, j))
      per_crit.append({"id": iid, "satisfied": bool(info["criteria"][i][j]), "label": lab,
                       "delta_c": (lp[i] - lc[k])[m]})
    recs.append({"id": e["id"], "ids": ids, "text": text, "delta": delta[i][m],
                 "w_raw": w_raw[i][m], "label": any_lab.astype(np.int8), "criteria": per_crit,
                 "csr": float(info["csr"][i]), "truncated": bool(rmask[i].all()),
                 "tries": int(tries[i])})
  return recs, tok


def generate_until_eos(model, ids, mask, key, scfg, tries: int = 1):
  """One response per row; with `tries` > 1, a row cut at max_new_tokens is drawn again
  (new keys) up to `tries` draws in all, keeping the first draw that ended with a stop token
  (or the last draw). Returns (Rollout, draws used per row). Answers that end are preferred:
  a bias towards shorter answers, the price of labelling end-anchored criteria."""
  from rljax.rollout import generate
  r = generate(model, ids, mask, key, scfg)
  used = np.ones(len(ids), np.int64)
  for t in range(1, tries):
    cut = np.asarray(r.truncated_B)
    if not cut.any():
      break
    r2 = generate(model, ids, mask, jax.random.fold_in(key, 10_000 + t), scfg)
    sel = jnp.asarray(cut)
    r = r._replace(**{f: jnp.where(sel.reshape((-1,) + (1,) * (x.ndim - 1)), y, x)
                      for f, x, y in zip(r._fields, r, r2)
                      if x is not None and not f.startswith("prompt")})
    used += cut
  return r, used


def per_criterion(recs, n_boot: int, seed: int) -> list[dict]:
  by: dict[str, list] = {}
  for r in recs:
    for c in r["criteria"]:
      by.setdefault(c["id"], []).append((r, c))
  rows = []
  for iid, items in sorted(by.items()):
    groups = [{"delta_c": c["delta_c"], "delta": r["delta"], "label": c["label"].astype(np.int8)}
              for r, c in items]
    row = {"id": iid, "n_responses": len(items),
           "satisfied_rate": float(np.mean([c["satisfied"] for _, c in items])),
           "responses_with_span": int(sum(c["label"].any() for _, c in items))}
    if row["responses_with_span"]:
      row["delta_c"] = class_stats(groups, "delta_c", n_boot, seed)
      row["delta"] = class_stats(groups, "delta", n_boot, seed)
    rows.append(row)
  return rows


def heatmap(recs, tok, path: str, n_show: int, width: int = 110) -> None:
  """A few responses, each token on a background coloured by w̃; criterion tokens boxed."""
  from rljax.plot import token_heatmap
  pick = sorted(range(len(recs)), key=lambda i: (-int(recs[i]["label"].sum()), i))[:n_show]
  rows = []
  for i in pick:
    r = recs[i]
    crit = ", ".join(c["id"].split(":")[1] for c in r["criteria"])
    rows.append({"title": f"[{r['id']}] criteria: {crit}  (CSR {r['csr']:.2f})",
                 "tokens": [tok.decode([t], skip_special_tokens=True) for t in r["ids"]],
                 "values": r["w_raw"], "boxed": r["label"]})
  token_heatmap(rows, path, width=width, label="w̃ = 1 + ηλ(σ(Δ/τ) − ½), λ=1 "
                "(dimensionless); boxed = criterion token")


def histogram(recs, path: str) -> None:
  plt = common.pyplot()
  d = np.concatenate([r["delta"] for r in recs])
  y = np.concatenate([r["label"] for r in recs]).astype(bool)
  fig, ax = plt.subplots(figsize=(5.4, 3.6))
  bins = np.linspace(np.quantile(d, 0.001), np.quantile(d, 0.999), 60)
  ax.hist(d[~y], bins, density=True, alpha=0.6, label=f"other tokens (n={int((~y).sum())})")
  ax.hist(d[y], bins, density=True, alpha=0.6, label=f"criterion tokens (n={int(y.sum())})")
  ax.set_yscale("log")
  common.finish_axes(ax, "Δ = log π(y|x⁺) − log π(y|x⁻) (nats)", "density (per nat)",
                     "SmolLM2-135M, held-out rubric prompts")
  fig.tight_layout()
  fig.savefig(path)
  plt.close(fig)


def fmt(d) -> str:
  return f"{d['value']:.3f} [{d['ci95'][0]:.3f}, {d['ci95'][1]:.3f}]"


def tables(res) -> str:
  o = res["overall"]
  s = (f"n = {o['delta']['n_responses']} responses, {o['delta']['n_tokens']} tokens, "
       f"{o['delta']['n_criterion_tokens']} criterion tokens "
       f"({100 * o['delta']['token_share_criterion']:.1f} %); mean CSR of the responses "
       f"{res['mean_csr']:.3f}. Values [95% CI, bootstrap over responses, "
       f"{res['config']['n_boot']} resamples].\n\n")
  if "ended_fraction" in res:
    s += (f"Answers that ended with a stop token: {100 * res['ended_fraction']:.1f} % "
          f"(≤ {res['config']['max_new_tokens']} new tokens, up to "
          f"{res['config'].get('tries', 1)} draws per prompt, {res['draws_mean']:.2f} on "
          f"average).\n\n")
  s += common.md_table(["quantity", "Δ (nats)", "w̃ (λ=1)"], [
      ["mean on criterion tokens", fmt(o["delta"]["mean_criterion"]), fmt(o["w_raw"]["mean_criterion"])],
      ["mean on other tokens", fmt(o["delta"]["mean_other"]), fmt(o["w_raw"]["mean_other"])],
      ["AUROC (criterion vs other)", fmt(o["delta"]["auroc"]), fmt(o["w_raw"]["auroc"])],
      ["AUROC of |Δ|", fmt(o["abs_delta"]["auroc"]), ""],
      ["share of Σ|Δ| on criterion tokens", fmt(o["delta"]["share_abs"]), ""],
      ["share of Σmax(Δ,0) on criterion tokens", fmt(o["delta"]["share_pos"]), ""]])
  s += ("\n### Per criterion (Δ_c = ℓ⁺ − ℓ⁻ᶜ, replay without that criterion only; "
        "criterion tokens = that criterion's spans)\n\n")
  rows = []
  for r in res["per_criterion"]:
    if "delta_c" in r:
      dc = r["delta_c"]
      rows.append([r["id"], r["n_responses"], f"{r['satisfied_rate']:.2f}",
                   r["responses_with_span"], dc["n_criterion_tokens"],
                   fmt(dc["mean_criterion"]), fmt(dc["mean_other"]), fmt(dc["auroc"]),
                   fmt(r["delta"]["mean_criterion"])])
    else:
      rows.append([r["id"], r["n_responses"], f"{r['satisfied_rate']:.2f}",
                   r["responses_with_span"], 0, "–", "–", "–", "–"])
  s += common.md_table(["criterion", "n resp.", "satisfied", "resp. with span", "crit. tokens",
                        "mean Δ_c crit.", "mean Δ_c other", "AUROC Δ_c", "mean Δ crit."], rows)
  return s


# where Δ's mass sits, token classes in priority order (each token in the first that holds)
CLASSES = ("criterion", "same line", "next 3 tokens", "first 5 tokens", "rest")


def token_classes(ids, label, is_newline, after: int = 3, first: int = 5) -> np.ndarray:
  """[T] class index (CLASSES) of each response token: a criterion token; on the same line
  as one (no newline token between them); among the `after` tokens after a criterion span;
  among the response's first `first` tokens; the rest."""
  label = np.asarray(label, bool)
  t = len(label)
  line = np.cumsum([0] + [int(bool(is_newline(i))) for i in ids[:-1]])  # line of each token
  crit_lines = set(line[label].tolist())
  cls = np.full(t, 4)
  cls[:first] = 3
  for i in np.flatnonzero(label):
    cls[i + 1:i + 1 + after] = np.minimum(cls[i + 1:i + 1 + after], 2)
  cls[np.isin(line, list(crit_lines)) & ~label] = 1
  cls[label] = 0
  return cls


def mass_analysis(responses, is_newline, n_boot: int, seed: int) -> dict:
  """Where Σ|Δ| sits: per token class (`token_classes`) its share of the tokens and of Σ|Δ|;
  the ceiling of any token set as large as the criterion tokens (the top-m tokens by |Δ|,
  m = the criterion tokens' count: pooled, and per response with each response's own m);
  the criterion share on answers that ended (EOS) and on answers cut at max_new_tokens.
  [95 % CI]: bootstrap over responses."""
  groups = []
  for r in responses:
    ids, d = list(r["token_ids"]), np.abs(np.asarray(r["delta"], np.float64))
    lab = np.asarray(r["label"], bool)
    groups.append({"abs": d, "label": lab, "cls": token_classes(ids, lab, is_newline),
                   "complete": len(ids) > 0 and int(ids[-1]) == int(r.get("eos", 2))})
  cat = lambda gs, k: np.concatenate([g[k] for g in gs]) if gs else np.zeros(0)
  boot = lambda fn: {"value": fn(groups), "ci95": cluster_boot(groups, fn, n_boot, seed)}
  out = {"classes": {}}
  for c, name in enumerate(CLASSES):
    mass = lambda gs, c=c: float(cat(gs, "abs")[cat(gs, "cls") == c].sum()
                                 / max(cat(gs, "abs").sum(), 1e-12))
    toks = lambda gs, c=c: float(np.mean(cat(gs, "cls") == c))
    out["classes"][name] = {"token_share": boot(toks), "abs_delta_share": boot(mass)}

  def ceiling(gs):
    a, m = cat(gs, "abs"), int(cat(gs, "label").sum())
    return float(np.sort(a)[::-1][:m].sum() / max(a.sum(), 1e-12))

  def ceiling_per_response(gs):
    top = sum(np.sort(g["abs"])[::-1][:int(g["label"].sum())].sum() for g in gs)
    return float(top / max(cat(gs, "abs").sum(), 1e-12))

  out["oracle_ceiling_pooled"] = boot(ceiling)
  out["oracle_ceiling_per_response"] = boot(ceiling_per_response)
  share = lambda gs: float(cat(gs, "abs")[cat(gs, "label")].sum()
                           / max(cat(gs, "abs").sum(), 1e-12))
  out["criterion_share"] = boot(share)
  for name, want in (("complete", True), ("cut", False)):
    sub = [g for g in groups if g["complete"] == want]
    out[f"criterion_share_{name}"] = {
        "n_responses": len(sub), "token_share": float(np.mean(cat(sub, "label"))) if sub else
        float("nan"), "value": share(sub) if sub else float("nan"),
        "ci95": cluster_boot(sub, share, n_boot, seed) if sub else [float("nan")] * 2}
  return out


def mass_table(m: dict) -> str:
  rows = [[name, fmt(v["token_share"]), fmt(v["abs_delta_share"])]
          for name, v in m["classes"].items()]
  s = ("\n### Where Σ|Δ| sits (token classes in priority order: a token counts in the first "
       "that holds)\n\n" + common.md_table(["tokens", "share of tokens", "share of Σ|Δ|"], rows))
  s += "\n" + common.md_table(["quantity", "value [95% CI]"], [
      ["criterion tokens' share of Σ|Δ|", fmt(m["criterion_share"])],
      ["ceiling: the same number of tokens with the largest |Δ| (pooled)",
       fmt(m["oracle_ceiling_pooled"])],
      ["ceiling, each response's own count", fmt(m["oracle_ceiling_per_response"])],
      [f"criterion share, answers that ended (n = {m['criterion_share_complete']['n_responses']}"
       f"; {100 * m['criterion_share_complete']['token_share']:.1f} % of their tokens)",
       fmt(m["criterion_share_complete"])],
      [f"criterion share, answers cut at max_new_tokens (n = "
       f"{m['criterion_share_cut']['n_responses']}; "
       f"{100 * m['criterion_share_cut']['token_share']:.1f} % of their tokens)",
       fmt(m["criterion_share_cut"])]])
  return s


def analyse(out: str, tok=None) -> dict:
  """Adds `mass_analysis` to `out`/results.json and its table to table.md, from the committed
  responses (nothing regenerated): `python -m experiments.cort_delta --analyse`."""
  if tok is None:
    from rljax.models.bundled import smollm2_path
    from rljax.models.tokenizer import load_tokenizer
    tok = load_tokenizer(smollm2_path())
  path = f"{out}/results.json"
  res = json.load(open(path))
  cache: dict = {}
  is_newline = lambda i: cache.setdefault(int(i), "\n" in tok.decode([int(i)]))
  res["mass_analysis"] = mass_analysis(
      [dict(r, eos=tok.eos_token_id) for r in res["responses"]], is_newline,
      res["config"]["n_boot"], res["config"]["seed"])
  with open(f"{out}/table.md", "w") as f:
    f.write(f"# Study 2: CoRT Figure 1 analogue (SmolLM2-135M)\n\n{tables(res)}"
            f"{mass_table(res['mass_analysis'])}")
  common.write_json(path, res)
  return res


def run(out: str, quick: bool = False, seed: int = 0, study: str = STUDY, **over) -> dict:
  """`over`: config entries on top of the committed design (e.g. `cort_delta_eos`'s)."""
  timer = common.Timer()
  cfg = {"model": "SmolLM2-135M-Instruct (bundled GGUF, float32)", "split": "heldout",
         "n_prompts": 4 if quick else 200, "max_new_tokens": 24 if quick else 96,
         "temperature": 0.7, "top_k": 0, "top_p": 1.0, "batch": 4 if quick else 20,
         "eta": 0.5, "tau": 1.0, "lambda": 1.0, "seed": seed, "n_boot": 50 if quick else 1000,
         "tries": 1, **over}
  recs, tok = collect(cfg, cache=os.path.join(out, "runs"))
  t_collect = timer()
  groups = [{"delta": r["delta"], "abs_delta": np.abs(r["delta"]), "w_raw": r["w_raw"],
             "label": r["label"]} for r in recs]
  res = {"study": study, "config": cfg,
         "mean_csr": float(np.mean([r["csr"] for r in recs])),
         "ended_fraction": float(np.mean([not r["truncated"] for r in recs])),
         "draws_mean": float(np.mean([r["tries"] for r in recs])),
         "overall": {k: class_stats(groups, k, cfg["n_boot"], seed)
                     for k in ("delta", "abs_delta", "w_raw")},
         "per_criterion": per_criterion(recs, cfg["n_boot"], seed)}
  heatmap(recs, tok, f"{out}/heatmap_w_tilde.png", 3 if quick else 5)
  histogram(recs, f"{out}/delta_hist.png")
  res["figures"] = ["heatmap_w_tilde.png", "delta_hist.png"]
  res["responses"] = [{"id": r["id"], "csr": r["csr"], "text": r["text"], "token_ids": r["ids"],
                       "truncated": r["truncated"], "tries": r["tries"],
                       "delta": np.round(r["delta"], 4), "label": r["label"],
                       "criteria": [{"id": c["id"], "satisfied": c["satisfied"],
                                     "label": c["label"].astype(np.int8),
                                     "delta_c": np.round(c["delta_c"], 4)}
                                    for c in r["criteria"]]} for r in recs]
  with open(f"{out}/table.md", "w") as f:
    f.write(f"# Study 2: CoRT Figure 1 analogue (SmolLM2-135M)\n\n{tables(res)}")
  res["environment"] = common.environment()
  res["runtime_s"] = {"generate_and_score": t_collect, "total": timer()}
  common.write_json(f"{out}/results.json", res)
  return analyse(out, tok)


def main(argv=None):
  import sys
  argv = list(sys.argv[1:] if argv is None else argv)
  if "--analyse" in argv:  # the mass analysis of the committed responses only
    argv.remove("--analyse")
    out = common.out_dir_for(STUDY, argv[argv.index("--out") + 1] if "--out" in argv else None)
    analyse(out)
    print(open(f"{out}/table.md").read())
    return
  common.study_main(STUDY, run, __doc__, argv)


if __name__ == "__main__":
  main()
