"""Batches of token ids: deterministic by step, each process its own rows.

The training batch of step s is a pure function of (seed, s): the examples
are visited in one seeded permutation per epoch, and step s takes the next
`batch_size` of that endless sequence. A resumed run therefore reads exactly
the batches an uninterrupted run would have read, with no iterator state to
checkpoint. Each process takes its own contiguous share of the global batch
(the rows its devices hold), so the same code runs on one host or many.
"""

import dataclasses
from typing import Iterator, Sequence

import numpy as np

from bpd_jax.data import vocab as vocab_lib

Example = tuple[list[int], list[int]]  # (source ids, target ids), eos-ended.


def pad_rows(rows: Sequence[Sequence[int]], length: int) -> np.ndarray:
  """[len(rows), length] int32, right-padded with pad id 0."""
  out = np.full((len(rows), length), vocab_lib.PAD_ID, np.int32)
  for i, row in enumerate(rows):
    out[i, :len(row)] = row
  return out


@dataclasses.dataclass
class TrainBatches:
  """Endless shuffled training batches, indexed by step.

  Attributes:
    examples: encoded (source, target) pairs, each ending with eos.
    batch_size: global batch size (all processes together).
    max_source_len: source padding length; longer examples are dropped.
    max_target_len: target padding length; longer examples are dropped.
    seed: shuffling seed.
    process_index: this process's index (jax.process_index()).
    process_count: number of processes (jax.process_count()).
  """
  examples: Sequence[Example]
  batch_size: int
  max_source_len: int
  max_target_len: int
  seed: int
  process_index: int = 0
  process_count: int = 1

  def __post_init__(self):
    if self.batch_size < 1 or self.batch_size % self.process_count:
      raise ValueError(f'batch_size={self.batch_size} must be a positive '
                       f'multiple of the {self.process_count} processes.')
    kept = [(s, t) for s, t in self.examples
            if len(s) <= self.max_source_len and len(t) <= self.max_target_len]
    self.dropped = len(self.examples) - len(kept)
    if not kept:
      raise ValueError(
          f'no training example fits max_source_len={self.max_source_len} '
          f'and max_target_len={self.max_target_len}.')
    self.examples = kept
    self._epoch, self._order = None, None

  @property
  def local_batch_size(self) -> int:
    return self.batch_size // self.process_count

  def _permutation(self, epoch: int) -> np.ndarray:
    if epoch != self._epoch:
      rng = np.random.default_rng([self.seed, epoch])
      self._epoch, self._order = epoch, rng.permutation(len(self.examples))
    return self._order

  def __call__(self, step: int) -> dict[str, np.ndarray]:
    """This process's rows of the global batch of `step`.

    Returns:
      source: [local_batch, max_source_len] int32.
      target: [local_batch, max_target_len] int32.
    """
    first = step * self.batch_size + self.process_index * self.local_batch_size
    rows = []
    for position in range(first, first + self.local_batch_size):
      epoch, index = divmod(position, len(self.examples))
      rows.append(self.examples[self._permutation(epoch)[index]])
    return dict(source=pad_rows([s for s, _ in rows], self.max_source_len),
                target=pad_rows([t for _, t in rows], self.max_target_len))


def eval_batches(sources: Sequence[Sequence[int]], batch_size: int,
                 max_source_len: int) -> Iterator[tuple[np.ndarray, int]]:
  """Fixed-shape batches of eval sources, in order.

  The last batch is filled up with one-token sources (eos) so that every
  batch has the same shape (one compilation); the count says how many rows
  are real. Sources must fit max_source_len (see `truncate`).

  Yields:
    ([batch_size, max_source_len] int32, number of real rows).
  """
  for start in range(0, len(sources), batch_size):
    chunk = list(sources[start:start + batch_size])
    real = len(chunk)
    chunk += [[vocab_lib.EOS_ID]] * (batch_size - real)
    yield pad_rows(chunk, max_source_len), real


def truncate(sources: Sequence[Sequence[int]],
             max_len: int) -> tuple[list[list[int]], int]:
  """Cuts sources longer than max_len (keeping a final eos); returns count cut."""
  out, cut = [], 0
  for source in sources:
    if len(source) > max_len:
      source, cut = list(source[:max_len - 1]) + [vocab_lib.EOS_ID], cut + 1
    out.append(list(source))
  return out, cut
