"""Batches: deterministic by step, per-process shares, eval padding."""

import numpy as np
import pytest

from bpd_jax.tasks import batching

EXAMPLES = [([i + 4, 1], [i + 5, i + 6, 1]) for i in range(10)] + [
    ([4] * 9, [5, 1])]  # Too long a source: dropped.


def make(**kwargs):
  return batching.TrainBatches(**{**dict(
      examples=EXAMPLES, batch_size=4, max_source_len=5, max_target_len=4,
      seed=0, pad_id=0), **kwargs})


def test_shapes_padding_and_filtering():
  batches = make()
  assert batches.dropped == 1
  batch = batches(0)
  assert batch['source'].shape == (4, 5) and batch['target'].shape == (4, 4)
  assert batch['source'].dtype == np.int32
  assert (batch['source'][:, 2:] == 0).all()


def test_rows_are_padded_with_the_vocabularys_pad_id():
  # -1: an imported checkpoint whose every id is a token (Llama 3, GPT-2).
  batch = make(pad_id=-1)(0)
  assert (batch['source'][:, 2:] == -1).all()
  assert (batch['target'][:, 3:] == -1).all()
  np.testing.assert_array_equal(
      batching.pad_rows([[7, 0], [5]], 3, pad_id=-1), [[7, 0, -1],
                                                       [5, -1, -1]])


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


def test_eval_batches_fill_the_last_batch_with_copies_of_its_first_row():
  sources = [[5, 1], [6, 7, 1], [8, 1]]
  batches = list(batching.eval_batches(sources, 2, 4, pad_id=0))
  assert [real for _, real in batches] == [2, 1]
  assert all(b.shape == (2, 4) for b, _ in batches)
  np.testing.assert_array_equal(batches[1][0], [[8, 1, 0, 0], [8, 1, 0, 0]])
  (padded, _), = batching.eval_batches([[5, 0]], 2, 3, pad_id=-1)
  np.testing.assert_array_equal(padded, [[5, 0, -1], [5, 0, -1]])


def test_truncate_keeps_eos():
  out, cut = batching.truncate([[5, 6, 7, 1], [5, 1]], 3, eos_id=1)
  assert out == [[5, 6, 1], [5, 1]] and cut == 1
  out, _ = batching.truncate([[5, 6, 7, 9]], 3, eos_id=9)
  assert out == [[5, 6, 9]]



# Pair i: source [10 + i, 5 * (i % 11), eos] (2..12 tokens; its first id
# names it), target of 3..13 tokens. Buckets 4, 8, 16 (by the target).
PAIRS = [([10 + i] + [5] * (i % 11) + [1], [6] * (2 + i % 11) + [1])
         for i in range(66)]
SHAPES = {4: ((16, 4), (16, 4)), 8: ((8, 8), (8, 8)), 16: ((4, 16), (4, 12))}


def bucketed(**kwargs):
  return batching.BucketedBatches(**{**dict(
      examples=PAIRS, boundaries=(4, 8, 16), tokens_per_batch=64,
      max_source_len=16, max_target_len=12, seed=0, pad_id=0), **kwargs})


def bucket_of(batch):
  return {4: 4, 8: 8, 16: 16}[batch['source'].shape[1]]


def test_buckets_shapes_rows_and_filtering():
  batches = bucketed()
  assert batches.dropped == 6  # Targets of 13 tokens exceed max_target_len.
  assert batches.rows == [16, 8, 4]
  seen = set()
  for step in range(60):
    batch = batches(step)
    bucket = bucket_of(batch)
    seen.add(bucket)
    assert (batch['source'].shape, batch['target'].shape) == SHAPES[bucket]
    assert batch['source'].dtype == np.int32
    # Each row is the first bucket that fits its pair.
    lengths = (batch['target'] != 0).sum(1)
    smaller = {4: 0, 8: 4, 16: 8}[bucket]
    assert (lengths > smaller).all() and (lengths <= bucket).all()
  assert seen == {4, 8, 16}


def test_buckets_are_deterministic_by_step_and_visit_every_example():
  batches, again = bucketed(), bucketed()
  for step in (30, 2, 17, 0):  # Any order: a batch depends on its step.
    np.testing.assert_array_equal(batches(step)['source'],
                                  again(step)['source'])
  other = bucketed(seed=1)
  assert any(not np.array_equal(other(s)['source'], batches(s)['source'])
             for s in range(5))
  # Bucket 4 holds the 12 pairs with i % 11 in (0, 1); its first batch of
  # 16 rows visits each of them once, then starts the next epoch.
  first = next(batches(s) for s in range(100)
               if bucket_of(batches(s)) == 4)
  ids = first['source'][:, 0] - 10
  assert sorted(ids[:12]) == [i for i in range(66) if i % 11 in (0, 1)]
  # Bucket draws follow the number of batches a bucket holds per epoch
  # (12/16, 24/8 and 24/4): the big buckets come more often.
  counts = np.bincount([batches.boundaries.index(bucket_of(batches(s)))
                        for s in range(400)], minlength=3)
  assert counts[0] < counts[1] < counts[2]


def test_buckets_processes_draw_the_same_bucket_from_their_own_shards():
  shards = [PAIRS[p::2] for p in range(2)]
  everyone = np.array([[len(m) for m in bucketed(examples=s).members]
                       for s in shards])
  parts = [bucketed(examples=shards[p], process_index=p, process_count=2,
                    row_multiple=2, all_counts=lambda _: everyone)
           for p in range(2)]
  for step in range(30):
    a, b = parts[0](step), parts[1](step)
    bucket = bucket_of(a)
    assert bucket_of(b) == bucket
    assert a['source'].shape[0] == SHAPES[bucket][0][0] // 2
    assert ((a['source'][:, 0] - 10) % 2 == 0).all()  # Process 0: even i.
    assert ((b['source'][:, 0] - 10) % 2 == 1).all()


def test_buckets_errors():
  with pytest.raises(ValueError, match='strictly ascending'):
    bucketed(boundaries=(8, 4))
  with pytest.raises(ValueError, match='multiple of the 2 processes'):
    bucketed(row_multiple=3, process_count=2)
  with pytest.raises(ValueError, match='no bucket has training examples'):
    bucketed(max_source_len=1)


def test_encoded_pairs_round_trip(tmp_path):
  pairs = batching.EncodedPairs.from_pairs(PAIRS[:5])
  both = batching.EncodedPairs.concatenate(
      [pairs, batching.EncodedPairs.from_pairs(PAIRS[5:9])])
  assert len(both) == 9
  for i in range(9):
    assert [list(x) for x in both[i]] == [list(x) for x in PAIRS[i]]
  np.testing.assert_array_equal(both.lengths()[1],
                                [len(t) for _, t in PAIRS[:9]])
  path = str(tmp_path / 'pairs.npz')
  both.save(path)
  loaded = batching.EncodedPairs.load(path)
  assert [list(x) for x in loaded[8]] == [list(x) for x in PAIRS[8]]
