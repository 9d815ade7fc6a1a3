"""Per-iteration cost: the slope between loop lengths, fixed cost removed."""

import pytest

from bpd_jax import timing


class FakeLoop:
  """run(n) advances a fake clock by fixed + n * per_iteration seconds."""

  def __init__(self, fixed, per_iteration):
    self.now, self.fixed, self.per_iteration = 0.0, fixed, per_iteration
    self.lengths = []

  def clock(self):
    return self.now

  def run(self, n):
    self.lengths.append(n)
    self.now += self.fixed + n * self.per_iteration


@pytest.mark.parametrize('per_iteration, long', [
    (2e-5, 2500),  # The long loop lasts the target time, 0.05 s ...
    (3e-3, 32),  # ... but runs at least 8 short loops' iterations ...
    (1e-8, 4096),  # ... and at most 4096.
])
def test_slope_removes_the_fixed_cost(monkeypatch, per_iteration, long):
  loop = FakeLoop(fixed=0.01, per_iteration=per_iteration)
  monkeypatch.setattr(timing.time, 'perf_counter', loop.clock)
  assert timing.per_iteration_seconds(loop.run, repeats=3) == pytest.approx(
      per_iteration)
  assert max(loop.lengths) == pytest.approx(long, abs=1)


def noisy_short_loops(loop, delay):
  """run(n) of `loop`, with every short loop after the first two (the
  warm-up and the guess) `delay` seconds slow: a noisy machine."""
  short_runs = []

  def run(n):
    loop.run(n)
    if n == timing._SHORT:
      short_runs.append(n)
      if len(short_runs) > 2:
        loop.now += delay
  return run


def test_a_slope_lost_in_noise_is_timed_again_with_longer_loops(monkeypatch):
  # The long loop of the guess (500 iterations, 0.06 s) runs faster than the
  # slow short ones (0.11 s): the loop doubles until it is slower.
  loop = FakeLoop(fixed=0.01, per_iteration=1e-4)
  monkeypatch.setattr(timing.time, 'perf_counter', loop.clock)
  cost = timing.per_iteration_seconds(noisy_short_loops(loop, 0.1), repeats=2)
  assert max(loop.lengths) == 2000 and 0 < cost < 1e-4


def test_a_slope_never_above_the_noise_is_an_error_not_a_zero_cost(
    monkeypatch):
  loop = FakeLoop(fixed=0.01, per_iteration=1e-4)
  monkeypatch.setattr(timing.time, 'perf_counter', loop.clock)
  with pytest.raises(RuntimeError, match='4096 iterations took no longer'):
    timing.per_iteration_seconds(noisy_short_loops(loop, 1.0), repeats=2)
  assert max(loop.lengths) == 4096


def test_a_guess_lost_in_noise_plans_no_long_loop_of_slow_iterations(
    monkeypatch):
  # Slow iterations (0.3 s) and the guess's short loop 10 s late: its
  # difference is negative, which must not plan 4096 iterations (20 min).
  loop = FakeLoop(fixed=1.0, per_iteration=0.3)
  short_runs = []

  def run(n):
    loop.run(n)
    if n == timing._SHORT:
      short_runs.append(n)
      if len(short_runs) == 2:
        loop.now += 10.0
  monkeypatch.setattr(timing.time, 'perf_counter', loop.clock)
  assert timing.per_iteration_seconds(run, repeats=2) == pytest.approx(0.3)
  assert max(loop.lengths) == 8 * timing._SHORT


def test_decoder_loop_is_timed_by_its_forced_iterations(monkeypatch):
  """loop_iteration_seconds times decode(iterations=n) with the options."""
  clock = FakeLoop(fixed=0.02, per_iteration=4e-4)
  monkeypatch.setattr(timing.time, 'perf_counter', clock.clock)

  class FakeDecoder:
    config = type('Config', (), {'eos_id': 1})

    def decode(self, inputs, options, iterations):
      assert inputs.shape == (3, 5) and options == 'options'
      clock.run(int(iterations))
      return inputs

  assert timing.loop_iteration_seconds(
      FakeDecoder(), 'options', 3, 5, repeats=2) == pytest.approx(4e-4)
