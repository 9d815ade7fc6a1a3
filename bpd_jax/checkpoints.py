"""Orbax checkpoints of the training state.

Saves are atomic (Orbax writes to a temporary directory and renames it), the
newest `max_to_keep` are kept, and a restore goes straight into the target
shardings given by abstract arrays (`jax.ShapeDtypeStruct`s with sharding).
"""

import os

import jax
import numpy as np
import orbax.checkpoint as ocp


class Checkpoints:
  """The checkpoints of one training run (a directory of numbered steps)."""

  def __init__(self, directory: str, max_to_keep: int = 3):
    if max_to_keep < 1:
      raise ValueError(f'max_to_keep={max_to_keep} must be >= 1.')
    self.directory = os.path.abspath(directory)
    self._manager = ocp.CheckpointManager(
        self.directory,
        options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep,
                                             create=True))

  def latest_step(self) -> int | None:
    return self._manager.latest_step()

  def save(self, step: int, state) -> None:
    """Starts saving `state` (a pytree of arrays) as `step`; see `wait`."""
    self._manager.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state)), force=True)

  def restore(self, step: int, abstract_state):
    """The state saved at `step`, shaped and sharded as `abstract_state`."""
    return self._manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract_state)))['state']

  def wait(self) -> None:
    """Blocks until saves in flight are on disk."""
    self._manager.wait_until_finished()

  def close(self) -> None:
    self._manager.close()


def abstract_like(state, shardings=None):
  """ShapeDtypeStructs of `state`, placed with `shardings` (or as state is)."""
  if shardings is None:
    shardings = jax.tree.map(lambda x: x.sharding, state)
  return jax.tree.map(
      lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
      state, shardings)


def restore_params_dict(directory: str) -> dict:
  """The `params` of the latest checkpoint in `directory`, as nested dicts.

  For warm starts from another run, whose model may differ (other heads):
  no target structure is needed; arrays come back as numpy.

  Raises:
    FileNotFoundError: no checkpoint in `directory`.
  """
  directory = os.path.abspath(directory)
  manager = ocp.CheckpointManager(directory)
  step = manager.latest_step()
  if step is None:
    raise FileNotFoundError(f'no checkpoint in {directory} to warm-start '
                            f'from.')
  restored = manager.restore(step, args=ocp.args.Composite(
      state=ocp.args.StandardRestore()))['state']
  manager.close()
  return jax.tree.map(np.asarray, restored['params'])
