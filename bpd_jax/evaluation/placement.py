"""Where an eval set is decoded: the model and the batch over the mesh."""

import jax
from flax import nnx

from bpd_jax.infra import sharding
from bpd_jax.models import drafters


def placement(model, config, mesh, log=print):
  """(model, mesh, param_rules) to decode config.eval.batch_size sentences
  at a time: what `generate.Decoder` is given.

  A batch that splits over the mesh's data axis is sharded over it, the
  parameters split as mesh.param_rules say (replicated by default). One
  that does not (batch size 1, the paper's latency setting, on several
  devices) is decoded on one device per process: each process decodes the
  whole split alone, on its own replica of the model; split parameters
  cannot be gathered onto one device, so that is refused.

  Raises:
    errors.ConfigError: the batch does not split and mesh.param_rules
      splits the parameters.
  """
  rules = config.mesh.param_rules
  data_devices = mesh.shape[config.mesh.data_axis]
  if config.eval.batch_size % data_devices == 0:
    # Laid out as the rules say (replicated without), so that the
    # report's other passes over the model (perplexity, the heads'
    # accuracy) run on the mesh too; the Decoder keeps this layout.
    graphdef, state = nnx.split(model)
    state = jax.device_put(state, sharding.param_shardings(
        state, mesh, rules, log=lambda _: None,
        model_rules=drafters.tensor_rules(model.config.head_layer)))
    return nnx.merge(graphdef, state), mesh, rules
  sharding.check_eval_batch(config.eval.batch_size, data_devices, rules)
  log(f'eval.batch_size={config.eval.batch_size} does not split over the '
      f'{data_devices} devices of the data axis: decoding on one device '
      f'per process.')
  graphdef, state = nnx.split(model)
  device = jax.local_devices()[0]
  state = jax.tree.map(
      lambda x: jax.device_put(_local_copy(x), device), state)
  return nnx.merge(graphdef, state), None, ()


def _local_copy(x):
  """A whole copy of `x` from this process: an array replicated over the
  training mesh gives its first shard; numpy as it is."""
  if isinstance(x, jax.Array) and not x.is_fully_addressable:
    return x.addressable_data(0)
  return x
