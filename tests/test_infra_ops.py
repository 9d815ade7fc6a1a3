"""Per-example reads and writes."""

import jax.numpy as jnp
import numpy as np

from bpd_jax.infra import ops


def test_write_at_each_examples_offset():
  buffer = jnp.zeros((2, 6), jnp.int32)
  update = jnp.array([[1, 2], [3, 4]])
  np.testing.assert_array_equal(
      ops.write_at(buffer, update, jnp.array([0, 3])),
      [[1, 2, 0, 0, 0, 0], [0, 0, 0, 3, 4, 0]])


def test_write_at_trailing_dims_and_dtype():
  buffer = jnp.zeros((2, 4, 3), jnp.float32)
  update = jnp.ones((2, 1, 3), jnp.int32)
  out = ops.write_at(buffer, update, jnp.array([2, 1]))
  assert out.dtype == jnp.float32
  np.testing.assert_array_equal(out.sum(axis=2), [[0, 0, 3, 0], [0, 3, 0, 0]])


def test_take_at():
  array = jnp.arange(24).reshape(2, 4, 3)
  np.testing.assert_array_equal(ops.take_at(array, jnp.array([1, 3])),
                                [array[0, 1], array[1, 3]])
  np.testing.assert_array_equal(
      ops.take_at(jnp.array([[5, 6], [7, 8]]), jnp.array([1, 0])), [6, 7])


def test_argmax_equals_jnp_argmax_first_on_ties():
  values = np.random.default_rng(0).integers(0, 4, (50, 7)).astype(np.float32)
  np.testing.assert_array_equal(ops.argmax(jnp.asarray(values)),
                                np.argmax(values, axis=-1))
  assert ops.argmax(jnp.zeros((3, 2, 5))).shape == (3, 2)
  assert ops.argmax(jnp.zeros(5)).dtype == jnp.int32


def test_argmax_of_a_row_holding_nan_is_its_last_index():
  assert int(ops.argmax(jnp.array([1.0, jnp.nan, 2.0]))) == 2
  # Not the NaN's index (jnp.argmax's), nor the largest finite value's.
  assert int(ops.argmax(jnp.array([5.0, jnp.nan, 1.0, 0.0]))) == 3
  np.testing.assert_array_equal(
      ops.argmax(jnp.array([[jnp.nan, 0.0], [0.0, 1.0]])), [1, 1])
