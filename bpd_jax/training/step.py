"""The jitted training step, and the state it updates.

A run's state is a dict: step (int32 []), params (the model's nnx.State
of parameters) and opt_state (the phase's optimizer state over the
parameters it trains). Everything a step draws is a function of (seed,
step): dropout and the random head here, the batch in
`tasks/batching.py`; so a state restored from a checkpoint continues the
run exactly.
"""

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from bpd_jax.infra import checkpoints as checkpoints_lib
from bpd_jax.training import losses
from bpd_jax.training import phases as phases_lib


class TrainStates:
  """The state of each phase of a run: a fresh one, its layout over the
  mesh, its abstract form (the target of a restore)."""

  def __init__(self, phases, train_config, params, param_shardings, mesh):
    """
    Args:
      phases: the run's phases (`phases.plan_phases`).
      train_config: the config's `train` section.
      params: the model's parameters (their shapes give the abstract
        states).
      param_shardings: a NamedSharding per parameter, like `params`.
      mesh: the run's mesh.
    """
    self.phases = phases
    # One optimizer a phase (`phases.optimizer`).
    self.optimizers = {phase: phases_lib.optimizer(train_config, phase)
                       for phase in phases}
    self._params = params
    self._param_shardings = param_shardings
    self._replicated = jax.sharding.NamedSharding(
        mesh, jax.sharding.PartitionSpec())

  def new(self, params, phase: phases_lib.Phase) -> dict:
    """The state at the start of `phase`: its step, `params`, and fresh
    optimizer moments for what it trains."""
    trainable = nnx.split_state(params, phase.trainable, ...)[0]
    return dict(step=jnp.asarray(phase.start, jnp.int32), params=params,
                opt_state=self.optimizers[phase].init(trainable))

  def start(self, params, phase: phases_lib.Phase) -> dict:
    """`new(params, phase)`, laid out over the mesh."""
    return jax.device_put(self.new(params, phase), self.shardings(phase)[0])

  def shardings(self, phase: phases_lib.Phase) -> tuple[dict, dict]:
    """(a sharding per leaf of a state of `phase`, its abstract state)."""
    abstract = jax.eval_shape(lambda p: self.new(p, phase), self._params)
    trainable = nnx.split_state(self._param_shardings, phase.trainable,
                                ...)[0]
    # Optimizer moments are laid out like the parameters they follow.
    opt_shardings = optax.tree_map_params(
        self.optimizers[phase], lambda _, sharding: sharding,
        abstract['opt_state'], trainable,
        transform_non_params=lambda _: self._replicated)
    shardings = dict(step=self._replicated, params=self._param_shardings,
                     opt_state=opt_shardings)
    return shardings, abstract

  def abstract_at(self, step: int):
    """The abstract state, with its shardings, of a checkpoint of step
    `step` (that of the phase that trains it)."""
    shardings, abstract = self.shardings(
        phases_lib.phase_at(self.phases, step))
    return checkpoints_lib.abstract_like(abstract, shardings)


def jit_step(graphdef, phase: phases_lib.Phase, states: TrainStates,
             train_config, seed: int, data_sharding):
  """The compiled step of `phase`: (state, batch) -> (state, metrics); the
  state is donated and keeps its layout."""
  shardings, _ = states.shardings(phase)
  return jax.jit(make_train_step(graphdef, phase, states.optimizers[phase],
                                 train_config, seed),
                 in_shardings=(shardings, data_sharding),
                 out_shardings=(shardings, None), donate_argnums=0)


def make_train_step(graphdef, phase: phases_lib.Phase, tx, train_config,
                    seed: int):
  """The pure step function of a phase: (state, batch) -> (state, metrics).

  Args:
    graphdef: the model's nnx graph definition.
    phase: what the step trains.
    tx: the phase's optimizer.
    train_config: the config's `train` section, checked by config_checks.
    seed: the run's seed.

  The metrics are `losses.heads_loss`'s per-head sums, the loss and the
  gradients' global norm.
  """
  def step_fn(state, batch):
    key = jax.random.fold_in(jax.random.key(seed), state['step'])
    dropout_key, head_key = jax.random.split(key)
    params, frozen = nnx.split_state(state['params'], phase.trainable, ...)

    def loss_fn(params):
      model = nnx.merge(graphdef, params, frozen)
      return losses.heads_loss(
          model, batch, first=phase.first_head, count=phase.num_heads,
          label_smoothing=train_config.label_smoothing,
          random_head=train_config.random_head, dropout_key=dropout_key,
          head_key=head_key, head1_weight=train_config.head1_weight,
          input_dropout=train_config.input_dropout,
          position_fraction=train_config.head_position_fraction,
          head_targets=train_config.head_targets,
          draft_inputs=train_config.draft_inputs,
          scheduled_sampling=train_config.scheduled_sampling,
          loss_decay=train_config.head_loss_decay,
          acceptance_weighted=train_config.acceptance_weighted)

    (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    updates, opt_state = tx.update(grads, state['opt_state'], params)
    params = optax.apply_updates(params, updates)
    metrics = dict(metrics, loss=loss, grad_norm=optax.tree.norm(grads))
    new_state = dict(step=state['step'] + 1,
                     params=nnx.merge_state(params, frozen),
                     opt_state=opt_state)
    return new_state, metrics

  return step_fn
