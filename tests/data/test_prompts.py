"""Your prompts JSONL: x+ / x- from prompt_minus or rendered criteria; errors name file:line."""
import json
import os
import re

import pytest

from rljax.data.prompts import read_prompts
from rljax.rewards import jsonl

LOWER = {"instruction_id_list": ["change_case:english_lowercase"], "kwargs": [{}]}


def _write(tmp_path, lines, name="p.jsonl"):
  p = tmp_path / name
  p.write_bytes(b"".join((l if isinstance(l, bytes) else json.dumps(l).encode()) + b"\n"
                         for l in lines))
  return str(p)


def test_prompt_minus_and_rendered_criteria(tmp_path):
  p = _write(tmp_path, [{"prompt": "Name a city. Use lowercase.", "prompt_minus": "Name a city.",
                         "answer": "x"},
                        {"prompt": "Name a fruit.", **LOWER}])
  a, b = read_prompts(p)
  assert (a["prompt_plus"], a["prompt_minus"], a["answer"]) == (
      "Name a city. Use lowercase.", "Name a city.", "x")
  assert b["prompt_minus"] == "Name a fruit."
  assert b["prompt_plus"].startswith("Name a fruit.\n") and "lowercase" in b["prompt_plus"]
  s, e = b["criteria_spans"][0]
  assert b["prompt_plus"][:s] + b["prompt_plus"][e:] == b["prompt_minus"]
  assert read_prompts(p)[1]["prompt_plus"] == b["prompt_plus"]  # deterministic phrasing


def test_readme_example_file_is_valid():
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  assert len(read_prompts(os.path.join(root, "examples", "my_prompts.jsonl"))) == 5


@pytest.mark.parametrize("line,message", [
    ({"prompt_minus": "x"}, "needs a non-empty string 'prompt'"),
    ({"prompt": "x"}, "needs 'prompt_minus' .* or 'instruction_id_list'"),
    ({"prompt": "x", "instruction_id_list": ["count:numbers"], "kwargs": [{"N": 2}]},
     "no criterion phrasing for \\['count:numbers'\\]; give 'prompt_minus'"),
    ({"prompt": "x", "instruction_id_list": ["nope:x"], "kwargs": [{}]}, "unknown verifier"),
    (b'{"prompt": "caf\xe9"}', "not UTF-8"),
    (b'{"prompt": ', "malformed JSON"),
])
def test_bad_lines_name_file_and_line(tmp_path, line, message):
  p = _write(tmp_path, [{"prompt": "ok", "prompt_minus": "ok"}, line])
  with pytest.raises(jsonl.RecordError, match=re.escape(p) + ":2: .*" + message):
    read_prompts(p)


def test_empty_file(tmp_path):
  p = _write(tmp_path, [], "empty.jsonl")
  with pytest.raises(ValueError, match=re.escape(p) + ": no records"):
    read_prompts(p)
