"""The collectives of one decoding-loop iteration, from a program's text."""

import pytest

from bpd_jax.bench import collectives

# The loop's body calls a computation with an all-reduce, runs an
# asynchronous all-gather (counted once) and a collective-permute; its
# condition an all-reduce of a flag; the entry computation's own
# all-reduce, outside the loop, does not count.
PROGRAM = """HloModule jit_decode, entry_computation_layout={(f32[4]{0})->f32[4]{0}}

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %sum = f32[] add(f32[] %x, f32[] %y)
}

%inner (p: f32[4,8]) -> f32[4,8] {
  %p = f32[4,8]{1,0} parameter(0)
  ROOT %all-reduce.1 = f32[4,8]{1,0} all-reduce(%p), channel_id=1, to_apply=%add
}

%body (state: (s32[], f32[4,8])) -> (s32[], f32[4,8]) {
  %state = (s32[], f32[4,8]{1,0}) parameter(0)
  %h = f32[4,8]{1,0} get-tuple-element(%state), index=1
  %call = f32[4,8]{1,0} call(%h), to_apply=%inner
  %ags = ((f32[4,2]{1,0}), f32[4,8]{1,0}) all-gather-start(%h), dimensions={1}
  %agd = f32[4,8]{1,0} all-gather-done(%ags)
  %cp = bf16[2,2]{1,0} collective-permute(%h), source_target_pairs={{0,1}}
  ROOT %out = (s32[], f32[4,8]{1,0}) tuple(%i, %call)
}

%cond (state.1: (s32[], f32[4,8])) -> pred[] {
  %state.1 = (s32[], f32[4,8]{1,0}) parameter(0)
  ROOT %done = pred[] all-reduce(%flag), channel_id=2, to_apply=%and
}

ENTRY %main (a: f32[4,8]) -> f32[4,8] {
  %a = f32[4,8]{1,0} parameter(0)
  %before = f32[4,8]{1,0} all-reduce(%a), channel_id=3, to_apply=%add
  %while.1 = (s32[], f32[4,8]{1,0}) while(%init), condition=%cond, body=%body
  ROOT %r = f32[4,8]{1,0} get-tuple-element(%while.1), index=1
}
"""


def test_one_iteration_counts_the_body_and_condition_and_their_calls():
  found = collectives.per_iteration(PROGRAM)
  assert found.counts == {'all-reduce': 2, 'all-gather': 1,
                          'collective-permute': 1}
  assert found.sizes == {'all-reduce': 4 * 8 * 4 + 1,
                         'all-gather': 4 * 8 * 4, 'collective-permute': 8}
  assert found.count == 4 and found.bytes == 128 + 1 + 128 + 8


def test_a_program_without_a_loop_is_refused():
  program = PROGRAM.replace(', condition=%cond, body=%body', '')
  with pytest.raises(ValueError, match='runs no while loop'):
    collectives.per_iteration(program)


@pytest.mark.parametrize('shape,expected', [
    ('f32[4,1,32]{2,1,0}', 512), ('pred[]', 1), ('bf16[3]', 6),
    ('(f32[2]{0}, s32[3]{0}, /*index=2*/u8[5])', 25), ('s4[3]', 2),
    ('f8e4m3fn[7]', 7)])
def test_shape_bytes(shape, expected):
  assert collectives.shape_bytes(shape) == expected
