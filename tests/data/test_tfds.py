"""TFDS builders: array_record written and read back without TensorFlow."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from rljax.data import math_tasks, rubric

tfds = pytest.importorskip("tensorflow_datasets")
from rljax.data import tfds_builders as B  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Builds and reads all three datasets in a fresh interpreter after checking
# that tensorflow is not importable there, then reports what it read and
# whether anything loaded tensorflow. (Blocking an installed TF is not an
# option: TFDS probes `find_spec("tensorflow")` and then uses it.)
NO_TF_SCRIPT = textwrap.dedent("""
    import importlib.util, json, sys
    if importlib.util.find_spec("tensorflow") is not None:
      raise SystemExit("tensorflow is installed here; this check of the no-TensorFlow "
                       "path needs an environment without it (as requirements*.txt give)")
    import tensorflow_datasets as tfds
    tfds.disable_progress_bar()
    from rljax.data import tfds_builders as B
    data_dir, jsonl_path = sys.argv[1], sys.argv[2]
    rub = B.build_rubric(data_dir, seed=5, num_train=12, num_heldout=4)
    mat = B.build_math(data_dir, seed=5, num_train=6, num_heldout=2)
    jl = B.build_jsonl(jsonl_path, data_dir, on_invalid="skip")
    src = tfds.data_source(f"rljax_rubric/{rub.builder_config.name}", data_dir=data_dir,
                           split="train")
    out = {
        "rubric_train": sorted(B.decode_record(src[i])["id"] for i in range(len(src))),
        "rubric_heldout": [B.decode_record(r) for r in B.data_source(rub.data_dir, "heldout")],
        "math": sorted(B.decode_record(r)["id"] for r in B.data_source(mat, "train")),
        "jsonl": [B.decode_record(r) for r in B.data_source(jl.data_dir, "train")],
        "jsonl_report": tfds.builder_from_directory(jl.data_dir).info.metadata["read_report"],
        "files": sorted(p.name for p in __import__("pathlib").Path(rub.data_dir).iterdir()),
        "tf_loaded": "tensorflow" in sys.modules,
    }
    print("RESULT" + json.dumps(out))
""")

JSONL_LINES = [
    json.dumps({"key": 1, "prompt": "Say hi.", "instruction_id_list": ["punctuation:no_comma"],
                "kwargs": [{}], "response": "hi"}),
    "{not json",
    json.dumps({"key": 2, "prompt": "Count.",
                "instruction_id_list": ["length_constraints:number_words"],
                "kwargs": [{"num_words": 3, "relation": "at least"}]}),
    json.dumps({"key": 3, "prompt": "X", "instruction_id_list": ["ifbench:unknown"],
                "kwargs": [{}]}),
]


def _jsonl(tmp_path):
  path = tmp_path / "user.jsonl"
  path.write_text("\n".join(JSONL_LINES) + "\n", encoding="utf-8")
  return str(path)


def test_build_and_read_without_tensorflow(tmp_path):
  env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  proc = subprocess.run([sys.executable, "-c", NO_TF_SCRIPT, str(tmp_path / "data"),
                         _jsonl(tmp_path)], capture_output=True, text=True, env=env,
                        timeout=300, cwd=ROOT)
  assert proc.returncode == 0, proc.stderr[-3000:]
  out = json.loads(proc.stdout.split("RESULT", 1)[1])
  assert not out["tf_loaded"]
  assert any(".array_record-" in f for f in out["files"])
  assert out["rubric_train"] == sorted(e["id"] for e in rubric.generate_examples(5, "train", 12))
  expected = {e["id"]: e for e in rubric.generate_examples(5, "heldout", 4)}
  assert len(out["rubric_heldout"]) == 4
  for rec in out["rubric_heldout"]:
    assert rec == expected[rec["id"]]  # every field round-trips exactly
  assert out["math"] == sorted(e["id"] for e in math_tasks.generate_math(5, "train", 6))
  assert sorted(r["key"] for r in out["jsonl"]) == ["1", "2"]
  assert out["jsonl_report"]["skipped"] == {"malformed_json": 1, "unknown_instruction": 1}
  assert out["jsonl_report"]["skipped_lines"] == [2, 4]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
  tfds.disable_progress_bar()
  data_dir = str(tmp_path_factory.mktemp("tfds"))
  return data_dir, B.build_math(data_dir, seed=1, num_train=10, num_heldout=3)


def test_math_round_trip(built):
  _, builder = built
  expected = {e["id"]: e for e in math_tasks.generate_math(1, "heldout", 3)}
  src = B.data_source(builder, "heldout")
  assert len(src) == 3
  for i in range(3):
    rec = B.decode_record(src[i])
    assert rec == expected[rec["id"]]


def test_jsonl_builder_raises_with_file_and_line(built, tmp_path):
  data_dir, _ = built
  path = _jsonl(tmp_path)
  with pytest.raises(ValueError, match=r"user\.jsonl:2: malformed JSON"):
    B.build_jsonl(path, data_dir)
  jl = B.build_jsonl(path, data_dir, on_invalid="skip")
  assert jl.info.metadata["read_report"]["records"] == 2
  recs = {r["key"]: r for r in map(B.decode_record, B.data_source(jl, "train"))}
  assert recs["1"]["has_response"] and recs["1"]["response"] == "hi"
  assert not recs["2"]["has_response"]
  assert recs["2"]["kwargs"] == [{"num_words": 3, "relation": "at least"}]


def test_decode_record_types():
  import numpy as np
  rec = B.decode_record({"a": b"x", "b": np.array([b"p", b"q"], dtype=object),
                         "c": np.int64(3), "d": np.array([[1, 2]], np.int32),
                         "kwargs": b'[{"k": 1}]', "e": [b"z"]})
  assert rec == {"a": "x", "b": ["p", "q"], "c": 3, "d": [[1, 2]], "kwargs": [{"k": 1}],
                 "e": ["z"]}
