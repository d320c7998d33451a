"""HIR-style rubric prompts with rubric-free twins (CoRT, SPEC section 3).

An example is a base request plus 1..k checkable criteria, each phrased in
natural language from its verifier's kwargs:

  prompt_plus  (x+) = base_request + "\\n" + criterion_1 + "\\n" + criterion_2 ...
  prompt_minus (x-) = base_request          (every criterion removed)

`criteria_spans[j] = [start, end)` is the span of "\\n" + criterion_j in x+, so
removing any subset of spans gives exactly the prompt with those criteria left
out (`remove_criteria`); removing one at a time is per-criterion replay.
Examples are deterministic in (seed, split, index): example i depends only on
those, so any slice can be regenerated. Train and held-out use disjoint base
requests (requests.py).

Example dict keys: id, split, kind, base_request, instruction_id_list, kwargs
(list of dicts, IFEval schema), criteria_text, criteria_spans, prompt_plus,
prompt_minus.
"""
from __future__ import annotations

import itertools
import random
from typing import Any, Iterator, Mapping, Sequence

from rljax.data import criteria, requests
from rljax.rewards import verifier

SEPARATOR = "\n"
MAX_TRIES = 50


def _order(seed: int, split: str) -> list[int]:
  order = list(range(len(requests.split_requests(split))))
  random.Random(f"rljax-rubric-order:{seed}:{split}").shuffle(order)
  return order


def sample_criteria(rng: random.Random, base_request: str, num: int,
                    ids: Sequence[str]) -> list[tuple[str, dict[str, Any]]]:
  """Up to `num` mutually compatible (id, kwargs) pairs, drawn without replacement."""
  chosen: list[tuple[str, dict[str, Any]]] = []
  for iid in rng.sample(list(ids), len(ids)):
    if len(chosen) == num:
      break
    ctx = {"base_request": base_request, "ids": [c for c, _ in chosen] + [iid]}
    if any(criteria.conflicts(iid, c) for c, _ in chosen) or criteria.context_conflict(iid, ctx):
      continue
    for _ in range(MAX_TRIES):
      kw = criteria.get_criterion(iid).sample(rng, ctx)
      if criteria.kwargs_compatible(chosen + [(iid, kw)]):
        chosen.append((iid, verifier.get_verifier(iid).validate(kw)))
        break
  return chosen


def build_example(base_request: str, chosen: list[tuple[str, dict[str, Any]]],
                  rng: random.Random, **extra: Any) -> dict[str, Any]:
  """Phrases the criteria and assembles x+, x- and the spans."""
  texts = [criteria.get_criterion(i).phrase(kw, rng) for i, kw in chosen]
  prompt, spans = base_request, []
  for t in texts:
    spans.append([len(prompt), len(prompt) + len(SEPARATOR) + len(t)])
    prompt += SEPARATOR + t
  return {**extra, "base_request": base_request,
          "instruction_id_list": [i for i, _ in chosen], "kwargs": [kw for _, kw in chosen],
          "criteria_text": texts, "criteria_spans": spans,
          "prompt_plus": prompt, "prompt_minus": base_request}


def make_example(seed: int, split: str, index: int, *, min_criteria: int = 1,
                 max_criteria: int = 4, ids: Sequence[str] | None = None) -> dict[str, Any]:
  """Example `index` of the (seed, split) stream."""
  if not 1 <= min_criteria <= max_criteria:
    raise ValueError(f"need 1 <= min_criteria <= max_criteria, got {min_criteria}, "
                     f"{max_criteria}")
  ids = sorted(ids) if ids is not None else criteria_ids()
  unknown = sorted(set(ids) - set(criteria_ids()))
  if unknown:
    raise ValueError(f"no criterion for {unknown}; known: {', '.join(criteria_ids())}")
  pool = requests.split_requests(split)
  order = _order(seed, split)
  kind, base = pool[order[index % len(order)]]
  rng = random.Random(f"rljax-rubric:{seed}:{split}:{index}")
  chosen = sample_criteria(rng, base, rng.randint(min_criteria, max_criteria), ids)
  return build_example(base, chosen, rng, id=f"{split}-{seed}-{index:07d}", split=split,
                       kind=kind)


def generate_examples(seed: int, split: str, num_examples: int | None = None,
                      **kwargs: Any) -> Iterator[dict[str, Any]]:
  """Examples 0, 1, ... of the (seed, split) stream; endless if num_examples is None.

  Base requests are visited in a seeded order, each once per pass over the split.
  """
  indices = itertools.count() if num_examples is None else range(num_examples)
  for i in indices:
    yield make_example(seed, split, i, **kwargs)


def criteria_ids() -> list[str]:
  """Ids that have both a verifier and a criterion phrasing."""
  return sorted(set(criteria.registry.names(criteria.KIND)) & set(verifier.verifier_ids()))


def remove_criteria(example: Mapping[str, Any], indices: Sequence[int]) -> str:
  """x+ with the criteria at `indices` removed (all of them gives x-)."""
  spans = example["criteria_spans"]
  drop = sorted(set(int(i) for i in indices))
  bad = [i for i in drop if not 0 <= i < len(spans)]
  if bad:
    raise IndexError(f"criterion indices {bad} out of range for {len(spans)} criteria")
  text, out, pos = example["prompt_plus"], [], 0
  for i in drop:
    start, end = spans[i]
    out.append(text[pos:start])
    pos = end
  out.append(text[pos:])
  return "".join(out)


def ablations(example: Mapping[str, Any]) -> list[str]:
  """Per-criterion replay prompts: x+ with criterion j removed, for each j."""
  return [remove_criteria(example, [j]) for j in range(len(example["criteria_spans"]))]


def chat_prompt(text: str, tokenizer: Any, system: str | None = None) -> str:
  """One user turn (plus optional system turn) through the tokenizer's chat template."""
  messages = ([{"role": "system", "content": system}] if system else []) + [
      {"role": "user", "content": text}]
  return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def format_chat(example: Mapping[str, Any], tokenizer: Any, system: str | None = None,
                remove: Sequence[int] | None = None) -> tuple[str, str]:
  """Chat-formatted (x+, x-). With `remove`, x+ lacks those criteria (partial replay)."""
  plus = example["prompt_plus"] if remove is None else remove_criteria(example, remove)
  return (chat_prompt(plus, tokenizer, system),
          chat_prompt(example["prompt_minus"], tokenizer, system))
