"""Verification criteria on hand-built logits."""

import jax.numpy as jnp
import numpy as np
import pytest

from bpd_jax.decoding import Distance, Exact, TopK, Typical, from_spec
from bpd_jax.decoding.criteria import accepted_count

# Two positions over a vocabulary of 5: best 3 then 2 (pos 0); best 0 (pos 1).
LOGITS = jnp.array([[0.0, 1.0, 2.0, 3.0, -1.0],
                    [4.0, 3.5, 1.0, 0.0, 3.9]])


@pytest.mark.parametrize('criterion,proposals,expected', [
    (Exact(), [3, 0], [True, True]),
    (Exact(), [2, 4], [False, False]),
    (TopK(1), [3, 4], [True, False]),
    (TopK(2), [2, 4], [True, True]),
    (TopK(2), [1, 1], [False, False]),
    (TopK(3), [1, 1], [True, True]),
    (Distance(0.0), [3, 0], [True, True]),
    (Distance(1.0), [2, 1], [True, True]),
    (Distance(1.0), [1, 2], [False, False]),
    (Distance(2.5), [1, 2], [True, True]),
])
def test_accepts(criterion, proposals, expected):
  np.testing.assert_array_equal(
      criterion.accepts(jnp.array(proposals), LOGITS), expected)


def test_ties_break_as_argmax_does():
  tied = jnp.array([[1.0, 2.0, 2.0]])
  for criterion in (Exact(), TopK(1)):
    np.testing.assert_array_equal(criterion.accepts(jnp.array([1]), tied),
                                  [True])
    np.testing.assert_array_equal(criterion.accepts(jnp.array([2]), tied),
                                  [False])


@pytest.mark.parametrize('accepts,min_accepted,expected', [
    ([True, True, False, True], 0, 2),
    ([False, True, True], 0, 0),
    ([False, True, True], 1, 3),  # Forced, then verification goes on.
    ([False, False, True], 1, 1),
    ([False, False], 5, 2),
    ([True, True], 0, 2),
])
def test_accepted_count(accepts, min_accepted, expected):
  assert int(accepted_count(jnp.array(accepts), min_accepted)) == expected


def test_accepted_count_batched():
  accepts = jnp.array([[[True, False]], [[True, True]]])
  np.testing.assert_array_equal(accepted_count(accepts), [[1], [2]])


@pytest.mark.parametrize('spec,expected', [
    ('exact', Exact()), ('top-k:3', TopK(3)), ('distance:1.5', Distance(1.5))])
def test_from_spec(spec, expected):
  assert from_spec(spec) == expected


@pytest.mark.parametrize('spec,message', [
    ('greedy', "criterion 'greedy' is not"),
    ('exact:1', "criterion 'exact:1' is not"),
    ('top-k:x', "criterion 'top-k:x'"),
    ('top-k:0', 't >= 1, got t=0'),
    ('distance:-1', 'eps >= 0, got eps=-1.0'),
    ('distance:inf', 'needs a finite eps >= 0, got eps=inf'),
    ('distance:nan', 'needs a finite eps >= 0, got eps=nan'),
    ('typical:nan,0.1', 'needs 0 < eps <= 1, got eps=nan'),
    ('typical:0.3,inf', 'needs a finite delta > 0, got delta=inf'),
])
def test_from_spec_errors(spec, message):
  with pytest.raises(ValueError, match=message):
    from_spec(spec)


@pytest.mark.parametrize('make,message', [
    (lambda: TopK(True), 'needs an integer t >= 1, got t=True'),
    (lambda: TopK(2.0), 'needs an integer t >= 1, got t=2.0'),
    (lambda: Distance('1'), "needs a finite eps >= 0, got eps='1'"),
    (lambda: Distance(True), 'needs a finite eps >= 0, got eps=True'),
    (lambda: Typical(eps='0.3', delta=0.09),
     "needs 0 < eps <= 1, got eps='0.3'"),
    (lambda: Typical(eps=0.3, delta=None), 'needs a finite delta > 0'),
])
def test_arguments_of_the_wrong_type_are_one_value_error(make, message):
  # Not a TypeError from comparing a string with a number.
  with pytest.raises(ValueError, match=message):
    make()


def test_numpy_numbers_are_numbers():
  assert TopK(np.int64(2)) == TopK(2) and type(TopK(np.int64(2)).t) is int
  assert Distance(np.float32(0.5)).spec == 'distance:0.5'
  assert Typical(np.float32(0.5), np.float64(0.1)).spec == 'typical:0.5,0.1'
