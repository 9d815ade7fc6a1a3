"""Training: phases, the jitted step, and the loop around it.

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

Everything a step needs is a function of (seed, step): the batch (see
data/batching.py), dropout and the random head. A checkpoint holds the
step, parameters and optimizer state, so a resumed run repeats the
uninterrupted one exactly. SIGTERM (preemption) saves before exiting; a
non-finite loss, or a non-finite parameter or optimizer state about to be
saved (the last update's, which no loss has seen yet), stops the run
without saving: no checkpoint holds a NaN.
"""

import contextlib
import dataclasses
import math
import os
import re
import signal
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import logging
from flax import nnx

from bpd_jax import tasks
from bpd_jax.infra import checkpoints as checkpoints_lib
from bpd_jax.infra import errors
from bpd_jax.infra import sharding
from bpd_jax.infra import workdir as workdir_lib
from bpd_jax.models import factory
from bpd_jax.models import Transformer, TransformerConfig
from bpd_jax.tasks import batching
from bpd_jax.training import losses
from bpd_jax.training import optim

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


def plan_phases(train_config, model_config: TransformerConfig) -> list[Phase]:
  """The phases of a run, validated."""
  base, heads = train_config.base_steps, train_config.head_steps
  if base < 0 or heads < 0 or base + heads == 0:
    raise errors.ConfigError(f'train.base_steps={base} and train.head_steps='
                             f'{heads} must be >= 0 with a positive sum.')
  k = model_config.num_proposal_heads
  phases = []
  if base:
    phases.append(Phase('base', 0, base, False, 0, 1))
  if heads:
    if k < 2:
      raise errors.ConfigError(f'train.head_steps={heads} needs proposal '
                               f'heads: model.num_proposal_heads={k} must be '
                               f'>= 2.')
    frozen = train_config.freeze_base
    if not base and not train_config.init_from and frozen:
      raise errors.ConfigError('heads on a frozen base need a trained base: '
                               'set train.init_from to its workdir, or '
                               'train.base_steps > 0, or '
                               'train.freeze_base=False to train the base '
                               'with its heads from the start.')
    # A frozen head 1 that is the base output has nothing to learn.
    first = 1 if frozen and model_config.head1_from_base else 0
    phases.append(Phase('heads', base, base + heads, frozen, first,
                        k - first))
  return phases


def phase_at(phases: list[Phase], step: int) -> Phase:
  """The phase that trains step `step` (the last one past the end)."""
  return next((p for p in phases if p.start <= step < p.end), phases[-1])


def train_batches(config, task, data_devices: int, log=print):
  """The run's training batches: step -> this process's rows.

  train.tokens_per_batch > 0: batches of about that many tokens, bucketed
  by length (train.bucket_lengths), from this process's shard of the
  training pairs; otherwise train.batch_size pairs padded to the task's
  max lengths.
  """
  train_config, task_config = config.train, config.task
  process_index, process_count = jax.process_index(), jax.process_count()
  # A language-model task says how wide its training prompts are (0 for
  # plain language modelling: no position spent on an empty prompt).
  source_len = getattr(task, 'train_prompt_len', task_config.max_source_len)
  tokens = train_config.get('tokens_per_batch', 0)
  if tokens:
    all_counts = None
    if process_count > 1:
      from jax.experimental import multihost_utils
      all_counts = multihost_utils.process_allgather
    data = batching.BucketedBatches(
        task.train_examples(process_index, process_count),
        train_config.bucket_lengths, tokens, source_len,
        task_config.max_target_len, config.seed,
        row_multiple=math.lcm(data_devices, process_count),
        process_index=process_index, process_count=process_count,
        all_counts=all_counts)
    log('Buckets (length: global rows): ' + ', '.join(
        f'{length}: {rows}' for length, rows in zip(data.boundaries,
                                                    data.rows)))
  else:
    if train_config.batch_size % data_devices:
      raise errors.ConfigError(f'train.batch_size={train_config.batch_size} '
                               f'must be a multiple of the {data_devices} '
                               f'devices of the data axis.')
    data = batching.TrainBatches(
        task.encoded('train'), train_config.batch_size, source_len,
        task_config.max_target_len, config.seed, process_index,
        process_count)
  if data.dropped:
    log(f'{data.dropped} training pairs longer than the task\'s max lengths '
        f'were left out.')
  return data


def make_train_step(graphdef, phase: Phase, tx, train_config, seed: int):
  """The pure step function of a phase: (state, batch) -> (state, metrics)."""
  trainable = HEADS if phase.heads_only else nnx.Param

  def step_fn(state, batch):
    key = jax.random.fold_in(jax.random.key(seed), state['step'])
    dropout_key, head_key = jax.random.split(key)
    params, frozen = nnx.split_state(state['params'], trainable, ...)

    def loss_fn(params):
      model = nnx.merge(graphdef, params, frozen)
      return losses.heads_loss(
          model, batch, first=phase.first_head, count=phase.num_heads,
          label_smoothing=train_config.label_smoothing,
          random_head=train_config.random_head, dropout_key=dropout_key,
          head_key=head_key, head1_weight=train_config.head1_weight,
          input_dropout=train_config.get('input_dropout', 0.0),
          position_fraction=train_config.head_position_fraction,
          head_targets=train_config.get('head_targets', 'data'),
          draft_inputs=train_config.get('draft_inputs', 'data'))

    (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    updates, opt_state = tx.update(grads, state['opt_state'], params)
    params = optax.apply_updates(params, updates)
    metrics = dict(metrics, loss=loss, grad_norm=optax.tree.norm(grads))
    new_state = dict(step=state['step'] + 1,
                     params=nnx.merge_state(params, frozen),
                     opt_state=opt_state)
    return new_state, metrics

  return step_fn


class _Preemption:
  """Remembers a SIGTERM so the loop can save and exit between steps."""

  def __init__(self):
    self.requested = False
    self._previous = signal.signal(signal.SIGTERM, self._handle)

  def _handle(self, signum, frame):
    del signum, frame
    logging.warning('SIGTERM: saving a checkpoint and exiting.')
    self.requested = True

  def restore(self):
    signal.signal(signal.SIGTERM, self._previous)


class Diverged(errors.JobError, FloatingPointError):
  """The loss, or a parameter or optimizer state, became NaN or
  infinite."""
  exit_code = 1  # The run diverged: not a mistake in the command.


class Preempted(Exception):
  """SIGTERM arrived; the state was saved. Rerun the job to resume."""


def train(config, workdir: str, log=print, evaluate=None):
  """Trains as `config` says, resuming from `workdir`; returns (model, task).

  The model returned has the final parameters (on the run's mesh).

  Args:
    config: the run's config (checked by config_checks).
    workdir: checkpoints, vocabulary and TensorBoard scalars go here.
    log: progress lines go here.
    evaluate: periodic evaluation, every eval.every steps:
      (model, task, step) -> {name: scalar}, written to TensorBoard and
      logged (e.g. `evaluation.periodic`); None: no evaluation.

  Raises:
    Preempted: SIGTERM arrived and the state was saved.
    Diverged: the loss, or the state to be saved, became NaN or infinite.
    errors.SaveError: a checkpoint could not be written.
    errors.CheckpointError: checkpoints exist but none reads back intact.
  """
  train_config = config.train
  mesh = sharding.make_mesh(config.mesh.shape, config.mesh.axes)
  data_sharding = sharding.batch_sharding(mesh, config.mesh.data_axis)
  log(f'Mesh {dict(mesh.shape)} over {jax.device_count()} devices in '
      f'{jax.process_count()} process(es); this is process '
      f'{jax.process_index()}.')
  task = tasks.load_task(config.task, workdir)
  tasks.check_loaded(config, task)  # Before training, not after it.
  workdir_lib.check_vocabulary(task.vocab, workdir, 'bpd_jax.main',
                               training=True, log=log,
                               write=jax.process_index() == 0)
  if train_config.init_from:
    workdir_lib.check_warm_start_vocabulary(task.vocab, train_config.init_from)
  model_config = factory.model_config_from(config, task.vocab.vocab_size)
  phases = plan_phases(train_config, model_config)
  data = train_batches(config, task, mesh.shape[config.mesh.data_axis], log)

  model = Transformer(model_config, rngs=nnx.Rngs(config.seed))
  graphdef, params = nnx.split(model)
  try:
    param_shardings = sharding.param_shardings(params, mesh,
                                               config.mesh.param_rules)
  except (ValueError, re.error) as error:  # Needs the parameters' shapes.
    raise errors.ConfigError(f'mesh.param_rules: {error}') from error
  # One optimizer a phase: each starts with fresh moments, and a linear
  # schedule decays to zero at the end of its own phase.
  optimizers = {phase: _optimizer(train_config, phase) for phase in phases}
  checkpoints = checkpoints_lib.Checkpoints(
      os.path.join(workdir, 'checkpoints'), train_config.keep_checkpoints,
      log=log, read_unverified=train_config.read_unverified)

  def new_state(params, phase):
    trainable = nnx.split_state(params, HEADS if phase.heads_only
                                else nnx.Param, ...)[0]
    return dict(step=jnp.asarray(phase.start, jnp.int32), params=params,
                opt_state=optimizers[phase].init(trainable))

  def state_shardings(phase):
    abstract = jax.eval_shape(lambda p: new_state(p, phase), params)
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    trainable = nnx.split_state(param_shardings, HEADS if phase.heads_only
                                else nnx.Param, ...)[0]
    # Optimizer moments are laid out like the parameters they follow.
    opt_shardings = optax.tree_map_params(
        optimizers[phase], lambda _, sharding: sharding,
        abstract['opt_state'], trainable,
        transform_non_params=lambda _: replicated)
    shardings = dict(step=replicated, params=param_shardings,
                     opt_state=opt_shardings)
    return shardings, abstract

  def abstract_at(step):
    shardings, abstract = state_shardings(phase_at(phases, step))
    return checkpoints_lib.abstract_like(abstract, shardings)

  # The newest step that reads back intact (a damaged one is reported, and
  # moved aside: the run will save that step number again).
  latest, state = checkpoints.restore_latest(
      abstract_at, set_aside=os.path.join(workdir, 'damaged_checkpoints'))
  if latest is not None:
    log(f'Resumed from step {latest} in {checkpoints.directory}.')
  else:
    if train_config.init_from:
      params = factory.warm_start(params, model_config,
                                  train_config.init_from,
                                  train_config.read_unverified)
      log(f'Warm start of the base from {train_config.init_from}.')
    phase = phases[0]
    shardings, _ = state_shardings(phase)
    state = jax.device_put(new_state(params, phase), shardings)

  total = phases[-1].end
  preemption = _Preemption()
  writer = _MetricWriter(workdir)
  try:
    step = int(state['step'])
    while step < total:
      phase = phase_at(phases, step)
      shardings, _ = state_shardings(phase)
      step_fn = jax.jit(make_train_step(graphdef, phase, optimizers[phase],
                                        train_config, config.seed),
                        in_shardings=(shardings, data_sharding),
                        out_shardings=(shardings, None), donate_argnums=0)
      log(f'Phase {phase.name!r}: steps {step}..{phase.end}, heads '
          f'{phase.first_head + 1}..{phase.first_head + phase.num_heads}'
          f'{" on a frozen base" if phase.heads_only else ""}.')
      state, step = _run_phase(
          config, phase, state, step_fn, data, data_sharding, checkpoints,
          preemption, writer, graphdef, task, evaluate, log)
      if step < total and phase_at(phases, step) is not phase:
        # The next phase starts with a fresh optimizer for its parameters;
        # the boundary checkpoint holds that state, so that a restore of
        # step `step` finds the optimizer state of the phase it resumes.
        following = phase_at(phases, step)
        state = jax.device_put(new_state(state['params'], following),
                               state_shardings(following)[0])
      _save(checkpoints, step, state)  # A phase's end, or a preemption.
      if preemption.requested:
        break
    checkpoints.close()  # Waits: a failed last save is raised here.
  except BaseException:
    # The error in flight says what went wrong; saves still running finish
    # (or fail) quietly.
    with contextlib.suppress(Exception):
      checkpoints.close()
    raise
  finally:
    preemption.restore()
    writer.close()
  if preemption.requested:
    raise Preempted(f'preempted: saved step {step} in '
                    f'{checkpoints.directory}; rerun the same command to '
                    f'resume.')
  return nnx.merge(graphdef, state['params']), task


def _run_phase(config, phase, state, step_fn, data, data_sharding,
               checkpoints, preemption, writer, graphdef, task, evaluate, log):
  """Steps to the end of `phase` (or a preemption); returns (state, step).

  Saves every train.checkpoint_every steps inside the phase; the caller
  saves at its end.
  """
  train_config = config.train
  step = int(state['step'])
  sums, window_start, window_steps = None, time.perf_counter(), 0
  while step < phase.end and not preemption.requested:
    batch = sharding.global_batch(data(step), data_sharding)
    state, metrics = step_fn(state, batch)
    step += 1
    window_steps += 1
    sums = metrics if sums is None else jax.tree.map(jnp.add, sums, metrics)
    at_end = step == phase.end or preemption.requested
    save = not at_end and step % train_config.checkpoint_every == 0
    if at_end or save or step % train_config.log_every == 0:
      # Also checks the loss (and the gradients' norm) before any save and
      # before they are written: a non-finite one stops here.
      summary = _summarize(jax.device_get(sums), window_steps,
                           time.perf_counter() - window_start, train_config,
                           phase, step)
      bad = next((name for name, value in summary.items()
                  if not np.isfinite(value)), None)
      if bad is not None:
        raise Diverged(f'{bad} is {summary[bad]} at step {step}; stopped '
                       f'without saving. {_last_good(checkpoints)}')
      writer.write(step, summary)
      log(_progress_line(summary, step, phase.end))
      sums, window_start, window_steps = None, time.perf_counter(), 0
    if save:
      _save(checkpoints, step, state)
    checkpoints.check()  # A background save that failed stops the run now.
    if (evaluate is not None and config.eval.every
        and step % config.eval.every == 0 and not preemption.requested):
      values = evaluate(nnx.merge(graphdef, state['params']), task, step)
      writer.write(step, values)
      log(f'eval at step {step}: ' + ', '.join(f'{n} {v}'
                                               for n, v in values.items()))
  return state, step


def _save(checkpoints, step: int, state) -> None:
  """Saves `state` as step `step` unless a float in it is NaN or infinite.

  The loss is checked before a save too, but it is computed before the
  step's update: an update that overflows float32 would be saved unseen
  (train.learning_rate=inf did this), and every later job would load it.

  Raises:
    Diverged: naming the step and the last good checkpoint.
  """
  if not bool(_all_finite(state)):
    raise Diverged(f'a parameter or optimizer state is NaN or infinite '
                   f'after step {step}; stopped without saving. '
                   f'{_last_good(checkpoints)}')
  checkpoints.save(step, state)


@jax.jit
def _all_finite(tree) -> jax.Array:
  """Whether every float of `tree` is finite: one bool, reduced on the
  devices that hold the arrays."""
  finite = [jnp.isfinite(leaf).all() for leaf in jax.tree.leaves(tree)
            if jnp.issubdtype(leaf.dtype, jnp.inexact)]
  return jnp.all(jnp.stack(finite)) if finite else jnp.bool_(True)


def _last_good(checkpoints) -> str:
  """Where a diverged run can resume from: its newest checkpoint (every
  save is checked finite), or that it has none."""
  step = checkpoints.latest_step()
  if step is None:
    return f'No checkpoint was saved yet in {checkpoints.directory}.'
  return (f'The last good checkpoint is step {step} in '
          f'{checkpoints.directory}.')


def _updates(train_config, phase) -> int:
  """Optimizer updates in a phase (micro-batches accumulate into one)."""
  return (phase.end - phase.start) // train_config.grad_accum_steps


def _optimizer(train_config, phase: Phase) -> optax.GradientTransformation:
  """The phase's optimizer. A heads phase that fine-tunes the base moves
  the base at train.base_learning_rate_scale times the heads' rate: the
  heads start from nothing, the base is already trained."""
  fine_tunes_base = phase.name == 'heads' and not phase.heads_only
  scale = train_config.get('base_learning_rate_scale', 1.0)
  return optim.make_optimizer(
      train_config, _updates(train_config, phase), slow_mask=_base_mask,
      slow_scale=scale if fine_tunes_base else 1.0)


def _base_mask(params):
  """True on the base's parameters, False on the heads' (optax.masked)."""
  heads, base = nnx.split_state(params, HEADS, ...)
  return nnx.merge_state(jax.tree.map(lambda _: False, heads),
                         jax.tree.map(lambda _: True, base))


def _summarize(sums, steps, elapsed, train_config, phase, step) -> dict:
  tokens = sums['tokens']
  trained = tokens > 0
  summary = dict(
      loss=float(sums['loss']) / steps,
      grad_norm=float(sums['grad_norm']) / steps,
      # The rate of the last update made (the schedule counts from 0).
      learning_rate=float(optim.schedule(
          train_config, _updates(train_config, phase))(max(
              (step - phase.start) // train_config.grad_accum_steps - 1, 0))),
      steps_per_s=steps / elapsed,
      tokens_per_s=float(tokens.max()) / elapsed)
  for head in np.flatnonzero(trained):
    summary[f'loss/head{head + 1}'] = float(sums['loss_sum'][head] /
                                            tokens[head])
    summary[f'accuracy/head{head + 1}'] = float(sums['correct'][head] /
                                                tokens[head])
  return summary


def _progress_line(summary, step, phase_end) -> str:
  accuracies = ' '.join(f'{summary[k]:.2f}' for k in sorted(summary)
                        if k.startswith('accuracy/'))
  eta = (phase_end - step) / max(summary['steps_per_s'], 1e-9)
  return (f'step {step}/{phase_end} | loss {summary["loss"]:.3f} | acc per '
          f'head {accuracies} | lr {summary["learning_rate"]:.2e} | '
          f'{summary["steps_per_s"]:.1f} steps/s | '
          f'{summary["tokens_per_s"]:.0f} tok/s | phase ends in {eta:.0f}s')


class _MetricWriter:
  """TensorBoard scalars (process 0 only)."""

  def __init__(self, workdir):
    self._writer = None
    if jax.process_index() == 0:
      import tensorboardX  # Imported here: only the writing process needs it.
      self._writer = tensorboardX.SummaryWriter(os.path.join(workdir, 'tb'))

  def write(self, step, scalars):
    if self._writer is not None:
      for name, value in scalars.items():
        self._writer.add_scalar(name, value, step)
      self._writer.flush()

  def close(self):
    if self._writer is not None:
      self._writer.close()
