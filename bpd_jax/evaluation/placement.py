"""Where an eval set is decoded: the model and the batch over the mesh."""

import jax
from flax import nnx


def placement(model, config, mesh, log=print):
  """(model, mesh) to decode config.eval.batch_size sentences at a time.

  A batch that splits over the mesh's data axis is sharded over it, the
  model replicated. One that does not (batch size 1, the paper's latency
  setting, on several devices) is decoded on one device per process: each
  process decodes the whole split alone, on its own replica of the model.
  """
  replicated = jax.device_put(model, jax.sharding.NamedSharding(
      mesh, jax.sharding.PartitionSpec()))
  data_devices = mesh.shape[config.mesh.data_axis]
  if config.eval.batch_size % data_devices == 0:
    return replicated, mesh
  log(f'eval.batch_size={config.eval.batch_size} does not split over the '
      f'{data_devices} devices of the data axis: decoding on one device '
      f'per process.')
  graphdef, state = nnx.split(replicated)
  device = jax.local_devices()[0]
  state = jax.tree.map(
      lambda x: jax.device_put(x.addressable_data(0), device), state)
  return nnx.merge(graphdef, state), None
