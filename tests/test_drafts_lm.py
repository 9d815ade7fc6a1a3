"""The neural rescorer: its training windows, its training, save and load."""

import numpy as np
import pytest

from bpd_jax.drafts import lm as lm_lib

BOS, EOS = 2, 1


def test_windows_give_the_decoder_s_context():
  rows = lm_lib.windows([[5, 6], [7, 1]], 3, bos_id=BOS, eos_id=EOS)
  # eos appended to the first; bos before each sentence's start.
  np.testing.assert_array_equal(rows, [[2, 2, 2, 5], [2, 2, 5, 6],
                                       [2, 5, 6, 1], [2, 2, 2, 7],
                                       [2, 2, 7, 1]])
  with pytest.raises(ValueError, match='no sentences'):
    lm_lib.windows([], 3, bos_id=BOS, eos_id=EOS)
  with pytest.raises(ValueError, match='window must be an integer >= 1'):
    lm_lib.make(10, 0)


def test_training_learns_a_deterministic_text(tmp_path):
  # Each token follows from the one before: the loss falls well below the
  # uniform distribution's log(10) = 2.3 nats within a few steps.
  sentences = [[3, 4, 5, 6, 7, 8, 9]] * 20
  data = lm_lib.windows(sentences, 4, bos_id=BOS, eos_id=EOS)
  model = lm_lib.make(10, 4, d_model=16, layers=1)
  before = lm_lib.evaluate(model, data)
  lm_lib.train(model, data, steps=60, batch_size=32, learning_rate=1e-2,
               log=lambda _: None)
  after = lm_lib.evaluate(model, data)
  assert after < 0.5 < before
  lm_lib.save(model, str(tmp_path / 'lm'))
  assert lm_lib.evaluate(lm_lib.load(str(tmp_path / 'lm')), data) == \
      pytest.approx(after, rel=1e-6)


def test_any_number_of_steps_trains():
  data = lm_lib.windows([[3, 4, 5]], 2, bos_id=BOS, eos_id=EOS)
  for steps in (1, 2, 11):
    report = lm_lib.train(lm_lib.make(6, 2, d_model=8, layers=1), data,
                          steps=steps, batch_size=4, log=lambda _: None)
    assert report['steps'] == steps and np.isfinite(report['final_loss'])
  with pytest.raises(ValueError, match='steps >= 1'):
    lm_lib.train(lm_lib.make(6, 2, d_model=8, layers=1), data, steps=0)
