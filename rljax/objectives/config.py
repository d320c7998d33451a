"""The config layer: plain names + kwargs -> a validated, hashable `Objective`.

`build_objective(...)` resolves every name against the registry (an unknown
name lists the valid ones), builds the frozen config dataclasses (an unknown
option lists the valid ones), and refuses incompatible combinations with a
reason. The rules are written against the registry entries' tags, never
against hard-coded lists of names. `validate(...)` does the same and returns
the warnings instead of emitting them.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence
import warnings

from rljax import registry
from rljax.objectives.advantages import AdvantageConfig, kept_advantages
from rljax.objectives.losses import LossConfig
from rljax.objectives.mismatch import BPOConfig
from rljax.objectives.transforms import chain, TokenTransform


@dataclasses.dataclass(frozen=True)
class Objective:
  """Everything the train step needs; hashable, so usable as a jit static arg."""
  advantage: str
  advantage_cfg: AdvantageConfig
  loss: str
  loss_cfg: LossConfig
  transforms: tuple[tuple[str, Any], ...] = ()
  group_size: int = 1

  def advantages(self, rewards_B, keep_B=None):
    """(adv_B, metrics) for a batch of whole groups; with `keep_B`, over the kept rows only
    (`kept_advantages`: the others get 0)."""
    if keep_B is not None:
      return kept_advantages(rewards_B, keep_B, self.group_size, self.advantage,
                             self.advantage_cfg)
    fn = registry.get("advantage", self.advantage)
    return fn(rewards_B, self.group_size, self.advantage_cfg)

  @property
  def rejects(self) -> bool:
    """Whether a transform rejects tokens or responses (registry tag `rejection`)."""
    return any("rejection" in registry.get("transform", n).tags for n, _ in self.transforms)

  @property
  def baseline_over_kept(self) -> bool:
    """Rejected responses are out of the group baseline (the rejection transforms'
    `baseline="kept"`, their default)."""
    return any(getattr(c, "baseline", None) == "kept" for n, c in self.transforms
               if "rejection" in registry.get("transform", n).tags)

  def token_transform(self) -> TokenTransform:
    """The chained token-advantage transform (init/update)."""
    return chain(*(registry.get("transform", n)(c) for n, c in self.transforms))

  def loss_fn(self, pol, batch):
    """(loss, metrics) = registered loss(pol, batch, loss_cfg)."""
    return registry.get("loss", self.loss)(pol, batch, self.loss_cfg)


def _names(transforms) -> tuple[str, ...]:
  if transforms is None:
    return ()
  if isinstance(transforms, str):
    return tuple(t.strip() for t in transforms.split(",") if t.strip())
  return tuple(transforms)


def _resolve(advantage: str, loss: str, transforms, num_generations: int,
             advantage_kwargs, loss_kwargs, transform_kwargs, sampler_topk: int,
             vocab_size) -> tuple[Objective, list[str]]:
  warn: list[str] = []

  def fail(msg):
    raise ValueError(f"invalid objective ({advantage} / {'+'.join(names) or '-'} / "
                     f"{loss}): {msg}")

  names = _names(transforms)
  adv_entry = registry.get("advantage", advantage)
  loss_entry = registry.get("loss", loss)
  t_entries = [registry.get("transform", n) for n in names]
  if not isinstance(num_generations, int) or num_generations < 1:
    fail(f"num_generations must be an int >= 1, got {num_generations!r}")
  if len(set(names)) != len(names):
    fail(f"a transform is listed twice: {list(names)}")
  transform_kwargs = dict(transform_kwargs or {})
  stray = sorted(set(transform_kwargs) - set(names))
  if stray:
    fail(f"options given for transforms not in the chain: {stray}")

  adv_kwargs = dict(advantage_kwargs or {})
  loss_kwargs = dict(loss_kwargs or {})
  if loss_kwargs.get("group_size", num_generations) != num_generations:
    fail("loss group_size must equal num_generations (leave it unset)")
  loss_kwargs["group_size"] = num_generations
  ltags = loss_entry.tags

  # REAL: labels from the sign of the unscaled advantage (as ms-swift does).
  if "sequence_classification" in ltags:
    scale = adv_kwargs.get("scale_rewards", adv_entry.make_config().scale_rewards)
    if scale != "none":
      warn.append(f"{loss} forces scale_rewards='none' (was {scale!r}): its labels "
                  "are the sign of the unscaled advantage")
      if "scale_rewards" not in adv_entry.fixed:
        adv_kwargs["scale_rewards"] = "none"
  adv_cfg = adv_entry.make_config(**adv_kwargs)
  loss_cfg = loss_entry.make_config(**loss_kwargs)

  t_cfgs = []
  for n, e in zip(names, t_entries):
    kw = dict(transform_kwargs.get(n, {}))
    if e.config_cls is BPOConfig:  # BPO's sign mask reuses the PPO clip range
      kw.setdefault("eps_low", loss_cfg.eps_low)
      kw.setdefault("eps_high", loss_cfg.eps_high)
    t_cfgs.append(e.make_config(**kw))

  def with_tag(tag):
    return [n for n, e in zip(names, t_entries) if tag in e.tags]

  if num_generations < 2 and advantage == "rloo":
    fail("rloo needs num_generations >= 2")
  if num_generations < 2:
    warn.append("num_generations = 1: every group has equal rewards, so every "
                "advantage is 0")
  if "sequence_classification" in ltags and with_tag("token_reweight"):
    fail(f"{loss} uses only the sign of the response advantage; token reweighting "
         f"{with_tag('token_reweight')} has no effect on it and is refused")
  for i, n in enumerate(names):
    if "replaces_advantage" in t_entries[i].tags and i > 0:
      fail(f"{n} replaces the token advantage, discarding {list(names[:i])} before it; "
           "put it first")
  mismatch = with_tag("mismatch_weight")
  if len(mismatch) > 1:
    fail(f"more than one mismatch correction {mismatch}: the ratio would be applied twice")
  if mismatch and loss_cfg.is_weight != "none":
    fail(f"{mismatch} and the loss's is_weight={loss_cfg.is_weight!r} both correct "
         "the sampler mismatch; keep one")
  if loss_cfg.is_weight != "none" and "uses_is_weight" not in ltags:
    fail(f"is_weight applies to pg / SC losses only; with {loss} use the tis / mis "
         "transforms")
  rejecting = with_tag("rejection")
  if rejecting:
    if "sequence_classification" in ltags:
      fail(f"{loss} classifies whole groups by the sign of their advantages; rejection "
           f"{rejecting} would leave the rejected rows in their group's classification")
    baselines = {getattr(c, "baseline") for n, c in zip(names, t_cfgs) if n in rejecting}
    if len(baselines) > 1:
      fail(f"the rejection transforms {rejecting} disagree on the group baseline "
           f"({sorted(baselines)}); give them the same baseline ('kept' or 'all')")
    if advantage not in ("grpo", "dr_grpo", "rloo") and "kept" in baselines:
      fail(f"baseline='kept' recomputes the group advantage over the kept responses, which "
           f"is defined for grpo, dr_grpo and rloo, not {advantage!r}; use baseline='all'")
  if "score_centering" in ltags and mismatch:
    fail(f"{mismatch} would multiply the already centered score, w·(z − m_q), whose "
         "sampler mean is not 0; use the loss's is_weight (sc_tis, topk_sc_mis, ...) "
         "so that the weighted score is centered, w z − m_w")
  if "needs_head" in ltags and sampler_topk == 0:
    fail(f"{loss} needs the sampler's top-k head recorded at sampling time "
         "(sampler_topk > 0, or -1 for the full distribution)")
  if "needs_full_head" in ltags and not (
      sampler_topk == -1 or (vocab_size is not None and sampler_topk >= vocab_size)):
    fail(f"{loss} is exact SC and needs the full recorded q (sampler_topk = -1 or "
         f"= vocab_size), got sampler_topk={sampler_topk}, vocab_size={vocab_size}; "
         "use topk_sc")
  if "gspo_token" in ltags and with_tag("seq_level"):
    fail(f"{with_tag('seq_level')} is a sequence-level IS weight; gspo_token already "
         "carries the sequence ratio sg(s_i) into every token, so the sequence-level "
         "correction would be applied twice; use token-level tis / mis")
  if "sequence_ratio" in ltags and with_tag("response_normalized"):
    fail(f"{loss} clips one ratio per response, so weights with per-response mean 1 "
         f"({with_tag('response_normalized')}) cancel exactly; use gspo_token")
  if loss == "dapo" and loss_cfg.beta > 0:
    warn.append("dapo is usually run without KL (beta = 0)")

  obj = Objective(advantage=advantage, advantage_cfg=adv_cfg, loss=loss,
                  loss_cfg=loss_cfg, transforms=tuple(zip(names, t_cfgs)),
                  group_size=num_generations)
  return obj, warn


def validate(*, advantage: str = "grpo", loss: str = "grpo",
             transforms: Sequence[str] | str | None = (), num_generations: int,
             advantage_kwargs: Mapping[str, Any] | None = None,
             loss_kwargs: Mapping[str, Any] | None = None,
             transform_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
             sampler_topk: int = 0, vocab_size: int | None = None) -> list[str]:
  """Raises ValueError on an invalid objective; returns the warnings."""
  return _resolve(advantage, loss, transforms, num_generations, advantage_kwargs,
                  loss_kwargs, transform_kwargs, sampler_topk, vocab_size)[1]


def build_objective(*, advantage: str = "grpo", loss: str = "grpo",
                    transforms: Sequence[str] | str | None = (), num_generations: int,
                    advantage_kwargs: Mapping[str, Any] | None = None,
                    loss_kwargs: Mapping[str, Any] | None = None,
                    transform_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
                    sampler_topk: int = 0, vocab_size: int | None = None) -> Objective:
  """A validated `Objective`; warnings are emitted with `warnings.warn`.

  sampler_topk: size of the sampler head recorded per token (0: none, -1: all).
  """
  obj, warn = _resolve(advantage, loss, transforms, num_generations, advantage_kwargs,
                       loss_kwargs, transform_kwargs, sampler_topk, vocab_size)
  for w in warn:
    warnings.warn(w, stacklevel=2)
  return obj


def catalog() -> str:
  """Markdown list of every registered objective name with its one-line formula."""
  lines = []
  for kind in ("advantage", "transform", "loss"):
    lines.append(f"### {kind}")
    for n in registry.names(kind):
      e = registry.get(kind, n)
      extra = {**e.defaults, **e.fixed}
      lines.append(f"- `{n}`: {e.doc}" + (f" ({extra})" if extra else ""))
  for kind in ("aggregation", "kl"):
    lines.append(f"### {kind}: " + ", ".join(f"`{n}`" for n in registry.names(kind)))
  return "\n".join(lines)
