"""The collectives of one decoding-loop iteration, read from the compiled
program (`compiled.as_text()`: XLA's HLO after SPMD partitioning).

A decode on a mesh is one program whose `while` loop is the decoding loop;
XLA (GSPMD) inserts the collectives that split parameters and a split
batch need. What one iteration runs is the loop's body and its condition,
with every computation they call: their all-reduce, all-gather,
reduce-scatter, all-to-all and collective-permute operations, counted and
sized here. An asynchronous collective (a `-start`/`-done` pair, as XLA
emits on accelerators) counts once, at its `-done`. The count is static:
the collectives of a loop nested in the body count once, not once per
inner iteration.
"""

import collections
import dataclasses
import re

KINDS = ('all-reduce', 'all-gather', 'reduce-scatter', 'all-to-all',
         'collective-permute')

# 'ROOT %name = SHAPE op(' or '%name = SHAPE op(': the shape, possibly a
# tuple with /*index=N*/ comments, runs up to the first ' op('.
_INSTRUCTION = re.compile(
    r'^\s*(?:ROOT\s+)?%\S+\s*=\s*(?P<shape>.*?)\s(?P<op>[a-z][\w-]*)\(')
# A computation's first line: '%name (params) -> shape {' or 'ENTRY %name'.
_HEADER = re.compile(r'^(?P<entry>ENTRY\s+)?%(?P<name>[\w.-]+)\s.*\{\s*$')
_CALLED = re.compile(
    r'\b(?:condition|body|to_apply|calls|true_computation|'
    r'false_computation)=%(?P<name>[\w.-]+)')
_BRANCHES = re.compile(r'\bbranch_computations=\{(?P<names>[^}]*)\}')
_LOOP = re.compile(r'\bcondition=%(?P<condition>[\w.-]+),\s*'
                   r'body=%(?P<body>[\w.-]+)')
_ARRAY = re.compile(r'\b(?P<dtype>pred|[subf]\d+|bf16|c64|c128|f8\w*)'
                    r'\[(?P<dims>[\d,]*)\]')
_BITS = {'pred': 8, 'bf16': 16, 'c64': 64, 'c128': 128}


@dataclasses.dataclass(frozen=True)
class Collectives:
  """The collectives of one loop iteration.

  Attributes:
    counts: {kind: operations} (kinds of KINDS; absent: none).
    sizes: {kind: bytes of those operations' results on one device}.
  """
  counts: dict[str, int]
  sizes: dict[str, int]

  @property
  def count(self) -> int:
    return sum(self.counts.values())

  @property
  def bytes(self) -> int:
    return sum(self.sizes.values())


def per_iteration(hlo_text: str) -> Collectives:
  """The collectives one iteration of the program's decoding loop runs.

  Args:
    hlo_text: a compiled program's text (`jax.stages.Compiled.as_text()`)
      whose entry computation runs the loop: of several `while` loops
      there, the one whose body and condition hold the most instructions.

  Raises:
    ValueError: the entry computation runs no `while` loop.
  """
  computations, entry = _computations(hlo_text)
  loops = [(match['condition'], match['body'])
           for line in computations[entry]
           for match in [_LOOP.search(line)] if match]
  if not loops:
    raise ValueError('the program\'s entry computation runs no while loop.')
  reached = max((_reached(computations, loop) for loop in loops), key=lambda
                names: sum(len(computations[name]) for name in names))
  counts, sizes = collections.Counter(), collections.Counter()
  for name in reached:
    for line in computations[name]:
      match = _INSTRUCTION.match(line)
      kind = match['op'].removesuffix('-done') if match else None
      if kind in KINDS:  # A '-start' is not: its '-done' counts.
        counts[kind] += 1
        sizes[kind] += shape_bytes(match['shape'])
  return Collectives(dict(counts), dict(sizes))


def shape_bytes(shape: str) -> int:
  """Bytes of the arrays an HLO shape names ('f32[4,1,32]{2,1,0}', or a
  tuple of them)."""
  total_bits = 0
  for match in _ARRAY.finditer(shape):
    dtype = match['dtype']
    bits = _BITS.get(dtype) or (8 if dtype.startswith('f8') else
                                int(dtype[1:]))
    elements = 1
    for dim in filter(None, match['dims'].split(',')):
      elements *= int(dim)
    total_bits += bits * elements
  return (total_bits + 7) // 8


def _computations(hlo_text: str) -> tuple[dict[str, list[str]], str]:
  """({computation name: its instruction lines}, the entry's name)."""
  computations, entry, current = {}, None, None
  for line in hlo_text.splitlines():
    header = _HEADER.match(line)
    if header:
      current = computations.setdefault(header['name'], [])
      entry = header['name'] if header['entry'] else entry
    elif line.strip() == '}':
      current = None
    elif current is not None:
      current.append(line)
  if entry is None:
    raise ValueError('the program text has no ENTRY computation.')
  return computations, entry


def _reached(computations, roots) -> set[str]:
  """`roots` and every computation they call, transitively."""
  reached, pending = set(), list(roots)
  while pending:
    name = pending.pop()
    if name in reached or name not in computations:
      continue
    reached.add(name)
    for line in computations[name]:
      pending += [match['name'] for match in _CALLED.finditer(line)]
      for match in _BRANCHES.finditer(line):
        pending += [branch.strip().lstrip('%')
                    for branch in match['names'].split(',')]
  return reached
