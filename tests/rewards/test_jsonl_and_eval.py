"""IFEval-format JSONL reading (clear errors, counted skips) and IFEval metrics."""
import json
import re

import pytest

from rljax import rewards
from rljax.rewards import evaluation, jsonl

# Hand-scored fixture (strict / loose per instruction):
#  A: no_comma F/F, existence T/T                     -> prompt strict F, loose F
#  B: quotation F/T ('**' hides the quotes)           -> prompt strict F, loose T
#  C: no_comma T/T, title T/T, end_checker T/T        -> prompt strict T, loose T
FIXTURE = [
    {"key": 1, "prompt": "A", "instruction_id_list": ["punctuation:no_comma", "keywords:existence"],
     "kwargs": [{}, {"keywords": ["river"]}], "response": "The river, flows"},
    {"key": 2, "prompt": "B", "instruction_id_list": ["startend:quotation"], "kwargs": [{}],
     "response": '**"Hi"**'},
    {"key": 3, "prompt": "C", "instruction_id_list": ["punctuation:no_comma",
                                                      "detectable_format:title",
                                                      "startend:end_checker"],
     "kwargs": [{}, {}, {"end_phrase": "Bye."}], "response": "<<T>>\nHello there\nBye."},
]


def _write(path, lines):
  path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
  return str(path)


def test_metrics_equal_hand_computed_values():
  m = rewards.evaluate(FIXTURE)
  assert m["num_prompts"] == 3 and m["num_instructions"] == 6
  assert m["prompt_level_strict"] == pytest.approx(1 / 3)
  assert m["instruction_level_strict"] == pytest.approx(4 / 6)
  assert m["prompt_level_loose"] == pytest.approx(2 / 3)
  assert m["instruction_level_loose"] == pytest.approx(5 / 6)
  per = m["per_instruction"]
  assert per["punctuation:no_comma"] == {"count": 2, "strict": 0.5, "loose": 0.5}
  assert per["startend:quotation"] == {"count": 1, "strict": 0.0, "loose": 1.0}
  assert per["keywords:existence"] == {"count": 1, "strict": 1.0, "loose": 1.0}
  cat = m["per_category"]
  assert cat["startend"] == {"count": 2, "strict": 0.5, "loose": 1.0}
  assert cat["detectable_format"] == {"count": 1, "strict": 1.0, "loose": 1.0}
  assert set(cat) == {"punctuation", "keywords", "startend", "detectable_format"}


def test_evaluate_with_separate_responses_and_details():
  records = [{k: v for k, v in r.items() if k != "response"} for r in FIXTURE]
  m = rewards.evaluate(records, [r["response"] for r in FIXTURE], return_details=True)
  assert m["details"][0] == {"strict": [False, True], "loose": [False, True]}
  with pytest.raises(ValueError, match="have no 'response'"):
    rewards.evaluate(records)
  with pytest.raises(ValueError, match="3 records but 1 responses"):
    rewards.evaluate(records, ["x"])


def test_evaluate_jsonl_files(tmp_path, capsys):
  data = _write(tmp_path / "data.jsonl", [json.dumps(r) for r in FIXTURE])
  m = rewards.evaluate_jsonl(data)
  assert m["prompt_level_loose"] == pytest.approx(2 / 3)
  assert m["read_report"]["records"] == 3
  # IFEval's two-file layout: input data + {"prompt", "response"} lines.
  inputs = _write(tmp_path / "input.jsonl", [json.dumps({k: v for k, v in r.items()
                                                         if k != "response"}) for r in FIXTURE])
  resp = _write(tmp_path / "resp.jsonl", [json.dumps({"prompt": r["prompt"],
                                                      "response": r["response"]})
                                          for r in FIXTURE])
  m2 = rewards.evaluate_jsonl(inputs, resp)
  assert m2["instruction_level_strict"] == pytest.approx(4 / 6)
  assert evaluation.main([inputs, resp]) == 0
  assert json.loads(capsys.readouterr().out)["num_prompts"] == 3
  partial = _write(tmp_path / "partial.jsonl", [json.dumps({"prompt": "A", "response": "x"})])
  with pytest.raises(ValueError, match=r"no response for 2 prompts .*keys \['2', '3'\]"):
    rewards.evaluate_jsonl(inputs, partial)


GOOD = json.dumps({"key": 7, "prompt": "Hi", "instruction_id_list": ["punctuation:no_comma"],
                   "kwargs": [{}]})


@pytest.mark.parametrize("line,reason,match", [
    ('{"prompt": "x", ', "malformed_json", r"bad\.jsonl:3: malformed JSON"),
    ("[1, 2]", "not_an_object", r"bad\.jsonl:3: a record must be a JSON object"),
    ('{"prompt": "x", "kwargs": []}', "missing_field",
     r"bad\.jsonl:3: missing field\(s\) \['instruction_id_list'\]"),
    ('{"prompt": "x", "instruction_id_list": ["nope:x"], "kwargs": [{}]}',
     "unknown_instruction", r"bad\.jsonl:3: unknown instruction id 'nope:x'; known ids: .*"
     r"punctuation:no_comma"),
    ('{"prompt": "x", "instruction_id_list": ["length_constraints:number_words"], '
     '"kwargs": [{"num_words": "ten", "relation": "at least"}]}', "bad_kwargs",
     r"bad\.jsonl:3: length_constraints:number_words: kwarg 'num_words' must be int"),
    ('{"prompt": "x", "instruction_id_list": ["length_constraints:number_words"], '
     '"kwargs": [{"num_words": 10}]}', "bad_kwargs", r"bad\.jsonl:3: .*missing kwarg 'relation'"),
    ('{"prompt": "x", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}, {}]}',
     "bad_kwargs", r"1 instruction ids but 2 kwargs"),
])
def test_bad_lines_raise_with_file_and_line(tmp_path, line, reason, match):
  path = _write(tmp_path / "bad.jsonl", [GOOD, "", line, GOOD.replace("7", "8")])
  with pytest.raises(jsonl.RecordError, match=match) as err:
    jsonl.read_ifeval_jsonl(path)
  assert err.value.reason == reason
  records, report = jsonl.read_ifeval_jsonl(path, on_invalid="skip")
  assert [r["key"] for r in records] == ["7", "8"]
  assert report.skipped == {reason: 1} and report.skipped_lines == [3]
  assert report.num_skipped == 1 and report.blank_lines == 1 and report.lines == 4
  assert re.search(r"2 records read, 1 skipped", report.summary())


def test_skip_counts_and_logs(tmp_path, caplog):
  path = _write(tmp_path / "mixed.jsonl", [GOOD, "{oops", "{oops", '"str"'])
  with caplog.at_level("WARNING"):
    records, report = jsonl.read_ifeval_jsonl(path, on_invalid="skip")
  assert len(records) == 1
  assert report.skipped == {"malformed_json": 2, "not_an_object": 1}
  assert "3 skipped" in caplog.text
  with pytest.raises(ValueError, match="on_invalid must be"):
    jsonl.read_ifeval_jsonl(path, on_invalid="ignore")


def test_response_file_errors(tmp_path):
  bad = _write(tmp_path / "r.jsonl", ['{"prompt": "a", "response": "x"}', '{"prompt": "b"}'])
  with pytest.raises(jsonl.RecordError, match=r"r\.jsonl:2: need string fields"):
    jsonl.read_responses_jsonl(bad)
  dup = _write(tmp_path / "d.jsonl", ['{"prompt": "a", "response": "x"}'] * 2)
  with pytest.raises(jsonl.RecordError, match=r"d\.jsonl:2: duplicate prompt"):
    jsonl.read_responses_jsonl(dup)


def test_require_response(tmp_path):
  path = _write(tmp_path / "nr.jsonl", [GOOD])
  with pytest.raises(jsonl.RecordError, match=r"missing field\(s\) \['response'\]"):
    jsonl.read_ifeval_jsonl(path, require_response=True)


def test_hf_style_kwargs_with_nulls(tmp_path):
  """The HF copy of IFEval fills every kwargs key with null; those keys are ignored."""
  rec = {"key": 1, "prompt": "p", "instruction_id_list": ["length_constraints:number_words"],
         "kwargs": [{"num_words": 3, "relation": "less than", "keywords": None,
                     "language": None}], "response": "one two"}
  path = _write(tmp_path / "hf.jsonl", [json.dumps(rec)])
  records, _ = jsonl.read_ifeval_jsonl(path, require_response=True)
  assert records[0]["kwargs"] == [{"num_words": 3, "relation": "less than"}]
  assert rewards.evaluate(records)["prompt_level_strict"] == 1.0
