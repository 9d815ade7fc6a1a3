"""Device mesh, parameter and cache shardings, per-process input.

The batch is split along the mesh's data axis. Parameters are replicated,
or split by rules (`mesh.param_rules`): pairs of a regular expression,
matched in full against a parameter's '/'-joined path, and the mesh axis
of each of its dimensions, e.g.
    ('.*/ffn/up/kernel', (None, 'model'))
puts the feed-forward kernels' output dimension on a 'model' mesh axis. A
spec that starts with `...` names the last dimensions: (..., 'model')
splits the last one whatever the parameter's rank. The first rule that
matches wins; a parameter that none matches is replicated. Two rule sets
are shipped:

- 'tensor' (`TENSOR_RULES`): Megatron-style tensor parallelism over the
  'model' axis. A dimension that does not split evenly is replicated
  instead, said in one log line.
- 'fsdp': every parameter split along its largest dimension that the
  'data' axis divides (fully sharded data parallelism, for training;
  inside a decode XLA gathers each parameter where it is used).

The decoding cache (`cache_shardings`) follows the same rules by its own
paths ('self_attention/0/key', ...), its batch dimension on the data axis.
"""

import collections
import re
from typing import Sequence

import jax
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from bpd_jax.infra import errors

TENSOR_AXIS = 'model'  # The mesh axis 'tensor' splits over.
FSDP_AXIS = 'data'  # The mesh axis 'fsdp' splits over.
# The shipped rule sets and the mesh axis each splits over.
RULE_SET_AXES = {'tensor': TENSOR_AXIS, 'fsdp': FSDP_AXIS}
RULE_SETS = tuple(RULE_SET_AXES)

# Megatron-style tensor parallelism for every model of the project (its
# Transformer, encoder-decoder or decoder-only, the imported GPT-2 and
# Llama family), by the Transformer's parameter paths
# (models/transformer.py, layers.py, attention.py, feed_forward.py): a
# projection into a wider space is split on its output, the one back on
# its input, so that each device computes its own attention heads and
# hidden units and one all-reduce a sublayer joins them. Each drafter
# declares its own rules (models/drafters: `Drafter.tensor_rules`), which
# a caller passes as `model_rules`. What no rule names is replicated:
# norms, the biases added after an all-reduce (attention out, ffn down,
# heads' b_out), learned position tables, a drafter's input fusion.
TENSOR_RULES = (
    # The vocabulary: embedding tables by token (a tied output projection
    # is the table transposed, so the logits come split over the
    # vocabulary too), an untied output projection by its vocabulary
    # column.
    (r'(target|source|skip)_embed/embedding', (TENSOR_AXIS, None)),
    (r'output/kernel', (None, TENSOR_AXIS)),
    # Attention (self, cross): query/key/value
    # projections by output column, kernels and biases; the output
    # projection by its input row. A self-attention's fused [queries |
    # keys | values] columns split by head once a Decoder has grouped
    # them (`SelfAttention.group_heads`); in a checkpoint's layout (in
    # training) the split cuts across the three, and XLA exchanges the
    # columns between devices.
    (r'.*attention/(qkv|query|key_value)/(kernel|bias)', (..., TENSOR_AXIS)),
    (r'.*attention/out/kernel', (TENSOR_AXIS, None)),
    # Feed-forward layers: up and gate by hidden unit, down by its input
    # row.
    (r'.*ffn/(up|gate)/(kernel|bias)', (..., TENSOR_AXIS)),
    (r'.*ffn/down/kernel', (TENSOR_AXIS, None)),
    # The output weights a Decoder lays out once (the model's
    # DecodingWeights): the vocabulary projection [d_model, vocab] and
    # the embedding drafters read tokens with, by token (the drafter's
    # own weights by its rules).
    (r'vocab', (None, TENSOR_AXIS)),
    (r'embed', (TENSOR_AXIS, None)),
    # The decoding cache, [batch, positions, kv_heads, head_dim]: by
    # key/value head.
    (r'(self_attention|memory)/\d+/(key|value)',
     (None, None, TENSOR_AXIS, None)),
)


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


def param_shardings(params, mesh, rules, log=print, model_rules=()):
  """A NamedSharding for every parameter, as `rules` place it.

  Args:
    params: a pytree of arrays (an nnx.State, a model, a dict).
    mesh: the mesh.
    rules: 'tensor', 'fsdp', or (regex, spec) pairs (() or None:
      replicated); see the module docstring.
    log: where the one line of what a shipped rule set replicates goes.
    model_rules: (regex, spec) pairs 'tensor' matches before its own: the
      model's drafter's (`drafters.tensor_rules`); unused by other rules.

  Raises:
    ValueError: an unknown rule set; a rule names an axis the mesh lacks,
      has more entries than the parameter has dimensions, or (a rule of
      your own) splits a dimension unevenly.
  """
  if isinstance(rules, str) and rules in RULE_SET_AXES:
    _check_axis(mesh, RULE_SET_AXES[rules], rules)
  if rules == 'fsdp':
    return _fsdp(params, mesh, log)
  return _by_rules(params, mesh, rules, None, log, model_rules)


def cache_shardings(cache, mesh, rules, batch_axis: str, log=print,
                    model_rules=()):
  """A NamedSharding for every array of a decoding cache (batch first).

  Each is split as the first rule matching its path says ('tensor': keys
  and values by key/value head, `model_rules` first), with its batch
  dimension on `batch_axis`; 'fsdp' places the batch only.
  """
  if rules == 'fsdp':
    rules = ()
  return _by_rules(cache, mesh, rules, batch_axis, log, model_rules)


def _check_axis(mesh, axis: str, rules: str):
  if axis not in mesh.shape:
    raise ValueError(f"param_rules={rules!r} splits over a {axis!r} mesh "
                     f"axis; the mesh has {tuple(mesh.shape)}.")


def _by_rules(tree, mesh, rules, batch_axis, log, model_rules=()):
  """Shardings of a tree's arrays by (regex, spec) pairs or 'tensor'
  (`model_rules`, then TENSOR_RULES).

  A shipped rule set replicates a dimension that does not split, and logs
  which; a rule of the caller's own raises instead. With `batch_axis`,
  dimension 0 of every array is the batch, split along it.
  """
  if isinstance(rules, str) and rules not in RULE_SETS:
    raise ValueError(f'param_rules={rules!r} is not one of {RULE_SETS} nor '
                     f'a sequence of (regex, spec) pairs.')
  shipped = rules == 'tensor'
  pairs = (tuple(model_rules) + TENSOR_RULES if shipped
           else tuple(rules or ()))
  compiled = [(re.compile(pattern), tuple(spec)) for pattern, spec in pairs]
  replicated = collections.OrderedDict()  # Name pattern -> dimensions.

  def sharding(name, leaf):
    shape = np.shape(leaf)
    spec = next((spec for pattern, spec in compiled
                 if pattern.fullmatch(name)), ())
    spec = list(_aligned(name, spec, len(shape)))
    for dim, axis in enumerate(spec):
      if axis is None:
        continue
      if axis not in mesh.shape:
        raise ValueError(f'sharding rule for {name} names mesh axis '
                         f'{axis!r}; the mesh has {tuple(mesh.shape)}.')
      if shape[dim] % mesh.shape[axis]:
        if not shipped:
          raise ValueError(f'{name}: dimension {shape[dim]} does not split '
                           f'over the {mesh.shape[axis]} devices of axis '
                           f'{axis!r}.')
        replicated.setdefault(re.sub(r'/\d+/', '/*/', name), set()).add(
            f'{shape[dim]} over {mesh.shape[axis]}')
        spec[dim] = None
    if batch_axis is not None and shape:
      spec[0] = batch_axis
    while spec and spec[-1] is None:  # P('model', None) is P('model').
      spec.pop()
    return NamedSharding(mesh, PartitionSpec(*spec))

  shardings = map_named(sharding, tree)
  if replicated:
    log(f"param_rules='tensor' replicates what does not split evenly: " +
        '; '.join(f"{name} ({', '.join(sorted(dims))})"
                  for name, dims in replicated.items()) + '.')
  return shardings


def _aligned(name: str, spec: tuple, rank: int) -> tuple:
  """`spec` with one entry per dimension of a rank-`rank` array: a leading
  `...` aligns the rest to the last dimensions."""
  if spec[:1] == (...,):
    if len(spec) - 1 > rank:
      raise ValueError(f'sharding rule {spec} for {name} has more entries '
                       f'than its {rank} dimensions.')
    return (None,) * (rank - len(spec) + 1) + spec[1:]
  if len(spec) > rank:
    raise ValueError(f'sharding rule {spec} for {name} has more entries than '
                     f'its {rank} dimensions.')
  return spec + (None,) * (rank - len(spec))


def _fsdp(params, mesh, log):
  """Each parameter split along its largest dimension that the data axis
  divides (the first of equals); replicated where none does."""
  devices = mesh.shape[FSDP_AXIS]
  replicated = []

  def sharding(name, leaf):
    shape = np.shape(leaf)
    dims = [d for d in range(len(shape)) if shape[d] % devices == 0]
    if not dims:
      replicated.append(name)
      return NamedSharding(mesh, PartitionSpec())
    dim = max(dims, key=lambda d: (shape[d], -d))
    return NamedSharding(mesh, PartitionSpec(*[None] * dim, FSDP_AXIS))

  shardings = map_named(sharding, params)
  if replicated and devices > 1:
    log(f"param_rules='fsdp' replicates {len(replicated)} parameters no "
        f"dimension of which the {devices} devices of {FSDP_AXIS!r} divide "
        f"(e.g. {', '.join(replicated[:3])}).")
  return shardings


def map_named(fn, tree):
  """`tree` with each array replaced by fn(path name, array).

  A path name joins the keys, attribute names and indices on the way to
  the array with '/' ('decoder_layers/0/ffn/up/kernel'); a parameter's own
  Variable adds nothing, so that a model, its nnx.State and a dict of its
  arrays name a parameter alike.
  """
  def visit(path, node):
    name = '/'.join(_key_name(key) for key in path)
    if isinstance(node, nnx.Variable):
      return jax.tree.map(lambda leaf: fn(name, leaf), node)
    return fn(name, node)
  return jax.tree_util.tree_map_with_path(
      visit, tree, is_leaf=lambda node: isinstance(node, nnx.Variable))


def _key_name(key) -> str:
  for field in ('key', 'name', 'idx'):
    if hasattr(key, field):
      return str(getattr(key, field))
  return str(key)


def device_bytes(tree) -> dict:
  """{device: bytes of the tree's arrays held there}: each array's
  addressable shards, summed per device (replicated arrays count whole on
  every device)."""
  held = collections.Counter()
  for leaf in jax.tree.leaves(tree):
    for shard in leaf.addressable_shards:
      held[shard.device] += shard.data.nbytes
  return dict(held)


def check_eval_batch(batch_size: int, data_devices: int, rules) -> None:
  """An eval batch of `batch_size` must split over the data axis's
  `data_devices` devices where `rules` split the parameters: they cannot
  be gathered onto one device to decode a batch there.

  Raises:
    errors.ConfigError: it does not.
  """
  if rules and batch_size % data_devices:
    raise errors.ConfigError(
        f'eval.batch_size={batch_size} does not split over the '
        f'{data_devices} devices of the data axis, and mesh.param_rules='
        f'{rules!r} keeps the parameters split over the mesh: use a batch '
        f'size that the data axis divides, or a data axis of 1 '
        f'(mesh.shape=(1, -1)).')


def repeat_rows(rows: np.ndarray, multiple: int) -> np.ndarray:
  """`rows` repeated in order up to a multiple of `multiple` rows: a
  batch that splits over a data axis of that many devices (the caller
  drops the repeats' results)."""
  return np.resize(rows, (-(-len(rows) // multiple) * multiple,)
                   + rows.shape[1:])


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
