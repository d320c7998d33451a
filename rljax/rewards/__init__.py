"""Verifiers and rewards on decoded text (no JAX, no model, fully offline).

Verifiers (kind "verifier", one per instruction id; all 25 IFEval types and all 58
IFBench types, ifbench_words.py / ifbench_format.py):

    v = get_verifier("length_constraints:number_words")
    v.check(response, {"num_words": 100, "relation": "at least"}, mode="strict") -> bool
    check_all(response, instruction_id_list, kwargs_list, mode) -> list[bool]

kwargs follow IFEval's JSONL schema; missing, unexpected or wrongly typed
kwargs raise ValueError naming the id and what was expected; an unknown id
raises ValueError listing the known ids. `mode` is IFEval's "strict" (response
as is) or "loose" (any of 8 trimmed / de-starred variants). A new verifier is
a `Verifier` subclass with `id`, `args` and `_check`, decorated with
`@register_verifier`.

Rewards (kind "reward": "csr", "aon", "math_accuracy"):

    rewards_N, info = get_reward("csr", mode="strict")(responses, examples, num_threads=4)

`responses`: N strings; `examples`: N dicts (IF rewards read
`instruction_id_list` and `kwargs`; math reads `answer`, or `task="countdown"`
with `numbers` and `target`). `rewards_N` is float32 [N]; `info` holds
per-response values for logging: for csr/aon `info["criteria"][n]` is the list
of per-criterion booleans (ids in `info["instruction_ids"][n]`), `info["csr"]`
and `info["aon"]` float arrays; both rewards take `mode="strict" | "loose"`. A new reward is
a per-response function decorated with `@register_reward("name")` (see
reward_fn.py).

Evaluation: `evaluate(records, responses)` / `evaluate_jsonl(path)` give IFEval
prompt- and instruction-level accuracy, strict and loose, with per-type tables;
`records` may be held-out rubric examples (rljax.data.generate_examples(seed,
"heldout", n)) or IFEval-format JSONL records (read_ifeval_jsonl).

Backend decision: verifiers are implemented here, not delegated to
`if-verifiable`. That package imports HuggingFace `datasets` at import time and
needs NLTK's Punkt data (downloaded at run time) for two checks; it is used in
the tests as an independent oracle instead. Runtime needs: numpy, and
`langdetect` for the three language checks (imported lazily, runs offline).
"""
from rljax.rewards import ifeval_content, ifeval_format  # noqa: F401  (registers verifiers)
from rljax.rewards import ifbench_format, ifbench_words  # noqa: F401  (IFBench's 58 types)
from rljax.rewards import math_reward  # noqa: F401  (registers math_accuracy)
from rljax.rewards.jsonl import ReadReport, RecordError, read_ifeval_jsonl
from rljax.rewards.math_reward import answers_match, countdown_correct, extract_answer
from rljax.rewards.reward_fn import (Reward, RewardError, get_reward, register_reward,
                                     reward_names)
from rljax.rewards.verifier import (MODES, Arg, Verifier, check_all, get_verifier,
                                    register_verifier, validate_instructions, verifier_ids)



def __getattr__(name):
  if name in ("evaluate", "evaluate_jsonl"):  # lazy: `python -m rljax.rewards.evaluation`
    from rljax.rewards import evaluation
    return getattr(evaluation, name)
  raise AttributeError(f"module 'rljax.rewards' has no attribute {name!r}")


__all__ = [
    "Arg", "MODES", "ReadReport", "RecordError", "Reward", "RewardError",
    "Verifier", "answers_match",
    "check_all", "countdown_correct", "evaluate", "evaluate_jsonl", "extract_answer",
    "get_reward", "get_verifier", "read_ifeval_jsonl", "register_reward",
    "register_verifier", "reward_names", "validate_instructions", "verifier_ids",
]
