"""Greedy vs blockwise decoding of one model, side by side (configs/demo.py).

Every decoder is compiled first (compile time reported apart), then timed
over `decode.repeats` runs; the median counts. Rows are printed as they
finish and written to WORKDIR/decode_demo.json.
"""

import json
import os
import statistics
import time

import jax
import numpy as np
import tabulate
from absl import logging
from flax import nnx

from bpd_jax import decoding
from bpd_jax import generate
from bpd_jax.models import Transformer, TransformerConfig


def model_from_config(model_config, seed: int) -> Transformer:
  """A randomly initialised Transformer from a config's `model` section."""
  fields = dict(model_config)
  size = fields.pop('size')
  return Transformer(TransformerConfig.from_size(size, **fields),
                     rngs=nnx.Rngs(seed))


def random_sources(config: TransformerConfig, batch: int, length: int,
                   seed: int) -> np.ndarray:
  """[batch, length] right-padded random sentences ending with eos_id."""
  rng = np.random.default_rng(seed)
  special = max(config.pad_id, config.eos_id, config.bos_id) + 1
  tokens = rng.integers(special, config.vocab_size, (batch, length))
  lengths = rng.integers(2, length + 1, batch)
  position = np.arange(length)[None, :]
  tokens = np.where(position == lengths[:, None] - 1, config.eos_id, tokens)
  return np.where(position < lengths[:, None], tokens, config.pad_id)


def timed(decode, repeats: int):
  """(compile seconds, median wall seconds, result) of a decoder."""
  start = time.perf_counter()
  result = jax.block_until_ready(decode())
  compile_s = time.perf_counter() - start
  walls = []
  for _ in range(repeats):
    start = time.perf_counter()
    result = jax.block_until_ready(decode())
    walls.append(time.perf_counter() - start)
  # The first call also ran once: report compilation net of one run.
  median = statistics.median(walls)
  return max(compile_s - median, 0.0), median, result


def check_decode_config(decode, num_heads: int) -> decoding.Criterion:
  """Validates the `decode` section before any work; returns the criterion."""
  criterion = decoding.from_spec(decode.criterion)
  for k in decode.ks:
    if not isinstance(k, int) or not 1 <= k <= num_heads:
      raise ValueError(f'decode.ks: k={k!r} must be an integer in '
                       f'[1, {num_heads}] (model.num_proposal_heads).')
  if not 1 <= decode.min_block <= min(decode.ks):
    raise ValueError(f'decode.min_block={decode.min_block} must be in '
                     f'[1, {min(decode.ks)}] (the smallest k).')
  for name in ('batch_size', 'source_len', 'max_len', 'repeats'):
    if decode[name] < 1:
      raise ValueError(f'decode.{name}={decode[name]} must be >= 1.')
  return criterion


def run(config, workdir: str) -> list[dict]:
  """Runs the demo; returns the rows of the table."""
  model = model_from_config(config.model, config.seed)
  decode = config.decode
  criterion = check_decode_config(decode, model.config.num_proposal_heads)
  sources = random_sources(model.config, decode.batch_size, decode.source_len,
                           config.seed)
  generate.check_inputs(model.config, sources, decode.max_len, max(decode.ks))

  # With several devices (e.g. launch/local_mesh.sh), shard the batch.
  mesh = None
  if jax.device_count() > 1:
    if decode.batch_size % jax.device_count():
      raise ValueError(f'decode.batch_size={decode.batch_size} must be a '
                       f'multiple of the {jax.device_count()} devices.')
    mesh = jax.make_mesh((jax.device_count(),), ('data',),
                         axis_types=(jax.sharding.AxisType.Auto,))

  decoders = [('greedy', None)] + [('blockwise', k) for k in decode.ks]
  rows, reference = [], None
  for name, k in decoders:
    if k is None:
      run_decoder = lambda: generate.greedy(model, sources, mesh=mesh,
                                            max_len=decode.max_len)
    else:
      run_decoder = lambda k=k: generate.blockwise(
          model, sources, k=k, max_len=decode.max_len, criterion=criterion,
          min_block=decode.min_block, mesh=mesh)
    compile_s, wall_s, result = timed(run_decoder, decode.repeats)
    reference = reference or (result, wall_s)
    tokens = int(result.lengths.sum())
    rows.append(dict(
        decoder=name, k=k or 1, batch_size=decode.batch_size,
        compile_s=round(compile_s, 3), wall_s=round(wall_s, 4),
        tokens=tokens, tokens_per_s=round(tokens / wall_s, 1),
        model_calls=int(result.iterations),
        mean_block=round(float(result.mean_block_size), 3),
        identical_to_greedy=float(np.mean(np.all(
            np.asarray(result.tokens) == np.asarray(reference[0].tokens),
            axis=1))),
        speedup=round(reference[1] / wall_s, 3)))
    logging.info('%s k=%s: %s', name, k or 1, rows[-1])
    print(f'  done: {name} k={k or 1} ({wall_s * 1e3:.1f} ms a batch)',
          flush=True)

  os.makedirs(workdir, exist_ok=True)
  path = os.path.join(workdir, 'decode_demo.json')
  with open(path, 'w') as f:
    json.dump(dict(config=config.to_dict(), rows=rows), f, indent=2)
  print(tabulate.tabulate(rows, headers='keys', tablefmt='github'))
  print(f'Report: {path}')
  return rows
