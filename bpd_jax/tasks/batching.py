"""Batches of token ids: deterministic by step, each process its own rows.

The training batch of step s is a pure function of (seed, s), so a resumed
run reads exactly the batches an uninterrupted run would have read, with no
iterator state to checkpoint, and the same code runs on one host or many:
- TrainBatches: `batch_size` pairs a step, padded to the task's max
  lengths; the examples are visited in one seeded permutation per epoch,
  and each process takes its own contiguous share of the global batch.
- BucketedBatches: about `tokens_per_batch` tokens a step, from one length
  bucket (bucketing rather than packing: the models need no segment ids);
  each process batches its own shard of the data (WMT14 scale).
"""

import dataclasses
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from bpd_jax.infra import atomic_files

Example = tuple[list[int], list[int]]  # (source ids, target ids), eos-ended.


def pad_rows(rows: Sequence[Sequence[int]], length: int, *,
             pad_id: int) -> np.ndarray:
  """[len(rows), length] int32, right-padded with pad_id (the task
  vocabulary's: -1 where no vocabulary id pads)."""
  out = np.full((len(rows), length), pad_id, np.int32)
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
    max_target_len: target padding length; longer examples, and those
      without a target token, are dropped.
    seed: shuffling seed.
    pad_id: the id rows are padded with (the task vocabulary's).
    process_index: this process's index (jax.process_index()).
    process_count: number of processes (jax.process_count()).
  """
  examples: Sequence[Example]
  batch_size: int
  max_source_len: int
  max_target_len: int
  seed: int
  pad_id: int = dataclasses.field(kw_only=True)
  process_index: int = 0
  process_count: int = 1

  def __post_init__(self):
    if self.batch_size < 1 or self.batch_size % self.process_count:
      raise ValueError(f'batch_size={self.batch_size} must be a positive '
                       f'multiple of the {self.process_count} processes.')
    if hasattr(self.examples, 'lengths'):
      # Encoded pairs or images know their lengths: nothing is tokenized or
      # copied here (CelebA's 162k training images would take 2 GB as ids).
      source_lengths, target_lengths = self.examples.lengths()
    else:
      source_lengths = np.array([len(s) for s, _ in self.examples])
      target_lengths = np.array([len(t) for _, t in self.examples])
    # Indices of the examples that fit, visited in a permutation per epoch.
    self._kept = np.flatnonzero(_trainable(
        source_lengths, target_lengths, self.max_source_len,
        self.max_target_len))
    self.dropped = len(self.examples) - len(self._kept)
    if not len(self._kept):
      empty = int((target_lengths == 0).sum())
      raise ValueError(
          f'no training example fits max_source_len={self.max_source_len} '
          f'and max_target_len={self.max_target_len} with a target to learn'
          + (f' ({empty} of {len(self.examples)} have no target: prompts '
             f'alone, which python -m bpd_jax.distill continues first)'
             if empty else '') + '.')
    self._epoch, self._order = None, None

  @property
  def local_batch_size(self) -> int:
    return self.batch_size // self.process_count

  def _permutation(self, epoch: int) -> np.ndarray:
    if epoch != self._epoch:
      rng = np.random.default_rng([self.seed, epoch])
      self._epoch, self._order = epoch, rng.permutation(self._kept)
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
      epoch, index = divmod(position, len(self._kept))
      rows.append(self.examples[self._permutation(epoch)[index]])
    return dict(source=pad_rows([s for s, _ in rows], self.max_source_len,
                                pad_id=self.pad_id),
                target=pad_rows([t for _, t in rows], self.max_target_len,
                                pad_id=self.pad_id))


def _trainable(source_lengths: np.ndarray, target_lengths: np.ndarray,
               max_source_len: int, max_target_len: int) -> np.ndarray:
  """[examples] bool: the example fits the max lengths and has a target
  token to learn."""
  return ((source_lengths <= max_source_len)
          & (target_lengths <= max_target_len) & (target_lengths > 0))


def eval_batches(sources: Sequence[Sequence[int]], batch_size: int,
                 max_source_len: int, *,
                 pad_id: int) -> Iterator[tuple[np.ndarray, int]]:
  """Fixed-shape batches of eval sources, in order, padded with pad_id.

  The last batch is filled up with copies of its first source so that
  every batch has the same shape (one compilation) and the copies take no
  longer than a real row; the count says how many rows are real. Sources
  must fit max_source_len (see `truncate`).

  Yields:
    ([batch_size, max_source_len] int32, number of real rows).
  """
  for start in range(0, len(sources), batch_size):
    chunk = list(sources[start:start + batch_size])
    real = len(chunk)
    chunk += [chunk[0]] * (batch_size - real)
    yield pad_rows(chunk, max_source_len, pad_id=pad_id), real


def truncate(sources: Sequence[Sequence[int]], max_len: int, *,
             eos_id: int) -> tuple[list[list[int]], int]:
  """Cuts sources longer than max_len (keeping a final eos_id); returns
  the sources and how many were cut."""
  out, cut = [], 0
  for source in sources:
    if len(source) > max_len:
      source, cut = list(source[:max_len - 1]) + [eos_id], cut + 1
    out.append(list(source))
  return out, cut


class EncodedPairs(Sequence):
  """Encoded (source, target) pairs in flat arrays: compact for millions.

  A list of Python int lists costs ~30 bytes a token; these arrays cost 4,
  so a host's shard of WMT14 (4.5M pairs / hosts) fits in memory.
  """

  def __init__(self, sources: np.ndarray, source_ends: np.ndarray,
               targets: np.ndarray, target_ends: np.ndarray):
    self.sources, self.source_ends = sources, source_ends
    self.targets, self.target_ends = targets, target_ends

  @classmethod
  def from_pairs(cls, pairs: Iterable[Example]) -> 'EncodedPairs':
    pairs = list(pairs)
    ends = lambda side: np.cumsum([len(p[side]) for p in pairs], dtype=np.int64)
    flat = lambda side: np.fromiter(
        (token for p in pairs for token in p[side]), np.int32)
    return cls(flat(0), ends(0), flat(1), ends(1))

  @classmethod
  def concatenate(cls, parts: Sequence['EncodedPairs']) -> 'EncodedPairs':
    def joined(flat, ends):
      offsets = np.cumsum([0] + [len(getattr(p, flat)) for p in parts[:-1]])
      return (np.concatenate([getattr(p, flat) for p in parts]).astype(
                  np.int32),
              np.concatenate([getattr(p, ends) + offset
                              for p, offset in zip(parts, offsets)]).astype(
                                  np.int64))
    if not parts:
      return cls.from_pairs([])
    return cls(*joined('sources', 'source_ends'),
               *joined('targets', 'target_ends'))

  @classmethod
  def load(cls, path: str) -> 'EncodedPairs':
    with np.load(path) as arrays:
      return cls(*(arrays[name] for name in _ENCODED_FIELDS))

  def save(self, path: str) -> None:
    """Writes an .npz atomically (`atomic_files`)."""
    with atomic_files.replacing(path) as temp:
      np.savez(temp, **{name: getattr(self, name)
                        for name in _ENCODED_FIELDS})

  def __len__(self) -> int:
    return len(self.source_ends)

  def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
    def row(flat, ends):
      return flat[ends[index - 1] if index else 0:ends[index]]
    return (row(self.sources, self.source_ends),
            row(self.targets, self.target_ends))

  def lengths(self) -> tuple[np.ndarray, np.ndarray]:
    """[len(self)] source and target lengths."""
    return (np.diff(self.source_ends, prepend=0),
            np.diff(self.target_ends, prepend=0))


_ENCODED_FIELDS = ('sources', 'source_ends', 'targets', 'target_ends')
# Steps whose buckets are drawn together; see BucketedBatches._bucket_of.
_DRAW_CHUNK = 4096


class BucketedBatches:
  """Endless training batches of about `tokens_per_batch` tokens, by length.

  An example belongs to the first bucket whose length L fits both its source
  and target; a batch holds examples of one bucket, padded to L, so a batch
  of short sentences has many rows and one of long sentences few, and little
  of either is padding. The global batch of bucket L has
  `tokens_per_batch // L` rows, rounded down to a multiple of `row_multiple`
  (at least one multiple). Each bucket has its own shape, so the train step
  compiles once per bucket.

  The bucket of step s comes from a seeded draw per step, weighted by the
  number of batches a bucket holds in an epoch (all buckets are used up at
  the same rate); within a bucket the examples follow a seeded permutation
  per bucket epoch. So the batch of step s is a function of (seed, s) and
  of every process's bucket counts: a resumed run reads the same batches,
  and all processes draw the same bucket at each step (their shards differ,
  the draw does not). Each process builds batches from its own shard only;
  a bucket empty in some process's shard is never drawn.
  """

  def __init__(self, examples: Sequence[Example], boundaries: Sequence[int],
               tokens_per_batch: int, max_source_len: int,
               max_target_len: int, seed: int, *, pad_id: int,
               row_multiple: int = 1, process_index: int = 0,
               process_count: int = 1, all_counts=None):
    """Groups this process's examples into buckets.

    Args:
      examples: this process's shard of encoded pairs (eos-ended).
      boundaries: bucket lengths, ascending. Pairs longer than the last, or
        than max_source_len / max_target_len, are dropped.
      tokens_per_batch: global tokens per batch (rows x bucket length).
      max_source_len: source padding length at most (rows are padded to
        min(L, max_source_len)).
      max_target_len: target padding length at most.
      seed: shuffling seed.
      pad_id: the id rows are padded with (the task vocabulary's).
      row_multiple: global rows are a multiple of this (the devices of the
        data axis); must be a multiple of process_count.
      process_index: this process's index (jax.process_index()).
      process_count: number of processes (jax.process_count()).
      all_counts: maps this process's bucket sizes [buckets] to every
        process's [process_count, buckets] (multihost_utils.
        process_allgather); None on one process.
    """
    boundaries = [int(b) for b in boundaries]
    if not boundaries or boundaries != sorted(set(boundaries)) or \
        boundaries[0] < 1:
      raise ValueError(f'bucket boundaries {boundaries} must be positive and '
                       f'strictly ascending.')
    if tokens_per_batch < 1:
      raise ValueError(f'tokens_per_batch={tokens_per_batch} must be >= 1.')
    if row_multiple < 1 or row_multiple % process_count:
      raise ValueError(f'row_multiple={row_multiple} must be a positive '
                       f'multiple of the {process_count} processes.')
    self.boundaries, self.seed, self.pad_id = boundaries, seed, pad_id
    self.max_source_len, self.max_target_len = max_source_len, max_target_len
    self.process_count = process_count
    self.examples = examples
    if hasattr(examples, 'lengths'):
      source_lengths, target_lengths = examples.lengths()
    else:
      source_lengths = np.array([len(s) for s, _ in examples], np.int64)
      target_lengths = np.array([len(t) for _, t in examples], np.int64)
    fits = _trainable(source_lengths, target_lengths, max_source_len,
                      max_target_len)
    bucket = np.searchsorted(boundaries,
                             np.maximum(source_lengths, target_lengths))
    bucket = np.where(fits, bucket, len(boundaries))  # Past the end: dropped.
    self.dropped = int((bucket == len(boundaries)).sum())
    self.members = [np.flatnonzero(bucket == b)
                    for b in range(len(boundaries))]
    self.rows = [max(1, tokens_per_batch // length // row_multiple) *
                 row_multiple for length in boundaries]
    counts = np.array([len(m) for m in self.members], np.int64)
    everyone = (counts[None] if all_counts is None
                else np.asarray(all_counts(counts)).reshape(process_count, -1))
    usable = (everyone > 0).all(axis=0)
    if not usable.any():
      raise ValueError(
          f'no bucket has training examples in every process\'s shard '
          f'(bucket sizes per process: {everyone.tolist()}; boundaries '
          f'{boundaries}, max_source_len={max_source_len}, max_target_len='
          f'{max_target_len}).')
    batches_per_epoch = everyone.sum(axis=0) / np.array(self.rows)
    weights = np.where(usable, batches_per_epoch, 0.0)
    self.probabilities = weights / weights.sum()
    self._draws, self._counts_before = [], [np.zeros(len(boundaries),
                                                     np.int64)]
    self._orders = {}

  def _bucket_of(self, step: int) -> tuple[int, int]:
    """(bucket of `step`, how many earlier steps drew that bucket)."""
    chunk, offset = divmod(step, _DRAW_CHUNK)
    while len(self._draws) <= chunk:
      rng = np.random.default_rng([self.seed, 1, len(self._draws)])
      draws = rng.choice(len(self.boundaries), _DRAW_CHUNK,
                         p=self.probabilities)
      self._draws.append(draws)
      self._counts_before.append(self._counts_before[-1] + np.bincount(
          draws, minlength=len(self.boundaries)))
    draws = self._draws[chunk]
    bucket = int(draws[offset])
    earlier = self._counts_before[chunk][bucket] + int(
        (draws[:offset] == bucket).sum())
    return bucket, int(earlier)

  def _member(self, bucket: int, position: int) -> int:
    members = self.members[bucket]
    epoch, index = divmod(position, len(members))
    if self._orders.get(bucket, (None,))[0] != epoch:
      rng = np.random.default_rng([self.seed, 2, bucket, epoch])
      self._orders[bucket] = (epoch, rng.permutation(members))
    return int(self._orders[bucket][1][index])

  def __call__(self, step: int) -> dict[str, np.ndarray]:
    """This process's rows of the global batch of `step`.

    Returns:
      source: [rows / process_count, min(L, max_source_len)] int32.
      target: [rows / process_count, min(L, max_target_len)] int32.
    """
    bucket, earlier = self._bucket_of(step)
    local_rows = self.rows[bucket] // self.process_count
    first = earlier * local_rows
    rows = [self.examples[self._member(bucket, p)]
            for p in range(first, first + local_rows)]
    length = self.boundaries[bucket]
    return dict(
        source=pad_rows([s for s, _ in rows], min(length, self.max_source_len),
                        pad_id=self.pad_id),
        target=pad_rows([t for _, t in rows], min(length, self.max_target_len),
                        pad_id=self.pad_id))
