"""Greedy decoder on the fake model: exact tokens, EOS and length handling."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bpd_jax.decoding import greedy_decode
from bpd_jax.decoding.prompt import required_positions

import fake_model


def decode(prompt, prompt_lengths, eos_position, max_len):
  prompt = jnp.asarray(prompt, jnp.int32)
  cache = fake_model.make_cache(
      prompt.shape[0], required_positions(prompt.shape[1], max_len),
      eos_position)
  run = jax.jit(functools.partial(
      greedy_decode, fake_model.make_fns('oracle', 1), max_len=max_len,
      eos_id=fake_model.EOS, pad_id=fake_model.PAD))
  return run(cache, prompt, jnp.asarray(prompt_lengths, jnp.int32))


@pytest.mark.parametrize('max_len', [1, 5, 12])
def test_matches_plain_python_greedy_per_example(max_len):
  prompt = [[3, 4, 5], [7, 0, 0], [2, 9, 0]]
  lengths = [3, 1, 2]
  eos_position = [6, 3, 100]  # Absolute positions; the last never ends.
  result = decode(prompt, lengths, eos_position, max_len)
  for i in range(3):
    expected = fake_model.reference_greedy(prompt[i][:lengths[i]],
                                           eos_position[i], max_len)
    n = len(expected)
    np.testing.assert_array_equal(result.tokens[i, :n], expected)
    assert (result.tokens[i, n:] == fake_model.PAD).all()
    assert result.lengths[i] == n
    assert result.model_calls[i] == n  # One call per token.
    np.testing.assert_array_equal(result.block_sizes[i], [0, n])


def test_eos_is_kept_and_ends_the_example():
  result = decode([[3, 4]], [2], [4], 10)  # Tokens at positions 2, 3; eos at 4.
  assert result.lengths[0] == 3
  assert result.tokens[0, 2] == fake_model.EOS
  assert (result.tokens[0, 3:] == fake_model.PAD).all()
