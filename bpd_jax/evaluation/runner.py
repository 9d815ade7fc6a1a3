"""Decoders run side by side over the same batches, and their outputs.

`run` first compiles every spec (timed), then times `repeats` rounds over
all batches. A round goes chunk by chunk (about a tenth of the batches
each), every spec decoding the chunk in turn, so that the decoders share
the machine's drifts at a grain of a fraction of a second: a shared
2-core machine's speed moves by tens of percent from second to second,
and rounds of a whole split per spec let one decoder's rounds fall on a
slow spell. A spec keeps its programs and weights warm over a chunk, as
it would decoding alone (interleaving every batch measured cold caches
instead). A spec's round time is the sum of its chunks; its wall time is
its median round. The reports (eval.repeats), the bench and the drafts
comparison all measure through it and only compute their own metrics from
what it returns.
"""

import dataclasses
import statistics
import time
from typing import Callable, Sequence

import jax
import numpy as np

from bpd_jax import decoding
from bpd_jax import generate
from bpd_jax.evaluation.spec import AutoSpec, DecoderSpec
from bpd_jax.tasks import batching

# [(inputs [batch, length], real rows)]: the last batch filled up with
# copies, only its first `real` rows count.
Batches = Sequence[tuple[np.ndarray, int]]


@dataclasses.dataclass(frozen=True)
class Outputs:
  """One decoder's outputs over a set of batches, filler rows dropped.

  Attributes:
    tokens: [examples, max_len] outputs.
    lengths: [examples] output lengths.
    example_calls: model calls summed over the examples.
    iterations: loop iterations summed over the batches (calls of a batch).
    k: the block size decoded with (1: greedy decoding; for an AutoSpec
      the k it chose).
  """
  tokens: np.ndarray
  lengths: np.ndarray
  example_calls: int
  iterations: int
  k: int

  @property
  def mean_block(self) -> float:
    """Tokens per model call, per example, over the set."""
    return float(self.lengths.sum() / max(self.example_calls, 1))


def gather(results: Sequence[decoding.DecodeResult],
           batches: Batches) -> Outputs:
  """The Outputs of one DecodeResult per batch, real rows only."""
  reals = [real for _, real in batches]
  return Outputs(
      tokens=np.concatenate([np.asarray(r.tokens)[:real]
                             for r, real in zip(results, reals)]),
      lengths=np.concatenate([np.asarray(r.lengths)[:real]
                              for r, real in zip(results, reals)]),
      example_calls=sum(int(np.asarray(r.model_calls)[:real].sum())
                        for r, real in zip(results, reals)),
      iterations=sum(int(r.iterations) for r in results),
      k=int(results[0].block_sizes.shape[1]) - 1)


@dataclasses.dataclass(frozen=True)
class Measurement:
  """One spec's run (see `run`).

  Attributes:
    spec: the decoder.
    outputs: its outputs over all batches (the last round's).
    walls: seconds of each timed round over all batches.
    compile_s: the first call's time less a second call's: compilation.
    recompiles: programs compiled during the timed rounds (0 expected).
  """
  spec: DecoderSpec | AutoSpec
  outputs: Outputs
  walls: list[float]
  compile_s: float
  recompiles: int

  @property
  def wall_s(self) -> float:
    """The median round."""
    return statistics.median(self.walls)


def run(decoder: generate.Decoder, batches: Batches,
        specs: Sequence[DecoderSpec | AutoSpec], *,
        repeats: int = 1, rescorers=None,
        progress: Callable[[str], None] = lambda _: None
        ) -> list[Measurement]:
  """Compiles, then times every spec on every batch, interleaved.

  Args:
    decoder: the model's Decoder.
    batches: [(inputs [batch, length], real rows)].
    specs: greedy first: the reference the callers compare against; each
      decodes its own max_len tokens an example.
    repeats: timed rounds over all batches per spec.
    rescorers: {'ngram': ..., 'neural': ...}, as the refinements need.
    progress: one line per step.

  Returns:
    A Measurement per spec, in order.
  """
  if not specs or specs[0].kind != 'greedy':
    raise ValueError(f'the first decoder must be greedy (k=1), the '
                     f'reference; got {specs[0].name if specs else "none"}.')
  if repeats < 1:
    raise ValueError(f'repeats={repeats} must be >= 1.')

  def decode(spec, indices):
    # A sampling decoder's key is its batch's index: each round draws the
    # same samples, each batch others.
    return jax.block_until_ready(
        [spec.run(decoder, batches[index][0], rescorers, key=index)
         for index in indices])

  compile_s = {}
  first_inputs = batches[0][0]
  for i, spec in enumerate(specs):
    progress(f'compiling {spec.name} ({i + 1}/{len(specs)})')
    begin = time.perf_counter()
    jax.block_until_ready(spec.run(decoder, first_inputs, rescorers))
    first = time.perf_counter() - begin
    begin = time.perf_counter()
    jax.block_until_ready(spec.run(decoder, first_inputs, rescorers))
    compile_s[spec] = max(first - (time.perf_counter() - begin), 0.0)

  walls = {spec: [0.0] * repeats for spec in specs}
  recompiles = dict.fromkeys(specs, 0)
  results = {spec: [] for spec in specs}  # The last round's, batch order.
  for round_ in range(repeats):
    progress(f'timed round {round_ + 1}/{repeats}')
    last = round_ == repeats - 1
    for chunk in _chunks(len(batches)):
      for spec in specs:
        before = decoder.compilations()
        begin = time.perf_counter()
        decoded = decode(spec, chunk)
        walls[spec][round_] += time.perf_counter() - begin
        recompiles[spec] += decoder.compilations() - before
        if last:
          results[spec] += decoded
  return [Measurement(spec, gather(results[spec], batches), walls[spec],
                      compile_s[spec], recompiles[spec]) for spec in specs]


def decode_sources(model, sources: Sequence[Sequence[int]],
                   decoders: Sequence[DecoderSpec], *, batch_size: int,
                   repeats: int = 1, mesh=None,
                   param_rules=(), draft_vocab=None, rescorers=None,
                   log: Callable[[str], None] = print) -> list[Measurement]:
  """Every decoder over `sources`, as each report runs them (`run`).

  Args:
    model: the Transformer.
    sources: the examples' input ids, [examples][<= max_source_len]:
      decoded `batch_size` at a time, padded to the model's
      max_source_len (`batching.eval_batches`).
    decoders: greedy first (the reference).
    batch_size: examples decoded together.
    repeats, mesh, param_rules, draft_vocab, rescorers, log: as
      `reports.Report.evaluate` takes them.

  Returns:
    A Measurement per decoder, in order.
  """
  batches = list(batching.eval_batches(sources, batch_size,
                                       model.config.max_source_len,
                                       pad_id=model.config.pad_id))
  decoder = generate.Decoder(model, mesh=mesh, param_rules=param_rules,
                             log=log, draft_vocab=draft_vocab,
                             ngram=(rescorers or {}).get('ngram'))
  return run(decoder, batches, decoders, repeats=repeats,
             rescorers=rescorers)


def _chunks(count: int, per_round: int = 10) -> list[range]:
  """The batch indices 0..count-1 in `per_round` consecutive chunks (fewer
  when there are fewer batches)."""
  size = -(-count // per_round)  # Ceiling: at most per_round chunks.
  return [range(start, min(start + size, count))
          for start in range(0, count, size)]


def comparison_rows(measured: Sequence[Measurement],
                    specs: Sequence[DecoderSpec]) -> list[dict]:
  """The decoders' rows every report shares, in order: decoder, k (the
  block size decoded with, 1 for greedy decoding), criterion, min_block,
  mean_block, model_calls, wall_s, tokens_per_s, speedup (over greedy, or
  a sampling decoder's ancestral sampling), sampler, identical_to_greedy
  (None for a sampling decoder).

  Args:
    measured: `run`'s result, greedy first.
    specs: the specs it ran.
  """
  reference = measured[0].outputs.tokens
  walls = {m.spec: m.wall_s for m in measured}
  rows = []
  for m in measured:
    spec, outputs, wall = m.spec, m.outputs, m.wall_s
    identical = (None if spec.sampling else round(float(
        (outputs.tokens == reference).all(axis=1).mean()), 4))
    rows.append(dict(
        decoder=spec.name, k=outputs.k,
        criterion=spec.criterion, min_block=spec.min_block,
        mean_block=round(outputs.mean_block, 3),
        model_calls=outputs.iterations, wall_s=round(wall, 3),
        tokens_per_s=round(float(outputs.lengths.sum()) / wall, 1),
        speedup=round(walls[spec.reference(specs)] / wall, 3),
        sampler=spec.sampler or None, identical_to_greedy=identical))
  return rows
