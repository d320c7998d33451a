"""The RL loop's stages, each a small module of one job; `rljax.trainer` builds and runs them.

- `build`: model + tokenizer, data, objective / optimizer / step settings from a config
- `prompts`: examples -> left-padded, bucketed prompt token arrays (`Prompts`)
- `collect`: rollout + rewards + shaping + DAPO dynamic sampling (`Rollouts`)
- `assemble`: advantages + the typed `TrainBatch` (`batch`: its layout, shapes, shardings)
- `rljax.update.jit_update`: the update (μ = 1 fused step or μ > 1 scan), one signature
- `metrics`, `evaluate`: host metrics, held-out eval, the CoRT heat-map
- `run_state`: checkpoints, the skipped-update guard, preemption, named PRNG streams
"""
from rljax.loop.assemble import assemble
from rljax.loop.batch import BatchLayout, TrainBatch, layout_of, permute_rows
from rljax.loop.build import (Model, RunData, batch_layout, build_data, build_model,
                              build_step_parts, check_inputs, needs_ref_params)
from rljax.loop.collect import Collector, Rollouts, collect, common_prompt_lens, numeric_rows
from rljax.loop.collect import refill
from rljax.loop.evaluate import Evaluator, print_baseline, token_weight_heatmap
from rljax.loop.metrics import rollout_metrics, update_metrics
from rljax.loop.prompts import (PromptEncoder, Prompts, bucket_len, left_pad, left_pad_to,
                                trim_left)
from rljax.loop.run_state import (CollapseGuard, Keys, Preemption, RunCheckpoints, SkipGuard,
                                  TrainingAborted)

__all__ = ["assemble", "BatchLayout", "TrainBatch", "layout_of", "permute_rows", "Model",
           "RunData",
           "batch_layout", "build_data", "build_model", "build_step_parts", "check_inputs",
           "needs_ref_params",
           "Collector", "Rollouts", "collect", "common_prompt_lens", "numeric_rows", "refill",
           "Evaluator", "print_baseline", "token_weight_heatmap", "rollout_metrics",
           "update_metrics", "PromptEncoder", "Prompts", "bucket_len", "left_pad",
           "left_pad_to", "trim_left", "CollapseGuard", "Keys", "Preemption", "RunCheckpoints", "SkipGuard",
           "TrainingAborted"]
