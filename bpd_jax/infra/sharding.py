"""Device mesh, parameter and batch shardings, per-process input.

Data parallelism is the default: the batch is split along the mesh's data
axis and parameters are replicated. Parameters can be split too, by rules
that match '/'-joined parameter paths with regular expressions, e.g.
    ('.*/ffn/up/kernel', (None, 'model'))
puts the feed-forward kernels' output dimension on a 'model' mesh axis.
"""

import re
from typing import Sequence

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec


def make_mesh(shape: Sequence[int], axis_names: Sequence[str]):
  """A mesh of devices; one -1 in `shape` takes all the remaining ones.

  A shape without -1 may use fewer devices than there are (the first ones):
  (1,) runs on one device.
  """
  shape, count = list(shape), jax.device_count()
  given = tuple(shape)  # As the config names it (mesh.shape).
  if len(shape) != len(axis_names):
    raise ValueError(f'mesh.shape={given} and mesh.axes={tuple(axis_names)} '
                     f'differ in length.')
  if shape.count(-1) > 1:
    raise ValueError(f'mesh.shape={given} has more than one -1.')
  known = int(np.prod([d for d in shape if d != -1]))
  if -1 in shape:
    if count % known:
      raise ValueError(f'{count} devices do not divide into mesh.shape='
                       f'{given}.')
    shape[shape.index(-1)] = count // known
  needed = int(np.prod(shape))
  if needed > count or needed < 1:
    raise ValueError(f'mesh.shape={given} needs {needed} devices; there are '
                     f'{count}.')
  return jax.make_mesh(tuple(shape), tuple(axis_names),
                       axis_types=(jax.sharding.AxisType.Auto,) * len(shape),
                       devices=jax.devices()[:needed])


def param_shardings(params, mesh, rules: Sequence[tuple[str, tuple]]):
  """A NamedSharding for every parameter: the first matching rule, else none.

  Raises:
    ValueError: a rule names an unknown mesh axis, has more entries than the
      parameter has dimensions, or splits a dimension unevenly.
  """
  compiled = [(re.compile(pattern), tuple(spec)) for pattern, spec in rules]

  def sharding(path, leaf):
    name = '/'.join(str(getattr(p, 'key', getattr(p, 'idx', p)))
                    for p in path)
    for pattern, spec in compiled:
      if pattern.fullmatch(name):
        _check_spec(name, leaf.shape, spec, mesh)
        return NamedSharding(mesh, PartitionSpec(*spec))
    return NamedSharding(mesh, PartitionSpec())

  return jax.tree_util.tree_map_with_path(sharding, params)


def _check_spec(name, shape, spec, mesh):
  if len(spec) > len(shape):
    raise ValueError(f'sharding rule {spec} for {name} has more entries than '
                     f'its {len(shape)} dimensions.')
  for dim, axis in zip(shape, spec):
    if axis is None:
      continue
    if axis not in mesh.shape:
      raise ValueError(f'sharding rule for {name} names mesh axis {axis!r}; '
                       f'the mesh has {tuple(mesh.shape)}.')
    if dim % mesh.shape[axis]:
      raise ValueError(f'{name}: dimension {dim} does not split over the '
                       f'{mesh.shape[axis]} devices of axis {axis!r}.')


def batch_sharding(mesh, data_axis: str) -> NamedSharding:
  """Rows split over the data axis."""
  if data_axis not in mesh.shape:
    raise ValueError(f'data axis {data_axis!r} is not a mesh axis '
                     f'{tuple(mesh.shape)}.')
  return NamedSharding(mesh, PartitionSpec(data_axis))


def global_batch(local: dict[str, np.ndarray],
                 sharding: NamedSharding) -> dict[str, jax.Array]:
  """Assembles each process's rows into global, sharded arrays."""
  return {name: jax.make_array_from_process_local_data(sharding, value)
          for name, value in local.items()}
