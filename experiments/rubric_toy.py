"""A synthetic rubric language small enough to train a tiny decoder on 2 CPU cores.

A prompt is `<bos> R c* <ans>`: a request token R (which picks a *topic*, the 8 content
tokens an unconstrained answer uses) and 1–3 criteria, each one token `c = (type, k)` for a
type below and a content token k (one token per pair, so that a 2-layer decoder can learn to
read it in a few hundred supervised steps). A response is content tokens then `<eos>`. The
criteria:

  start k    the first content token is k
  end k      the last content token is k
  contain k  k occurs somewhere
  exclude k  k does not occur

A prompt has at most one criterion of each type and distinct tokens, so every prompt is
satisfiable. Rewards (as in the CoRT paper): CSR = fraction of the criteria satisfied, AON
= 1 iff all are. The rubric-free replay prompt x⁻ is the prompt without its criteria
(`<bos> R <ans>`); the per-criterion ablation drops criterion j only.

The supervised warm start (`sft_response`) answers with the topic's random tokens and
enforces each criterion with probability `p_follow` (`toy_rl.SFT` uses 1, and stops after
400 steps: the tiny decoder then follows `start` almost always and the other criteria only
partly, so RL has room to improve and the rubric visibly shifts the criterion tokens'
log-probabilities, which is what CoRT's Δ reads).
"""
from __future__ import annotations

import zlib
from typing import NamedTuple, Sequence

import numpy as np

PAD, EOS, BOS, ANS = 0, 1, 2, 3
NUM_REQUESTS, NUM_CONTENT, TOPIC_SIZE = 4, 16, 8
REQ0 = 4
TYPES = ("start", "end", "contain", "exclude")
CRIT0 = REQ0 + NUM_REQUESTS                 # 8..71: criterion (type t, k) = CRIT0 + 16 t + k
CONTENT0 = CRIT0 + len(TYPES) * NUM_CONTENT  # 72..87
VOCAB = 96                                  # 88..95 unused (a round embedding size)
MAX_CRITERIA, MAX_LEN = 3, 8
MAX_PROMPT = 3 + MAX_CRITERIA               # <bos> R c c c <ans>


class Prompt(NamedTuple):
  request: int                              # 0..NUM_REQUESTS-1
  criteria: tuple[tuple[str, int], ...]     # (type, content index 0..NUM_CONTENT-1)


def topic(request: int) -> list[int]:
  """The content indices an unconstrained answer to `request` draws from (halves overlap)."""
  return [(4 * request + i) % NUM_CONTENT for i in range(TOPIC_SIZE)]


def satisfied(criterion: tuple[str, int], content: Sequence[int]) -> bool:
  """Whether the content indices of a response (eos and padding removed) satisfy it."""
  kind, k = criterion
  c = list(content)
  if kind == "start":
    return len(c) > 0 and c[0] == k
  if kind == "end":
    return len(c) > 0 and c[-1] == k
  if kind == "contain":
    return k in c
  if kind == "exclude":
    return k not in c
  raise ValueError(f"unknown criterion type {kind!r}; valid: {TYPES}")


def response_content(token_ids: Sequence[int]) -> list[int]:
  """Content indices of a sampled response: tokens up to the first eos; a token that is not
  a content token (a prompt token emitted by mistake) counts as a non-matching word (-1)."""
  out = []
  for t in token_ids:
    t = int(t)
    if t in (EOS, PAD):
      break
    out.append(t - CONTENT0 if CONTENT0 <= t < CONTENT0 + NUM_CONTENT else -1)
  return out


def score(prompt: Prompt, token_ids: Sequence[int]) -> np.ndarray:
  """0/1 per criterion of `prompt` for one response (token ids)."""
  c = response_content(token_ids)
  return np.array([satisfied(cr, c) for cr in prompt.criteria], np.float32)


def rewards(prompts: Sequence[Prompt], responses: Sequence[Sequence[int]]) -> dict:
  """{csr_B, aon_B, hits (list of 0/1 arrays)} for response i answering prompts[i]."""
  hits = [score(p, r) for p, r in zip(prompts, responses)]
  return {"csr_B": np.array([h.mean() for h in hits], np.float32),
          "aon_B": np.array([float(h.all()) for h in hits], np.float32), "hits": hits}


def eval_metrics(prompts: Sequence[Prompt], responses: Sequence[Sequence[int]]) -> dict:
  """Held-out CSR (mean fraction), AON = prompt-level accuracy, instruction-level accuracy
  (all criteria pooled), and the accuracy per criterion type."""
  r = rewards(prompts, responses)
  pooled = np.concatenate(r["hits"])
  out = {"csr": float(r["csr_B"].mean()), "aon": float(r["aon_B"].mean()),
         "instruction_acc": float(pooled.mean())}
  for kind in TYPES:
    h = [float(x) for p, hs in zip(prompts, r["hits"]) for (t, _), x in zip(p.criteria, hs)
         if t == kind]
    out[f"acc/{kind}"] = float(np.mean(h)) if h else float("nan")
  return out


# ----------------------------------------------------------------------- prompts


def tokens(prompt: Prompt, drop: Sequence[int] = ()) -> list[int]:
  """Prompt token ids; `drop` removes those criteria (all of them: the replay prompt x⁻)."""
  ids = [BOS, REQ0 + prompt.request]
  for j, (kind, k) in enumerate(prompt.criteria):
    if j not in drop:
      ids.append(CRIT0 + NUM_CONTENT * TYPES.index(kind) + k)
  return ids + [ANS]


def plus_tokens(p: Prompt) -> list[int]:
  return tokens(p)


def minus_tokens(p: Prompt) -> list[int]:
  return tokens(p, drop=range(len(p.criteria)))


def ablation_tokens(p: Prompt) -> list[list[int]]:
  """x⁺ minus criterion j, for each j (per-criterion replay)."""
  return [tokens(p, drop=(j,)) for j in range(len(p.criteria))]


def _key(p: Prompt) -> int:
  return zlib.crc32(repr(tuple(p)).encode())


def is_heldout(p: Prompt) -> bool:
  """1 in 8 prompts (by a hash of the prompt) is held out: never trained on."""
  return _key(p) % 8 == 0


def random_prompt(rng: np.random.Generator, max_criteria: int = MAX_CRITERIA) -> Prompt:
  n = int(rng.integers(1, max_criteria + 1))
  kinds = rng.choice(len(TYPES), size=n, replace=False)
  toks = rng.choice(NUM_CONTENT, size=n, replace=False)
  return Prompt(int(rng.integers(NUM_REQUESTS)),
                tuple((TYPES[int(a)], int(b)) for a, b in zip(kinds, toks)))


def prompts(rng: np.random.Generator, n: int, heldout: bool) -> list[Prompt]:
  """n prompts from the train (heldout=False) or held-out split."""
  out = []
  while len(out) < n:
    p = random_prompt(rng)
    if is_heldout(p) == heldout:
      out.append(p)
  return out


# ----------------------------------------------------------------------- warm start


def sft_response(p: Prompt, rng: np.random.Generator, p_follow: float, min_len: int = 4,
                 max_len: int = MAX_LEN) -> list[int]:
  """A supervised answer: `min_len`–`max_len` topic tokens (4–8: the short toy), each
  criterion enforced with prob `p_follow`."""
  length = int(rng.integers(min_len, max_len + 1))
  c = [int(x) for x in rng.choice(topic(p.request), size=length)]
  follow = {kind: k for kind, k in p.criteria if rng.random() < p_follow}
  reserved = set()
  if "start" in follow:
    c[0] = follow["start"]
    reserved.add(0)
  if "end" in follow:
    c[-1] = follow["end"]
    reserved.add(length - 1)
  if "contain" in follow:
    free = [i for i in range(length) if i not in reserved]
    c[int(rng.choice(free))] = follow["contain"]
  if "exclude" in follow:
    k = follow["exclude"]
    others = [t for t in topic(p.request) if t != k]
    c = [int(rng.choice(others)) if (t == k and i not in reserved) else t
         for i, t in enumerate(c)]
  return [CONTENT0 + t for t in c] + [EOS]


def sft_example(rng: np.random.Generator, p_follow: float, p_rubric_free: float,
                min_len: int = 4, max_len: int = MAX_LEN):
  """(prompt ids, response ids); with prob `p_rubric_free` the prompt has no criteria (so
  the replay prompt x⁻ is in-distribution, as a rubric-free request is for an LLM)."""
  p = random_prompt(rng)
  while is_heldout(p):
    p = random_prompt(rng)
  if rng.random() < p_rubric_free:
    return minus_tokens(p), sft_response(Prompt(p.request, ()), rng, p_follow, min_len, max_len)
  return plus_tokens(p), sft_response(p, rng, p_follow, min_len, max_len)


# ----------------------------------------------------------------------- ground-truth credit


def credit_labels(prompt: Prompt, token_ids: Sequence[int]) -> np.ndarray:
  """1 on the response tokens that decide one of `prompt`'s criteria, else 0 (float32, one
  entry per token of `token_ids`): `start` — the first token; `end` — the last content
  token and the `<eos>` after it (the decision to stop there); `contain k` and `exclude k` —
  every occurrence of k (the tokens that satisfy, resp. violate, it). What only a synthetic
  task knows: the oracle arm's token credit (`oracle_credit`) and the yardstick of where a
  token-credit method puts its weight."""
  n = len(token_ids)
  out = np.zeros(n, np.float32)
  content = response_content(token_ids)
  m = len(content)  # tokens before the first eos / pad
  for kind, k in prompt.criteria:
    if m == 0:
      break
    if kind == "start":
      out[0] = 1.0
    elif kind == "end":
      out[m - 1] = 1.0
      if m < n and int(token_ids[m]) == EOS:
        out[m] = 1.0
    else:
      out[[i for i, c in enumerate(content) if c == k]] = 1.0
  return out
