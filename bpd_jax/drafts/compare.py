"""Plain and refined drafts decoded and timed side by side.

For every k, greedy decoding, plain blockwise decoding and each refinement
decode the same batches, interleaved round after round (so they share the
machine's drifts), and the median round is kept. Block efficiency (tokens
per model call) says how much a refinement saves in calls; wall_s and the
speedups say whether the saving survives the refinement's own cost (the
lattice search, the rescorer, and p drafts per call folded into the batch).
"""

import dataclasses
import statistics
import time
from typing import Callable, Sequence

import jax
import numpy as np

from bpd_jax import generate
from bpd_jax.decoding import refine

COLUMNS = ('decoder', 'k', 'mean_block', 'block_gain', 'wall_s',
           'speedup_vs_plain', 'speedup_vs_greedy', 'identical_to_greedy')


@dataclasses.dataclass(frozen=True)
class Variant:
  """One decoder: greedy (k = 0), plain blockwise, or refined blockwise.

  Attributes:
    k: block size (0: greedy).
    spec: the refinement's spec ('' for plain; see `checks.parse`).
    refinement: the parsed refinement (None for plain and greedy).
  """
  k: int = 0
  spec: str = ''
  refinement: refine.Refinement | None = None

  @property
  def name(self) -> str:
    if not self.k:
      return 'greedy'
    return f'k={self.k} ' + (self.spec or 'plain')

  def run(self, decoder: generate.Decoder, inputs, max_len: int,
          rescorers: dict):
    if not self.k:
      return decoder.greedy(inputs, max_len=max_len)
    rescorer = None
    if self.refinement is not None:
      rescorer = rescorers.get(self.refinement.rescorer)
    return decoder.blockwise(inputs, k=self.k, max_len=max_len,
                             refinement=self.refinement, rescorer=rescorer)


def variants(ks: Sequence[int], refinements: Sequence[tuple[str, refine.Refinement]]
             ) -> list[Variant]:
  """Greedy, then per k plain blockwise and every refinement."""
  out = [Variant()]
  for k in ks:
    out.append(Variant(k))
    out += [Variant(k, spec, r) for spec, r in refinements]
  return out


def run(decoder: generate.Decoder, batches: list[tuple[np.ndarray, int]],
        chosen: Sequence[Variant], rescorers: dict, *, max_len: int,
        repeats: int, progress: Callable[[str], None] = print) -> list[dict]:
  """Decodes every batch with every variant, `repeats` interleaved rounds.

  Args:
    decoder: the model's Decoder.
    batches: [(inputs [batch, length], real rows)].
    chosen: from `variants`; greedy first.
    rescorers: {'ngram': NgramModel, 'neural': LM} as the refinements need.
    max_len: most tokens generated per example.
    repeats: timed rounds.
    progress: one line per step.

  Returns:
    one dict per variant (COLUMNS and more).
  """
  if not chosen or chosen[0].k:
    raise ValueError('the first variant must be greedy (the reference).')
  compile_s = {}
  for variant in chosen:
    begin = time.perf_counter()
    jax.block_until_ready(variant.run(decoder, batches[0][0], max_len,
                                      rescorers))
    compile_s[variant] = time.perf_counter() - begin
    progress(f'compiled {variant.name} ({compile_s[variant]:.1f} s)')
  times = {variant: [] for variant in chosen}
  results = {}
  for round_ in range(repeats):
    for variant in chosen:
      begin = time.perf_counter()
      results[variant] = [variant.run(decoder, inputs, max_len, rescorers)
                          for inputs, _ in batches]
      jax.block_until_ready(results[variant])
      times[variant].append(time.perf_counter() - begin)
    progress(f'timed round {round_ + 1}/{repeats}')

  def gather(variant):
    rs = results[variant]
    tokens = np.concatenate([np.asarray(r.tokens)[:real]
                             for r, (_, real) in zip(rs, batches)])
    lengths = np.concatenate([np.asarray(r.lengths)[:real]
                              for r, (_, real) in zip(rs, batches)])
    calls = sum(int(np.asarray(r.model_calls)[:real].sum())
                for r, (_, real) in zip(rs, batches))
    return tokens, lengths, calls

  reference = gather(chosen[0])[0]
  greedy_wall = statistics.median(times[chosen[0]])
  plain = {}
  rows = []
  for variant in chosen:
    tokens, lengths, calls = gather(variant)
    wall = statistics.median(times[variant])
    block = float(lengths.sum() / max(calls, 1))
    if variant.k and not variant.spec:
      plain[variant.k] = (block, wall)
    base_block, base_wall = plain.get(variant.k, (block, wall))
    refinement = variant.refinement
    rows.append(dict(
        decoder=variant.name, k=max(variant.k, 1),
        refinement=variant.spec or None,
        drafts=refinement.drafts if refinement else 1,
        top_t=refinement.top_t if refinement else 1,
        rescorer=refinement.rescorer if refinement else None,
        weight=refinement.weight if refinement else None,
        tokens=int(lengths.sum()), model_calls=calls,
        mean_block=round(block, 3),
        block_gain=round(block / base_block - 1, 4) if variant.k else None,
        wall_s=round(wall, 6), walls=[round(t, 6) for t in times[variant]],
        tokens_per_s=round(float(lengths.sum()) / wall, 1),
        speedup_vs_plain=round(base_wall / wall, 3) if variant.k else None,
        speedup_vs_greedy=round(greedy_wall / wall, 3),
        identical_to_greedy=round(float(
            (tokens == reference).all(axis=1).mean()), 4),
        compile_s=round(compile_s[variant], 2)))
    progress(f'{variant.name:<28} block {block:6.3f}  wall {wall:7.3f} s')
  return rows
