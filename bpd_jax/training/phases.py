"""The phases of a training run, and the optimizer of each.

A run has up to two phases, in one step count and one checkpoint sequence:
- 'base' (train.base_steps): the whole model on the next-token loss.
- 'heads' (train.head_steps): the proposal heads, on a frozen base
  (train.freeze_base; the base parameters stay bit-identical) or with the
  whole model fine-tuned, on the mean loss of the heads (head 1 weighted by
  train.head1_weight when fine-tuning) or on one head drawn at random each
  step (train.random_head).
So `base_steps > 0, head_steps = 0` trains a base model (k = 1);
`base_steps = 0` with `train.init_from` trains heads on a base taken from
another run's checkpoint; both > 0 does base then heads (the demo).

Which plans are valid (a positive step count, heads to train, a trained
base under frozen heads) is checked once, by `config_checks`, before any
work: the functions here take a checked config.
"""

import dataclasses

import jax
import optax
from flax import nnx

from bpd_jax.training import optim

# The proposal heads' parameters: all that a frozen-base phase trains.
HEADS = nnx.PathContains('heads')


@dataclasses.dataclass(frozen=True)
class Phase:
  """Steps [start, end) of a run, and what they train."""
  name: str
  start: int
  end: int
  heads_only: bool  # Only the proposal heads' parameters change.
  first_head: int  # Loss on heads first_head .. first_head + num_heads - 1.
  num_heads: int

  @property
  def trainable(self):
    """The nnx filter of the parameters this phase updates."""
    return HEADS if self.heads_only else nnx.Param


def plan_phases(train_config, model_config) -> list[Phase]:
  """The phases of a run (see the module docstring).

  Args:
    train_config: the config's `train` section, checked by config_checks
      (`_check_phases`: the plan is valid).
    model_config: the run's TransformerConfig (num_proposal_heads,
      head1_from_base).
  """
  base, heads = train_config.base_steps, train_config.head_steps
  phases = []
  if base:
    phases.append(Phase('base', 0, base, False, 0, 1))
  if heads:
    frozen = train_config.freeze_base
    k = model_config.num_proposal_heads
    # A frozen head 1 that is the base output has nothing to learn.
    first = 1 if frozen and model_config.head1_from_base else 0
    phases.append(Phase('heads', base, base + heads, frozen, first,
                        k - first))
  return phases


def phase_at(phases: list[Phase], step: int) -> Phase:
  """The phase that trains step `step` (the last one past the end)."""
  return next((p for p in phases if p.start <= step < p.end), phases[-1])


def updates(train_config, phase: Phase) -> int:
  """Optimizer updates in a phase (micro-batches accumulate into one)."""
  return (phase.end - phase.start) // train_config.grad_accum_steps


def optimizer(train_config, phase: Phase) -> optax.GradientTransformation:
  """The phase's optimizer. Each phase starts with fresh moments, and a
  linear schedule decays to zero at the end of its own phase. A heads
  phase that fine-tunes the base moves the base at
  train.base_learning_rate_scale times the heads' rate: the heads start
  from nothing, the base is already trained."""
  fine_tunes_base = phase.name == 'heads' and not phase.heads_only
  scale = train_config.base_learning_rate_scale
  return optim.make_optimizer(
      train_config, updates(train_config, phase), slow_mask=_base_mask,
      slow_scale=scale if fine_tunes_base else 1.0)


def learning_rate(train_config, phase: Phase, step: int) -> float:
  """The rate of the last update made before step `step` of `phase` (the
  schedule counts updates from 0)."""
  update = (step - phase.start) // train_config.grad_accum_steps - 1
  return float(optim.schedule(train_config, updates(train_config, phase))(
      max(update, 0)))


def _base_mask(params):
  """True on the base's parameters, False on the heads' (optax.masked)."""
  heads, base = nnx.split_state(params, HEADS, ...)
  return nnx.merge_state(jax.tree.map(lambda _: False, heads),
                         jax.tree.map(lambda _: True, base))
