"""IFEval-style evaluation: prompt- and instruction-level accuracy, strict and loose.

The four headline numbers are IFEval's (the CoRT paper's IFEval-P / IFEval-I):
  prompt_level_{strict,loose}: fraction of prompts whose every instruction passes;
  instruction_level_{strict,loose}: fraction of all instructions that pass.
`per_instruction` and `per_category` (the id prefix, e.g. "length_constraints")
break instruction-level accuracy down by type.

Works on any records with `instruction_id_list`, `kwargs` and a response: the
held-out rubric split (examples + the model's responses) or an IFEval-format
JSONL file. Command line:
  python -m rljax.rewards.evaluation DATA.jsonl [RESPONSES.jsonl]
(RESPONSES in IFEval's {"prompt", "response"} format; without it DATA's lines
need a `response` field.)
"""
from __future__ import annotations

import collections
import json
import sys
from typing import Any, Mapping, Sequence

from rljax.rewards import jsonl, verifier


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

  prompt_ok = {"strict": 0, "loose": 0}
  inst_ok = {"strict": 0, "loose": 0}
  num_inst = 0
  by_id: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
  details = []
  for record, response in zip(records, responses):
    res = score_record(record, response)
    details.append(res)
    num_inst += len(res["strict"])
    for mode in ("strict", "loose"):
      prompt_ok[mode] += all(res[mode])
      inst_ok[mode] += sum(res[mode])
    for i, iid in enumerate(record["instruction_id_list"]):
      by_id[iid].update(count=1, strict=res["strict"][i], loose=res["loose"][i])

  def table(groups: Mapping[str, collections.Counter]) -> dict[str, dict[str, float]]:
    return {k: {"count": c["count"], "strict": c["strict"] / c["count"],
                "loose": c["loose"] / c["count"]} for k, c in sorted(groups.items())}

  by_cat: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
  for iid, c in by_id.items():
    by_cat[iid.split(":")[0]].update(c)
  n = len(records)
  out = {
      "prompt_level_strict": prompt_ok["strict"] / n,
      "instruction_level_strict": inst_ok["strict"] / max(num_inst, 1),
      "prompt_level_loose": prompt_ok["loose"] / n,
      "instruction_level_loose": inst_ok["loose"] / max(num_inst, 1),
      "num_prompts": n,
      "num_instructions": num_inst,
      "per_instruction": table(by_id),
      "per_category": table(by_cat),
  }
  if return_details:
    out["details"] = details
  return out


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
  argv = list(sys.argv[1:] if argv is None else argv)
  if not 1 <= len(argv) <= 2:
    print(__doc__, file=sys.stderr)
    return 2
  print(json.dumps(evaluate_jsonl(*argv), indent=2))
  return 0


if __name__ == "__main__":
  sys.exit(main())
