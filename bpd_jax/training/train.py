"""Training: the loop over a run's phases, resumable.

`train` runs the phases of `phases.py` with the jitted step of `step.py`
over a device mesh. Everything a step needs is a function of (seed, step):
the batch (see tasks/batching.py), dropout and the random head. A
checkpoint holds the step, parameters and optimizer state, so a resumed run
repeats the uninterrupted one exactly; heads trained on a frozen imported
model save only themselves and their optimizer state, with the model's
folder and fingerprint, and a resume reads the base from that folder
(`factory.frozen_imported_base`). SIGTERM (preemption) saves before
exiting; a non-finite loss, or a non-finite parameter or optimizer state
about to be saved (the last update's, which no loss has seen yet), stops
the run without saving: no checkpoint holds a NaN.
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
from absl import logging
from flax import nnx

from bpd_jax.infra import checkpoints as checkpoints_lib
from bpd_jax.infra import errors
from bpd_jax.infra import sharding
from bpd_jax.models import drafters
from bpd_jax.models import factory
from bpd_jax.models import Transformer
from bpd_jax.tasks import batching
from bpd_jax.training import phases as phases_lib
from bpd_jax.training import runs
from bpd_jax.training import step as step_lib


def train_batches(config, task, data_devices: int, log=print):
  """The run's training batches: step -> this process's rows.

  train.tokens_per_batch > 0: batches of about that many tokens, bucketed
  by length (train.bucket_lengths), from this process's shard of the
  training pairs; otherwise train.batch_size pairs padded to the task's
  max lengths.
  """
  train_config, task_config = config.train, config.task
  process_index, process_count = jax.process_index(), jax.process_count()
  # 0 for plain language modelling: no position spent on an empty prompt.
  source_len = task.train_source_len(task_config.max_source_len)
  tokens = train_config.tokens_per_batch
  if tokens:
    all_counts = None
    if process_count > 1:
      from jax.experimental import multihost_utils
      all_counts = multihost_utils.process_allgather
    data = batching.BucketedBatches(
        task.train_examples(process_index, process_count),
        train_config.bucket_lengths, tokens, source_len,
        task_config.max_target_len, config.seed,
        pad_id=task.vocab.pad_id,
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
        task_config.max_target_len, config.seed, process_index=process_index,
        process_count=process_count, pad_id=task.vocab.pad_id)
  if data.dropped:
    log(f'{data.dropped} training pairs longer than the task\'s max lengths '
        f'(or without a target) were left out.')
  return data


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
    config: the run's config, checked by config_checks (the functions of
      the training library take a checked config).
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
  log(f'Mesh {dict(mesh.shape)} over {jax.device_count()} devices in '
      f'{jax.process_count()} process(es); this is process '
      f'{jax.process_index()}.')
  # Before any step: the task and vocabulary checked against the run's.
  task, model_config = runs.open_run(config, workdir, 'bpd_jax.main', None,
                                     log)
  phases = phases_lib.plan_phases(train_config, model_config)
  try:
    data = train_batches(config, task, mesh.shape[config.mesh.data_axis],
                         log)
  except errors.JobError:
    raise
  except ValueError as error:  # No training example to learn from.
    raise errors.DataError(str(error)) from error
  checkpoints = checkpoints_lib.Checkpoints(
      os.path.join(workdir, 'checkpoints'), train_config.keep_checkpoints,
      log=log, read_unverified=train_config.read_unverified)
  # Built (and warm-started) in the host's memory where the parameters
  # are split, then laid out over the mesh by `states.start`.
  with factory.build_place(config):
    graphdef, params = nnx.split(
        Transformer(model_config, rngs=nnx.Rngs(config.seed)))
    states = step_lib.TrainStates(
        phases, train_config, params,
        _param_shardings(config, params, mesh), mesh)
    state, base = _restore_or_start(config, workdir, checkpoints, states,
                                    params, model_config, log)
  run = _Run(config, workdir, states, graphdef, data,
             sharding.batch_sharding(mesh, config.mesh.data_axis),
             checkpoints, task, evaluate, log, base)
  state, step, preempted = _run_phases(run, state)
  if preempted:
    raise Preempted(f'preempted: saved step {step} in '
                    f'{checkpoints.directory}; rerun the same command to '
                    f'resume.')
  return nnx.merge(graphdef, state['params']), task


def _param_shardings(config, params, mesh):
  """A NamedSharding per parameter, by mesh.param_rules (a bad rule shows
  only against the parameters' shapes: a config error, raised here)."""
  try:
    return sharding.param_shardings(
        params, mesh, config.mesh.param_rules,
        model_rules=drafters.tensor_rules(config.model.head_layer))
  except (ValueError, re.error) as error:
    raise errors.ConfigError(f'mesh.param_rules: {error}') from error


def _restore_or_start(config, workdir, checkpoints, states, params,
                      model_config, log):
  """(state, base): the state to go on from, and the `factory.base_record`
  its saves carry (None: they hold the whole model).

  The state is the newest step that reads back intact (a damaged one is
  reported, and moved aside: the run will save that step number again),
  its frozen imported base read from the folder it records; else the
  first phase's start, from train.init_from's base where set.
  """
  train_config = config.train

  def abstract_for(step):
    abstract = states.abstract_at(step)
    if factory.BASE_RECORD in checkpoints.meta(step):  # The heads alone.
      abstract = dict(abstract, params=factory.heads_of(abstract['params']))
    return abstract

  latest, state = checkpoints.restore_latest(
      abstract_for, set_aside=os.path.join(workdir, 'damaged_checkpoints'))
  if latest is not None:
    log(f'Resumed from step {latest} in {checkpoints.directory}.')
    base = checkpoints.meta(latest).get(factory.BASE_RECORD)
    if base is not None:
      state = _with_base(state, params, model_config, base, latest, states,
                         checkpoints, train_config)
    elif factory.frozen_imported_base(train_config):
      # A checkpoint saved whole by an older version: later saves hold
      # the heads, with the base it restored.
      base = factory.base_record(state['params'], train_config.init_from)
    return state, base
  base = None
  if train_config.init_from:
    init_heads = train_config.init_heads
    params = factory.warm_start(params, model_config, train_config.init_from,
                                train_config.read_unverified, heads=init_heads)
    log(f'Warm start of the base{" and its heads" if init_heads else ""} '
        f'from {train_config.init_from}.')
    if factory.frozen_imported_base(train_config):
      base = factory.base_record(params, train_config.init_from)
  return states.start(params, states.phases[0]), base


def _with_base(state, params, model_config, base, step, states, checkpoints,
               train_config):
  """A restored state of the heads alone, with the frozen base its
  checkpoint records (`factory.with_recorded_base`), laid out over the
  mesh."""
  where = f'checkpoint step {step} in {checkpoints.directory}'
  params = factory.with_recorded_base(params, model_config, base, where,
                                      [train_config.init_from])
  base_params = nnx.split_state(params, phases_lib.HEADS, ...)[1]
  state = dict(state, params=nnx.merge_state(state['params'], base_params))
  shardings = states.shardings(phases_lib.phase_at(states.phases, step))[0]
  return jax.device_put(state, shardings)


@dataclasses.dataclass(frozen=True)
class _Run:
  """What the loop over a run's phases reads."""
  config: object
  workdir: str
  states: step_lib.TrainStates
  graphdef: object
  data: object  # step -> this process's rows (`train_batches`).
  data_sharding: jax.sharding.NamedSharding
  checkpoints: checkpoints_lib.Checkpoints
  task: object
  evaluate: object
  log: object
  # A frozen imported base's `factory.base_record`: the saves hold the
  # heads alone. None: the whole model.
  base: dict | None = None


def _run_phases(run: _Run, state) -> tuple[dict, int, bool]:
  """Runs the phases from `state`'s step to the end, or to a preemption;
  returns (state, step, preempted). Saves at each phase's end and at a
  preemption."""
  phases, states, checkpoints = run.states.phases, run.states, run.checkpoints
  total = phases[-1].end
  preemption = _Preemption()
  writer = _MetricWriter(run.workdir)
  try:
    step = int(state['step'])
    while step < total:
      phase = phases_lib.phase_at(phases, step)
      step_fn = step_lib.jit_step(run.graphdef, phase, states,
                                  run.config.train, run.config.seed,
                                  run.data_sharding)
      run.log(f'Phase {phase.name!r}: steps {step}..{phase.end}, heads '
              f'{phase.first_head + 1}..{phase.first_head + phase.num_heads}'
              f'{" on a frozen base" if phase.heads_only else ""}.')
      state, step = _run_phase(run, phase, state, step_fn, preemption,
                               writer)
      following = phases_lib.phase_at(phases, step)
      if step < total and following is not phase:
        # The next phase starts with a fresh optimizer for its parameters;
        # the boundary checkpoint holds that state, so that a restore of
        # step `step` finds the optimizer state of the phase it resumes.
        state = states.start(state['params'], following)
      # A phase's end, or a preemption.
      _save(checkpoints, step, state, run.base)
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
  return state, step, preemption.requested


def _run_phase(run: _Run, phase, state, step_fn, preemption, writer):
  """Steps to the end of `phase` (or a preemption); returns (state, step).

  Saves every train.checkpoint_every steps inside the phase; the caller
  saves at its end.
  """
  config, checkpoints = run.config, run.checkpoints
  train_config = config.train
  step = int(state['step'])
  sums, window_start, window_steps = None, time.perf_counter(), 0
  while step < phase.end and not preemption.requested:
    batch = sharding.global_batch(run.data(step), run.data_sharding)
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
      run.log(_progress_line(summary, step, phase.end))
      sums, window_start, window_steps = None, time.perf_counter(), 0
    if save:
      _save(checkpoints, step, state, run.base)
    checkpoints.check()  # A background save that failed stops the run now.
    if (run.evaluate is not None and config.eval.every
        and step % config.eval.every == 0 and not preemption.requested):
      values = run.evaluate(nnx.merge(run.graphdef, state['params']),
                            run.task, step)
      writer.write(step, values)
      run.log(f'eval at step {step}: ' + ', '.join(
          f'{n} {v}' for n, v in values.items()))
  return state, step


def _save(checkpoints, step: int, state, base: dict | None = None) -> None:
  """Saves `state` as step `step` unless a float in it is NaN or infinite;
  with a frozen imported base's record (`base`), the heads' parameters
  alone, and the record.

  The loss is checked before a save too, but it is computed before the
  step's update: an update that overflows float32 would be saved unseen
  (train.learning_rate=inf did this), and every later job would load it.

  Raises:
    Diverged: naming the step and the last good checkpoint.
  """
  if base is not None:
    state = dict(state, params=factory.heads_of(state['params']))
  if not bool(_all_finite(state)):
    raise Diverged(f'a parameter or optimizer state is NaN or infinite '
                   f'after step {step}; stopped without saving. '
                   f'{_last_good(checkpoints)}')
  if base is None:
    checkpoints.save(step, state)
  else:
    checkpoints.save(step, state, meta={factory.BASE_RECORD: base})


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


def _summarize(sums, steps, elapsed, train_config, phase, step) -> dict:
  """The logged scalars of `steps` steps ending at `step`, from the sums
  of their metrics."""
  tokens = sums['tokens']
  trained = tokens > 0
  summary = dict(
      loss=float(sums['loss']) / steps,
      grad_norm=float(sums['grad_norm']) / steps,
      learning_rate=phases_lib.learning_rate(train_config, phase, step),
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
