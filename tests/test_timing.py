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


@pytest.mark.parametrize('per_iteration', [2e-5, 3e-3])
def test_slope_removes_the_fixed_cost(monkeypatch, per_iteration):
  loop = FakeLoop(fixed=0.01, per_iteration=per_iteration)
  monkeypatch.setattr(timing.time, 'perf_counter', loop.clock)
  assert timing.per_iteration_seconds(loop.run, repeats=3) == pytest.approx(
      per_iteration)
  # The long loop lasts about the target time, within the bounds.
  long = max(loop.lengths)
  assert long * per_iteration == pytest.approx(0.05, rel=0.1) or long in (
      32, 4096)


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
