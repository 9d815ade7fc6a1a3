"""What counts as a number where a config field, a flag or an argument
asks for one: the one test of every check that refuses a value.

A bool is an int to Python (True == 1, isinstance(True, int)), so without
this test `max_len=True` decoded one token and `eval.ks=(True,)` reported a
second k = 1 row; every check here refuses bools. numpy's integers and
floats are numbers (a value read from an array or a sweep). NaN and the
infinities pass every `x > 0`-style range check the wrong way, so a number
must also be finite.
"""

import math
import numbers


def is_integer(value) -> bool:
  """An int or a numpy integer, not a bool."""
  return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_finite(value) -> bool:
  """An int or a float (numpy's too), not a bool, neither NaN nor
  infinite."""
  return (isinstance(value, numbers.Real) and not isinstance(value, bool)
          and math.isfinite(value))
