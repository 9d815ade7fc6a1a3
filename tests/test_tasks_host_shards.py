"""Each process's contiguous share of a split."""

from bpd_jax.tasks import host_shards


def test_shard_bounds_cover_every_example_once():
  bounds = [host_shards.shard_bounds(10, p, 3) for p in range(3)]
  assert bounds == [(0, 3), (3, 6), (6, 10)]
