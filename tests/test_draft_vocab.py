"""The drafting vocabulary: the most frequent ids, counted by hand."""

import numpy as np
import pytest

from bpd_jax import draft_vocab
from bpd_jax.infra import errors


def test_most_frequent_ids_by_hand():
  # Counts: 5 x4, 2 x3, 7 x3, 1 x1; padding (-1) not counted.
  sequences = [[5, 2, 5, 7, -1, -1], [7, 5, 2], [1, 5, 2, 7]]
  ids = draft_vocab.most_frequent(sequences, vocab_size=9, size=3)
  assert ids.dtype == np.int32
  np.testing.assert_array_equal(ids, [2, 5, 7])  # Ascending.
  # A tie at the boundary (2 and 7, 3 each) goes to the lower id.
  np.testing.assert_array_equal(
      draft_vocab.most_frequent(sequences, vocab_size=9, size=2), [2, 5])
  # Ids that never occur fill up last, lowest first.
  np.testing.assert_array_equal(
      draft_vocab.most_frequent(sequences, vocab_size=9, size=6),
      [0, 1, 2, 3, 5, 7])


@pytest.mark.parametrize('size,sequences,message', [
    (0, [[1]], r'a drafting vocabulary of 0 ids: it must hold 1 .. 9'),
    (10, [[1]], r'of 10 ids: it must hold 1 .. 9'),
    (2, [[1, 9]], 'token id 9 is outside the vocabulary of 9'),
])
def test_bad_sizes_and_ids(size, sequences, message):
  with pytest.raises(ValueError, match=message):
    draft_vocab.most_frequent(sequences, vocab_size=9, size=size)


class _Vocab:
  vocab_size = 6


class _Task:
  """The two things `of_task` reads: the training examples and the size."""
  vocab = _Vocab()

  def __init__(self, examples):
    self._examples = examples

  def encoded(self, split):
    assert split == 'train'
    return self._examples


def test_of_task_counts_the_training_targets_only(monkeypatch):
  # The sources are all 4s: they are not what drafts propose.
  task = _Task([([4, 4, 4], [3, 1]), ([4, 4], [3, 2, 1]), ([4], [5, 1])])
  np.testing.assert_array_equal(draft_vocab.of_task(task, 2), [1, 3])
  assert draft_vocab.of_task(task, 0) is None  # The whole vocabulary.
  # Only the first COUNTED_EXAMPLES examples are read.
  monkeypatch.setattr(draft_vocab, 'COUNTED_EXAMPLES', 1)
  np.testing.assert_array_equal(draft_vocab.of_task(task, 2), [1, 3])
  np.testing.assert_array_equal(draft_vocab.of_task(task, 3), [0, 1, 3])


def test_of_task_refuses_more_ids_than_the_vocabulary():
  with pytest.raises(errors.ConfigError, match='eval.draft_vocab_size=7 is '
                     r'more ids than the vocabulary holds \(6\)'):
    draft_vocab.of_task(_Task([([], [1])]), 7)
