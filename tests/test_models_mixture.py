"""The discretized logistic mixture output: its likelihood against a hand
computation, its two routes (whole distribution, one label) against each
other, and the checks of its fields."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bpd_jax.models import mixture as mixture_lib
from bpd_jax.models.mixture import OutputMixture


def hand_log_probs(weights, means, scales, n):
  """float64 log P(value j), j < n, of a mixture over n values on [-1, 1]:
  each component's logistic CDF taken at the bins' edges (the first and
  last bins open), weighted, summed; above a component's mean, as the
  difference of its survival function, which keeps the tail exact."""
  sigmoid = lambda x: 1.0 / (1.0 + math.exp(-x))
  half = 1.0 / (n - 1)
  out = []
  for j in range(n):
    x = -1.0 + 2.0 * half * j
    mass = 0.0
    for w, mu, s in zip(weights, means, scales):
      high = math.inf if j == n - 1 else (x + half - mu) / s
      low = -math.inf if j == 0 else (x - half - mu) / s
      if x > mu:  # P(X > low) - P(X > high).
        mass += w * (sigmoid(-low) - (0.0 if high == math.inf
                                      else sigmoid(-high)))
      else:
        mass += w * ((1.0 if high == math.inf else sigmoid(high))
                     - (0.0 if low == -math.inf else sigmoid(low)))
    out.append(math.log(mass))
  return np.array(out)


def params_of(weights, means, scales):
  return jnp.asarray(np.concatenate([np.log(weights), means, np.log(scales)]),
                     jnp.float32)


def test_log_probs_equal_a_hand_computation_and_sum_to_one():
  mixture = OutputMixture(components=2, first_id=3)
  weights, means, scales = [0.3, 0.7], [-0.4, 0.25], [0.2, 0.05]
  vocab_size = 3 + 9  # Nine values on [-1, 1], steps of 0.25.
  got = mixture.log_probs(params_of(weights, means, scales), vocab_size)
  assert got.shape == (vocab_size,)
  # float32 differences of the CDF: the tail's smallest masses (5e-4) to
  # a relative 1e-4.
  np.testing.assert_allclose(got[3:], hand_log_probs(weights, means, scales,
                                                     9), atol=2e-4)
  # pad, eos, bos: the floor's mass, 1e-30.
  np.testing.assert_allclose(got[:3], mixture_lib.OUTSIDE, rtol=1e-6)
  assert float(jnp.exp(got).sum()) == pytest.approx(1.0, abs=1e-6)


def test_the_label_route_is_the_whole_distribution_at_the_label():
  mixture = OutputMixture(components=3, first_id=3)
  vocab_size = 3 + 511
  params = jax.random.normal(jax.random.key(0), (64, 9)) * 0.3
  params = params.at[:, 6:].add(-3.0)  # Scales of a few values.
  labels = jax.random.randint(jax.random.key(1), (64,), 3, vocab_size)
  whole = mixture.log_probs(params, vocab_size)
  at_label = jnp.take_along_axis(whole, labels[:, None], 1)[:, 0]
  route = mixture.label_log_probs(params, labels, vocab_size)
  # Where the whole distribution's float32 differences hold (mass above
  # 1e-4), the two agree; beyond, the label route is the exact one.
  held = np.asarray(at_label) > math.log(1e-4)
  assert held.sum() > 10
  np.testing.assert_allclose(np.asarray(route)[held],
                             np.asarray(at_label)[held], atol=2e-3)


def test_the_label_route_is_exact_in_the_tails():
  mixture = OutputMixture(components=1, first_id=3)
  weights, means, scales = [1.0], [0.0], [0.01]
  n = 9
  hand = hand_log_probs(weights, means, scales, n)  # Down to -87.5.
  labels = jnp.arange(3, 3 + n)
  got = mixture.label_log_probs(
      jnp.broadcast_to(params_of(weights, means, scales), (n, 3)), labels,
      3 + n)
  np.testing.assert_allclose(got, hand, rtol=1e-5)
  assert hand.min() < -80  # Far below what float32 differences hold.


def test_the_mode_is_the_argmax_of_the_logits():
  mixture = OutputMixture(components=2, first_id=3)
  # A tall narrow component at value 2 of 9 beats a wide heavier one.
  weights, means, scales = [0.4, 0.6], [-0.5, 0.5], [0.02, 0.6]
  got = mixture.log_probs(params_of(weights, means, scales), 12)
  hand = hand_log_probs(weights, means, scales, 9)
  assert int(jnp.argmax(got)) == 3 + int(np.argmax(hand)) == 3 + 2


def test_initial_bias_centres_every_component_on_the_middle_value():
  mixture = OutputMixture(components=4, first_id=3)
  bias = mixture.initial_bias(3 + 511)
  probs = np.exp(mixture.log_probs(jnp.asarray(bias), 3 + 511))
  assert int(np.argmax(probs)) in (3 + 255, 3 + 254, 3 + 256)
  # About INITIAL_SCALE_BINS bins wide: most mass within +-32 values.
  assert probs[3 + 255 - 32:3 + 255 + 33].sum() > 0.9


@pytest.mark.parametrize('fields, message', [
    (dict(components=0), 'components=0 must be an integer >= 1'),
    (dict(first_id=513), r'first_id=513 must be an integer in \[1, 512\]'),
    (dict(first_id=2), r"special ids \{'bos_id': 2\} lie among"),
])
def test_problems(fields, message):
  problems = OutputMixture(**fields).problems(
      514, dict(pad_id=0, eos_id=1, bos_id=2))
  assert problems and any(
      __import__('re').search(message, p) for p in problems), problems


def test_pop_from_reads_the_flat_fields():
  fields = dict(mixture_components=3, mixture_first_id=3, d_model=8)
  assert OutputMixture.pop_from(fields) == OutputMixture(3, 3)
  assert fields == dict(d_model=8)
  assert OutputMixture.pop_from(dict(mixture_components=0,
                                     mixture_first_id=3)) is None
  assert OutputMixture.pop_from({}) is None
