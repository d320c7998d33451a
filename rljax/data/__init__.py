"""Prompt data for RL post-training: rubric prompts with rubric-free twins (CoRT),
math tasks, TFDS pipelines (array_record, no TensorFlow), group batching.

Rubric examples (rubric.py):
    for ex in generate_examples(seed, "train" | "heldout", num_examples): ...
  Each example is a dict: id, split, kind, base_request, instruction_id_list,
  kwargs (IFEval schema; what the "csr"/"aon" rewards read), criteria_text
  (natural-language criteria), criteria_spans ([start, end) of each criterion,
  with its leading "\\n", in prompt_plus), prompt_plus (x+: request + criteria),
  prompt_minus (x-: the request alone; identical to x+ with every span removed).
  Same (seed, split, index) -> same example; train and heldout use disjoint
  base requests (requests.py, base_requests.json).
    remove_criteria(ex, indices) -> str     x+ without those criteria
    ablations(ex) -> list[str]              one criterion removed at a time
    format_chat(ex, tokenizer, system=None, remove=None) -> (x+, x-) strings
  `tokenizer` is anything with apply_chat_template(messages, tokenize=False,
  add_generation_prompt=True), e.g. a transformers tokenizer.

Math tasks (math_tasks.py): generate_math(seed, split, n) -> dicts with id,
task ("arithmetic" | "countdown"), question, answer, numbers, target; scored
by the "math_accuracy" reward.

TFDS (tfds_builders.py, imported on first use): build_rubric / build_math /
build_jsonl(path, data_dir) write array_record files; data_source(builder or
its directory, split) reads them without TensorFlow; decode_record gives
plain Python dicts. Skipped JSONL records are counted in
builder.info.metadata["read_report"].

Iteration (pipeline.py):
    it = ShardedIterator(source, seed=0, shard_index=host, num_shards=hosts,
                         decode=decode_record)
    batches = GroupBatcher(it, batch_size=B, group_size=G)
    batch = next(batches)   # {"prompts": B // G distinct examples, "group_size": G}
    rows = repeat_groups(batch)   # B rows, prompt-major: group g = rows g*G..g*G+G-1
    state = batches.get_state()   # small JSON-serializable dict of ints
    batches.set_state(state)      # a restored run sees exactly the same next examples
"""
from rljax.data.criteria import register_criterion
from rljax.data.math_tasks import generate_math, make_math_example
from rljax.data.pipeline import (GroupBatcher, ShardedIterator, check_group_size, group_ids,
                                 repeat_groups)
from rljax.data.rubric import (ablations, chat_prompt, criteria_ids, format_chat,
                               generate_examples, make_example, remove_criteria)

_LAZY = ("build_rubric", "build_math", "build_jsonl", "data_source", "decode_record")


def __getattr__(name):
  if name in _LAZY:  # keeps tensorflow_datasets out of plain rubric/reward imports
    from rljax.data import tfds_builders
    return getattr(tfds_builders, name)
  raise AttributeError(f"module 'rljax.data' has no attribute {name!r}")


__all__ = [
    "GroupBatcher", "ShardedIterator", "ablations", "chat_prompt", "check_group_size",
    "criteria_ids", "format_chat", "generate_examples", "generate_math", "group_ids",
    "make_example", "make_math_example", "register_criterion", "remove_criteria",
    "repeat_groups", *_LAZY,
]
