"""Orbax checkpoints: round trip, keep N, params of another run."""

import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec

from bpd_jax.infra import checkpoints
from bpd_jax.infra import errors
from bpd_jax.infra import sharding


def state(value):
  return {'step': jnp.asarray(value), 'params': {'w': jnp.full((2, 3), value,
                                                               jnp.float32)}}


def test_round_trip_and_keep_newest(tmp_path):
  store = checkpoints.Checkpoints(str(tmp_path), max_to_keep=2)
  for step in (1, 2, 3):
    store.save(step, state(step))
  store.wait()
  assert store.latest_step() == 3
  assert sorted(int(p.name) for p in tmp_path.iterdir()
                if p.name.isdigit()) == [2, 3]
  restored = store.restore(3, checkpoints.abstract_like(state(0)))
  np.testing.assert_array_equal(restored['params']['w'], 3.0)
  store.close()


def test_params_dict_needs_a_checkpoint(tmp_path):
  with pytest.raises(FileNotFoundError, match='no checkpoint in'):
    checkpoints.restore_params_dict(str(tmp_path))
  store = checkpoints.Checkpoints(str(tmp_path))
  store.save(5, state(5))
  store.wait()
  store.close()
  params = checkpoints.restore_params_dict(str(tmp_path))
  np.testing.assert_array_equal(params['w'], np.full((2, 3), 5.0))


def test_a_step_keeps_its_meta_record_beside_the_state(tmp_path):
  store = checkpoints.Checkpoints(str(tmp_path))
  store.save(1, state(1))
  store.save(2, state(2), meta={'base': {'folder': '/m', 'fingerprint': 'f'}})
  store.wait()
  assert store.meta(1) == {}  # Saved without one (or by older versions).
  assert store.meta(2) == {'base': {'folder': '/m', 'fingerprint': 'f'}}
  store.close()
  step, params, meta = checkpoints.restore_latest_params(str(tmp_path))
  assert step == 2 and meta == {'base': {'folder': '/m', 'fingerprint': 'f'}}
  np.testing.assert_array_equal(params['w'], 2.0)


def test_a_fingerprint_names_the_values():
  tree = {'a': jnp.zeros((3, 4), jnp.bfloat16), 'b': jnp.arange(5.0)}
  same = jax.tree.map(np.asarray, tree)  # Other arrays, the same values.
  assert checkpoints.fingerprint(tree) == checkpoints.fingerprint(same)
  assert len(checkpoints.fingerprint(tree)) == 16
  changed = dict(tree, b=tree['b'].at[4].set(4.5))
  assert checkpoints.fingerprint(changed) != checkpoints.fingerprint(tree)


def test_keep_must_be_positive(tmp_path):
  with pytest.raises(ValueError, match='max_to_keep=0'):
    checkpoints.Checkpoints(str(tmp_path), max_to_keep=0)


def big_state(value):
  """A state whose arrays are written to data files (not inlined)."""
  return {'step': jnp.asarray(value),
          'params': {'w': jnp.arange(20_000, dtype=jnp.float32) * value},
          'opt_state': {'mu': jnp.full((5_000,), value, jnp.float32)}}


def saved_steps(directory, steps=(1, 2)):
  store = checkpoints.Checkpoints(str(directory), max_to_keep=3)
  for step in steps:
    store.save(step, big_state(step))
  store.wait()
  store.close()


def largest_data_file(directory, step):
  files = [p for p in (directory / str(step)).rglob('*') if p.is_file()
           and '/d/' in str(p)]
  return max(files, key=lambda p: p.stat().st_size)


def truncate(path):
  data = path.read_bytes()
  path.write_bytes(data[:len(data) // 2])


def flip_byte(path):
  data = bytearray(path.read_bytes())
  data[len(data) // 2] ^= 0x10
  path.write_bytes(bytes(data))


@pytest.mark.parametrize('damage', ['truncate', 'flip_byte', 'metadata'])
@pytest.mark.parametrize('only', [None, 'params'])
def test_damaged_newest_step_falls_back_to_the_intact_one(tmp_path, damage,
                                                         only):
  saved_steps(tmp_path)
  if damage == 'metadata':
    (tmp_path / '2' / 'state' / '_METADATA').unlink()
  else:
    {'truncate': truncate, 'flip_byte': flip_byte}[damage](
        largest_data_file(tmp_path, 2))
  lines = []
  store = checkpoints.Checkpoints(str(tmp_path), log=lines.append)
  abstract = checkpoints.abstract_like(big_state(0))
  if only:
    abstract = abstract[only]
  # A missing metadata file is damage with a target too: Orbax needs it
  # for some trees (a training state's types), so no caller reads without.
  step, state = store.restore_latest(lambda _: abstract, only=only)
  store.close()
  assert step == 1
  np.testing.assert_array_equal(state['params']['w'],
                                np.arange(20_000, dtype=np.float32))
  assert len(lines) == 2, lines
  assert lines[0].startswith(f'checkpoint step 2 in {tmp_path}')
  assert '\n' not in lines[0] and len(lines[0]) < 400
  assert lines[1] == (f'Using step 1, the newest intact checkpoint in '
                      f'{tmp_path}.')


def test_damaged_newer_steps_are_moved_aside_so_training_can_save_them(
    tmp_path):
  directory = tmp_path / 'checkpoints'
  saved_steps(directory, steps=(1, 2, 3))
  truncate(largest_data_file(directory, 3))
  (directory / '2' / 'state' / '_METADATA').unlink()
  aside = tmp_path / 'damaged_checkpoints'
  (aside / '3').mkdir(parents=True)  # Set aside by an earlier fallback.
  lines = []
  store = checkpoints.Checkpoints(str(directory), log=lines.append)
  abstract = checkpoints.abstract_like(big_state(0))
  step, _ = store.restore_latest(lambda _: abstract, set_aside=str(aside))
  assert step == 1
  assert store.all_steps() == [1]
  assert sorted(p.name for p in aside.iterdir()) == ['2', '3', '3.2']
  assert lines[-1].startswith(f'Moved the damaged step(s) {aside}/2, '
                              f'{aside}/3.2 aside')
  # The run goes on and saves the steps it had reached again.
  for step in (2, 3):
    store.save(step, big_state(step))
  store.wait()
  restored = store.restore(3, abstract)
  np.testing.assert_array_equal(restored['params']['w'],
                                big_state(3)['params']['w'])
  store.close()
  # Nothing set aside is deleted; a reader moves nothing.
  assert (aside / '3.2' / 'state').is_dir()


def test_a_reader_leaves_damaged_steps_in_place(tmp_path):
  saved_steps(tmp_path)
  truncate(largest_data_file(tmp_path, 2))
  lines = []
  params = checkpoints.restore_params_dict(str(tmp_path), log=lines.append)
  np.testing.assert_array_equal(params['w'], big_state(1)['params']['w'])
  assert (tmp_path / '2').is_dir()
  # The last line names the step read: the intact one.
  assert lines[-1] == f'Restored step 1 from {tmp_path}.'


def test_a_step_without_checksums_is_damaged_unless_asked_for(tmp_path):
  saved_steps(tmp_path)
  shutil.rmtree(tmp_path / '2' / 'checksums')
  # A flipped byte on top would load other numbers: nothing checks them.
  abstract = checkpoints.abstract_like(big_state(0))
  lines = []
  store = checkpoints.Checkpoints(str(tmp_path), log=lines.append)
  step, _ = store.restore_latest(lambda _: abstract)
  store.close()
  assert step == 1
  assert 'has no checksums, so it cannot be verified' in lines[0]
  assert 'train.read_unverified=True' in lines[0]
  lines = []
  store = checkpoints.Checkpoints(str(tmp_path), log=lines.append,
                                  read_unverified=True)
  step, _ = store.restore_latest(lambda _: abstract)
  store.close()
  assert step == 2
  assert lines == [f'Checkpoint step 2 in {tmp_path} has no checksums: read '
                   f'unverified (train.read_unverified).']
  params = checkpoints.restore_params_dict(str(tmp_path), log=print,
                                           read_unverified=True)
  np.testing.assert_array_equal(params['w'], big_state(2)['params']['w'])


def test_a_flipped_byte_never_loads_silently(tmp_path):
  # Byte positions across the data file, one at a time: each read either
  # fails (to decode, or its checksum) or gives back the saved values (a
  # byte no decoder reads); never other numbers.
  saved_steps(tmp_path, steps=(1,))
  path = largest_data_file(tmp_path, 1)
  original = path.read_bytes()
  abstract = checkpoints.abstract_like(big_state(0))
  expected = big_state(1)
  failures = 0
  for position in range(0, len(original), max(len(original) // 16, 1)):
    data = bytearray(original)
    data[position] ^= 0x01
    path.write_bytes(bytes(data))
    # A fresh reader: TensorStore caches what it has read.
    store = checkpoints.Checkpoints(str(tmp_path), log=lambda line: None)
    try:
      restored = store.restore(1, abstract)
    except checkpoints.Damaged as damaged:
      assert str(damaged).startswith('checkpoint step 1')
      failures += 1
    else:
      for name in ('params', 'opt_state'):
        for key in expected[name]:
          np.testing.assert_array_equal(restored[name][key],
                                        expected[name][key])
    store.close()
  assert failures >= 12  # Nearly every byte of a data file is data.


def test_params_alone_are_read_and_checked_for_evaluation(tmp_path):
  # Damage to the optimizer state alone (here its recorded checksum) stops
  # a training resume at that step, not an evaluation.
  saved_steps(tmp_path)
  sums_file = tmp_path / '2' / 'checksums' / 'metadata'
  sums = json.loads(sums_file.read_text())
  sums['opt_state/mu'] = '0' * 16
  sums_file.write_text(json.dumps(sums))
  store = checkpoints.Checkpoints(str(tmp_path), log=lambda line: None)
  abstract = checkpoints.abstract_like(big_state(0))
  assert store.restore_latest(lambda _: abstract)[0] == 1
  store.close()
  params = checkpoints.restore_params_dict(str(tmp_path), log=print)
  np.testing.assert_array_equal(params['w'], big_state(2)['params']['w'])


def test_no_intact_step_is_one_error_naming_the_newest(tmp_path):
  saved_steps(tmp_path)
  for step in (1, 2):
    truncate(largest_data_file(tmp_path, step))
  store = checkpoints.Checkpoints(str(tmp_path), log=lambda line: None)
  with pytest.raises(errors.CheckpointError,
                     match=r'no checkpoint in .* reads back intact \(2 '
                           r'tried; newest: checkpoint step 2'):
    store.restore_latest(lambda _: checkpoints.abstract_like(big_state(0)))
  store.close()


def test_checksums_change_with_any_word_and_ignore_sharding():
  x = jnp.arange(1000, dtype=jnp.float32)
  base = checkpoints.checksums({'x': x})
  assert base == checkpoints.checksums({'x': np.asarray(x)})
  assert base != checkpoints.checksums({'x': x.at[500].set(-0.0 + 500.0001)})
  swapped = x.at[1].set(0.0).at[0].set(1.0)  # Same words, other order.
  assert base != checkpoints.checksums({'x': swapped})
  zeros, ones = (checkpoints.checksums({'x': jnp.full(5000, v)})['x']
                 for v in (0.0, 1.0))
  assert zeros != ones and '0' * 16 not in (zeros, ones)
  assert set(checkpoints.checksums(
      {'a': jnp.ones(3, jnp.bfloat16), 'b': jnp.ones(2, bool),
       'c': jnp.int32(4)})) == {'a', 'b', 'c'}


def test_checksums_of_many_arrays_split_over_devices():
  # Each such array's program ends in an all-reduce; dozens in flight at
  # once stopped XLA's CPU runtime (a rendezvous timeout, the process
  # aborted) at a sharded training run's first save.
  mesh = sharding.make_mesh((8,), ('data',))
  split = NamedSharding(mesh, PartitionSpec('data'))
  arrays = {f'a{i}': jnp.full((64, 8 + i % 5), float(i)) for i in range(60)}
  placed = jax.device_put(arrays, split)
  assert checkpoints.checksums(placed) == checkpoints.checksums(
      jax.device_get(arrays))


def test_a_failed_save_is_one_save_error(tmp_path, monkeypatch):
  store = checkpoints.Checkpoints(str(tmp_path))

  def failing_save(*args, **kwargs):
    raise OSError(28, 'No space left on device')

  monkeypatch.setattr(store._manager, 'save', failing_save)
  with pytest.raises(errors.SaveError,
                     match=r'saving a checkpoint in .* failed: OSError: '
                           r'\[Errno 28\] No space left on device\.$'):
    store.save(1, state(1))
  store.close()
