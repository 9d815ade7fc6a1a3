"""Each process's share of a split: the per-host sharding of the data.

Every process (jax.process_index() of jax.process_count()) reads, encodes
and batches only its own contiguous share of a big training split; the
text and image tasks both cut their shares here.
"""


def shard_bounds(size: int, process_index: int,
                 process_count: int) -> tuple[int, int]:
  """[start, end) of a process's contiguous share of `size` examples."""
  return (size * process_index // process_count,
          size * (process_index + 1) // process_count)
