"""The cost of one iteration of a jitted loop, with the call's fixed cost out.

A jitted function that runs a loop n times costs a + n x b: a for the
dispatch and whatever runs once (an encoder, a prompt pass), b per
iteration. Timing two loop lengths and taking the slope gives b alone. The
loop count must be a traced argument, so both lengths share one compiled
program.
"""

import time
from typing import Callable

# The long loop runs at least this long, so that timer noise and the
# machine's jitter (a millisecond or so on a busy CPU) stay small beside it.
_TARGET_SECONDS = 0.05
_SHORT = 4
_MAX_LONG = 4096


def per_iteration_seconds(run: Callable[[int], None],
                          repeats: int = 5) -> float:
  """Seconds per iteration of `run(n)`, which runs n iterations and waits.

  Args:
    run: runs the loop n times (compiled once for any n) and blocks until
      the result is ready.
    repeats: timings of each loop length; the fastest is kept (the others
      carry the machine's noise).
  """
  run(_SHORT)  # Compiles and warms up.
  fastest = lambda n: min(_seconds(run, n) for _ in range(repeats))
  # A first guess of the iteration cost picks a long loop of ~_TARGET_SECONDS.
  guess = max(_seconds(run, 4 * _SHORT) - _seconds(run, _SHORT), 1e-7) / (
      3 * _SHORT)
  long = int(min(max(_TARGET_SECONDS / guess, 8 * _SHORT), _MAX_LONG))
  return max(fastest(long) - fastest(_SHORT), 0.0) / (long - _SHORT)


def _seconds(run, n) -> float:
  begin = time.perf_counter()
  run(n)
  return time.perf_counter() - begin
