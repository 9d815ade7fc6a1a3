"""A text task: sentence pairs by split, and the vocabulary that encodes them.

The text task modules (embedded, parallel_text, tfds_translation) each load
a TextTask; training and decoding read only what it serves, the
`spec.TextualTask` protocol (vocab, encoded pairs, this process's training
share, sources to decode, the pairs' text).
"""

import collections.abc
import dataclasses
from typing import Callable

from bpd_jax.tasks import batching
from bpd_jax.tasks.text import vocab as vocab_lib


class LazySplits(collections.abc.Mapping):
  """{split: pairs}, each split read on first use (WMT14's train is big)."""

  def __init__(self, readers: dict[str, Callable[[], list]]):
    self._readers, self._read = readers, {}

  def __getitem__(self, split):
    if split not in self._read:
      self._read[split] = self._readers[split]()
    return self._read[split]

  def __contains__(self, split):  # Without reading the split.
    return split in self._readers

  def __iter__(self):
    return iter(self._readers)

  def __len__(self):
    return len(self._readers)


@dataclasses.dataclass
class TextTask:
  """Sentence pairs by split, and the vocabulary that encodes them.

  Attributes:
    vocab: encodes every split.
    splits: {split: (source, target) sentence pairs}.
    train_shard: (process_index, process_count) -> that process's encoded
      training pairs; None: every process's share of encoded('train').
  """
  vocab: vocab_lib.Vocabulary
  splits: collections.abc.Mapping[str, list[tuple[str, str]]]
  train_shard: Callable[[int, int], collections.abc.Sequence[
      batching.Example]] | None = None

  def train_examples(self, process_index: int = 0, process_count: int = 1):
    """This process's share of the encoded training pairs."""
    if self.train_shard is not None:
      return self.train_shard(process_index, process_count)
    eos = [self.vocab.eos_id]
    share = self.pairs('train')[process_index::process_count]
    return batching.EncodedPairs.from_pairs(
        (s + eos, t + eos) for s, t in zip(
            self.vocab.encode_many([s for s, _ in share]),
            self.vocab.encode_many([t for _, t in share])))

  def train_source_len(self, max_source_len: int) -> int:
    """Training sources are padded to the task's max_source_len."""
    return max_source_len

  def pairs(self, split: str) -> list[tuple[str, str]]:
    """The split's (source sentence, target sentence) pairs."""
    if split not in self.splits:
      raise ValueError(f'split {split!r} is not one of {sorted(self.splits)}.')
    return self.splits[split]

  def encoded(self, split: str) -> list[tuple[list[int], list[int]]]:
    """(source ids, target ids) of a split, each ending with eos."""
    eos = [self.vocab.eos_id]
    return [(self.vocab.encode(s) + eos, self.vocab.encode(t) + eos)
            for s, t in self.pairs(split)]

  def sources(self, split: str, max_len: int,
              limit: int = 0) -> tuple[list[list[int]], int]:
    """Eos-ended source ids to decode, cut to max_len; and how many were cut.

    Args:
      split: split name.
      max_len: the model's max_source_len.
      limit: the first this many sentences (0: all).
    """
    pairs = self.pairs(split)[:limit or None]
    eos = [self.vocab.eos_id]
    return batching.truncate([self.vocab.encode(s) + eos for s, _ in pairs],
                             max_len, eos_id=self.vocab.eos_id)
