"""The bench on a mesh: where its timed Decoder runs, and what each rule set
costs a decode there.

With `mesh.param_rules` set, the bench times decoding on the config's mesh
(`mesh.shape`, `mesh.axes`) with the parameters and cache split by those
rules and the batch over `mesh.data_axis`; without, on one device, as
before meshes. Its --sharding_table adds, on the config's mesh, one row per
rule set (replicated, 'tensor', 'fsdp': those whose axis the mesh has):
the bytes the most loaded device holds of the parameters, the optimizer
state of the heads' training phase and the decoding cache, each against
the replicated layout (`sharded_memory`), and for greedy and blockwise
decoding the collectives one loop iteration runs and their bytes
(`collectives`, from the compiled program) and the seconds it took to
compile (JAX's caches cleared first, so that a program the bench has
already compiled is compiled again). Each rule set's Decoder places the
model (the replicated one whole on every device).

    python -m bpd_jax.bench --config=configs/demo.py --workdir=/tmp/bench \\
        --init=random --quick --sharding_table \\
        --config.mesh.shape='(2, 4)' --config.mesh.axes="('data', 'model')"
"""

import time

import jax
import numpy as np

from bpd_jax import decoding
from bpd_jax import generate
from bpd_jax.bench import collectives
from bpd_jax.bench import sharded_memory
from bpd_jax.infra import errors
from bpd_jax.infra import sharding

# Row name -> param_rules; each needs its mesh axis.
RULE_SETS = {'replicated': (), 'tensor': 'tensor', 'fsdp': 'fsdp'}
MEMORY_PARTS = ('params', 'optimizer', 'cache')
DECODES = ('greedy', 'blockwise')


def decoder(config, model, batch_sizes, draft_vocab=None, ngram=None
            ) -> generate.Decoder:
  """The Decoder the bench times: on the config's mesh with its
  mesh.param_rules where set, else on one device; drafting among the ids
  `draft_vocab` (None: all), drafter 'ngram' reading `ngram`.

  Raises:
    errors.ConfigError: a batch size that the mesh's data axis does not
      divide, or rules the mesh or the parameters do not fit.
  """
  rules = config.mesh.param_rules
  if not rules:
    return generate.Decoder(model, draft_vocab=draft_vocab, ngram=ngram)
  mesh = sharding.make_mesh(config.mesh.shape, config.mesh.axes)
  rows = mesh.shape[config.mesh.data_axis]
  if any(size % rows for size in batch_sizes):
    raise errors.ConfigError(
        f'--batch_sizes={",".join(map(str, batch_sizes))}: each must split '
        f'over the {rows} devices of mesh axis {config.mesh.data_axis!r}.')
  try:
    return generate.Decoder(model, mesh=mesh,
                            batch_axis=config.mesh.data_axis,
                            param_rules=rules, draft_vocab=draft_vocab,
                            ngram=ngram)
  except ValueError as error:
    raise errors.ConfigError(f'mesh.param_rules: {error}') from error


def table(model, config, inputs: np.ndarray, *, max_len: int, k: int,
          log=print) -> list[dict]:
  """One row per rule set the config's mesh has axes for (see the module
  docstring).

  Args:
    model: the Transformer.
    config: the bench's config (mesh, train).
    inputs: [batch, length] a batch the bench decodes; its rows repeated
      up to a multiple of the data axis's devices.
    max_len: most tokens generated per example.
    k: the blockwise decode's block size (its cache sizes the cache).
    log: where each rule set's line of what it replicates goes.

  Returns:
    Dicts of: rules, batch_size; params_bytes, optimizer_bytes,
    cache_bytes (per device) and each's _vs_replicated; per decode
    (greedy, blockwise): {decode}_collectives (per loop iteration),
    {decode}_collective_bytes, {decode}_collective_kinds ({kind: count})
    and {decode}_compile_s.
  """
  jax.clear_caches()
  mesh = sharding.make_mesh(config.mesh.shape, config.mesh.axes)
  batch_axis = config.mesh.data_axis
  inputs = sharding.repeat_rows(inputs, mesh.shape[batch_axis])
  options = dict(greedy=decoding.DecodeOptions(max_len=max_len),
                 blockwise=decoding.DecodeOptions(max_len=max_len, k=k))
  rows = []
  for name, rules in RULE_SETS.items():
    if sharding.RULE_SET_AXES.get(rules) not in (None, *mesh.shape):
      continue
    held = sharded_memory.per_device(
        model, config.train, mesh, rules, batch_axis=batch_axis,
        inputs_shape=inputs.shape, options=options['blockwise'])
    row = dict(rules=name, batch_size=len(inputs),
               **{f'{part}_bytes': held[part] for part in MEMORY_PARTS})
    placed = generate.Decoder(model, mesh=mesh, batch_axis=batch_axis,
                              param_rules=rules, log=log)
    for decode in DECODES:
      begin = time.perf_counter()
      compiled = placed.lower(inputs, options[decode]).compile()
      seconds = time.perf_counter() - begin
      found = collectives.per_iteration(compiled.as_text())
      row.update({f'{decode}_collectives': found.count,
                  f'{decode}_collective_bytes': found.bytes,
                  f'{decode}_collective_kinds': found.counts,
                  f'{decode}_compile_s': round(seconds, 3)})
    rows.append(row)
  for row in rows:  # rows[0] is the replicated layout.
    for part in MEMORY_PARTS:
      whole = rows[0][f'{part}_bytes']
      row[f'{part}_vs_replicated'] = (
          round(row[f'{part}_bytes'] / whole, 4) if whole else None)
  return rows
