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


def test_a_long_loop_timed_faster_than_the_short_one_costs_nothing(
    monkeypatch):
  # Noise can make the long loop's fastest run beat the short loop's; the
  # slope is then negative and no cost is the honest answer.
  loop = FakeLoop(fixed=0.01, per_iteration=1e-4)
  monkeypatch.setattr(timing.time, 'perf_counter', loop.clock)
  short_runs = []

  def run(n):
    loop.run(n)
    if n == timing._SHORT:
      short_runs.append(n)
      if len(short_runs) > 2:  # The warm-up and the guess's run stay true.
        loop.now += 1.0  # A short loop later on is slow: a noisy machine.
  assert timing.per_iteration_seconds(run, repeats=2) == 0.0


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
