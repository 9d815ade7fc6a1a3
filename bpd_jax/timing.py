"""The cost of one iteration of a jitted loop, with the call's fixed cost out.

A jitted function that runs a loop n times costs a + n x b: a for the
dispatch and whatever runs once (an encoder, a prompt pass), b per
iteration. Timing two loop lengths and taking the slope gives b alone. The
loop count must be a traced argument, so both lengths share one compiled
program. `loop_iteration_seconds` times the decoders' own loop this way
(k='auto' decides by it; the bench reports it).
"""

import time
from typing import Callable

import jax
import numpy as np

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
  # Noise can make the difference tiny or negative; an iteration costs at
  # most long_time / (4 * _SHORT), and a guess far below that would plan
  # thousands of slow iterations (hours of a 1B-parameter model's calls).
  long_time = _seconds(run, 4 * _SHORT)
  guess = max((long_time - _seconds(run, _SHORT)) / (3 * _SHORT),
              long_time / (4 * _SHORT) / 64)
  long = int(min(max(_TARGET_SECONDS / guess, 8 * _SHORT), _MAX_LONG))
  # On a loaded machine the guess can be far too high and the long loop too
  # short to rise above the noise: time both again with the long one twice
  # as long until it does. A slope that never does is a failed measurement,
  # not a cost of zero.
  while True:
    short = fastest(_SHORT)
    slope = fastest(long) - short
    if slope > 0:
      return slope / (long - _SHORT)
    if long == _MAX_LONG:
      raise RuntimeError(
          f'timing failed: {long} iterations took no longer than {_SHORT} '
          f'({short:.3g} s); the machine is too noisy to measure this loop.')
    long = min(2 * long, _MAX_LONG)


def _seconds(run, n) -> float:
  begin = time.perf_counter()
  run(n)
  return time.perf_counter() - begin


def loop_iteration_seconds(decoder, options, batch_size: int,
                           input_len: int, repeats: int = 5) -> float:
  """Seconds of one iteration of a decoder's loop at this shape.

  The real loop, model call and bookkeeping: the slope of the decode's time
  between two forced loop lengths, so that the encoder, the prompt pass and
  the call's fixed cost cancel out.

  Args:
    decoder: a `generate.Decoder`.
    options: the `decoding.DecodeOptions` of the decode (plain drafts).
    batch_size: examples per call.
    input_len: input length (source or prompt).
    repeats: timings of each loop length; the fastest is kept.
  """
  config = decoder.config
  inputs = np.full((batch_size, input_len), config.eos_id, np.int32)
  return per_iteration_seconds(
      lambda n: jax.block_until_ready(decoder.decode(
          inputs, options, iterations=np.int32(n))), repeats)
