"""Batches: deterministic by step, per-process shares, eval padding."""

import numpy as np
import pytest

from bpd_jax.data import batching

EXAMPLES = [([i + 4, 1], [i + 5, i + 6, 1]) for i in range(10)] + [
    ([4] * 9, [5, 1])]  # Too long a source: dropped.


def make(**kwargs):
  return batching.TrainBatches(**{**dict(
      examples=EXAMPLES, batch_size=4, max_source_len=5, max_target_len=4,
      seed=0), **kwargs})


def test_shapes_padding_and_filtering():
  batches = make()
  assert batches.dropped == 1
  batch = batches(0)
  assert batch['source'].shape == (4, 5) and batch['target'].shape == (4, 4)
  assert batch['source'].dtype == np.int32
  assert (batch['source'][:, 2:] == 0).all()


def test_deterministic_by_step_and_every_example_once_an_epoch():
  batches, again = make(), make()
  for step in (7, 0, 3):  # Any order: a batch depends on its step alone.
    np.testing.assert_array_equal(batches(step)['source'],
                                  again(step)['source'])
  # 10 examples, batch 4: steps 0..4 cover epochs 0 and 1 (20 examples).
  seen = np.concatenate([make()(s)['source'][:, 0] for s in range(5)])
  assert sorted(seen[:10]) == list(range(4, 14))
  assert sorted(seen[10:]) == list(range(4, 14))
  assert not (make(seed=1)(0)['source'] == batches(0)['source']).all()


def test_processes_split_the_global_batch():
  whole = make()(3)['source']
  parts = [make(process_index=p, process_count=2)(3)['source']
           for p in range(2)]
  np.testing.assert_array_equal(np.concatenate(parts), whole)


def test_errors():
  with pytest.raises(ValueError, match='multiple of the 3 processes'):
    make(process_count=3)
  with pytest.raises(ValueError, match='no training example fits'):
    make(max_source_len=1)


def test_eval_batches_fill_the_last_batch():
  sources = [[5, 1], [6, 7, 1], [8, 1]]
  batches = list(batching.eval_batches(sources, 2, 4))
  assert [real for _, real in batches] == [2, 1]
  assert all(b.shape == (2, 4) for b, _ in batches)
  np.testing.assert_array_equal(batches[1][0], [[8, 1, 0, 0], [1, 0, 0, 0]])


def test_truncate_keeps_eos():
  out, cut = batching.truncate([[5, 6, 7, 1], [5, 1]], 3)
  assert out == [[5, 6, 1], [5, 1]] and cut == 1
