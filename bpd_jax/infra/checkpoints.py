"""Orbax checkpoints of the training state, verified when read back.

Saves are atomic (Orbax writes to a temporary directory and renames it), the
newest `max_to_keep` are kept, and a restore goes straight into the target
shardings given by abstract arrays (`jax.ShapeDtypeStruct`s with sharding).

Orbax reads back what the files hold: a flipped byte inside a compressed
chunk can decode to other numbers without an error. So each step also holds
a checksum of every array (`checksums`, two odd-weighted sums of its bits
modulo 2**32, computed on the devices from the global array: one value
whatever the mesh), and every restore recomputes and compares them. A
damaged, partial or unreadable step is reported in one line naming the
step and the array or file; `restore_latest` then takes the newest intact
step instead, and a training run moves the damaged newer steps aside (so
that it can save those step numbers again; nothing is deleted). A step
without checksums cannot be verified and counts as damaged, unless the
caller asks to read such steps unverified (`read_unverified`).

A step may also hold a small JSON record beside the state (`save`'s
`meta`, read back by `meta`): a run whose imported base is frozen saves
the trained parameters alone, and records there the base's folder and
fingerprint (`fingerprint`), from which every restore rebuilds the rest.

A save runs in the background; a failed one (disk full, no permission) is
raised as `errors.SaveError` by the next `check`, `save` or `wait`.
"""

import contextlib
import hashlib
import json
import os
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from bpd_jax.infra import errors

_STATE, _CHECKSUMS, _META = 'state', 'checksums', 'meta'


class Damaged(errors.CheckpointError):
  """One step cannot be read back intact (the message names what)."""


class Checkpoints:
  """The checkpoints of one training run (a directory of numbered steps)."""

  def __init__(self, directory: str, max_to_keep: int = 3, log=print,
               read_only: bool = False, read_unverified: bool = False):
    """A run's checkpoint directory (created unless `read_only`).

    Args:
      directory: WORKDIR/checkpoints.
      max_to_keep: the newest steps kept; older ones are deleted.
      log: where fallbacks to an older step are reported.
      read_only: only restores (another run's checkpoints).
      read_unverified: read a step that has no checksums (an older version
        wrote it) without verification, saying so; otherwise such a step
        is damaged.
    """
    if max_to_keep < 1:
      raise ValueError(f'max_to_keep={max_to_keep} must be >= 1.')
    self.directory = os.path.abspath(directory)
    self._log = log
    self._read_unverified = read_unverified
    _drop_orbax_unraisable_reports()
    # Orbax's own read_only option logs three warnings; create=False and no
    # saves read as well.
    options = (ocp.CheckpointManagerOptions(create=False) if read_only
               else ocp.CheckpointManagerOptions(max_to_keep=max_to_keep,
                                                 create=True))
    self._manager = ocp.CheckpointManager(
        self.directory, options=options,
        item_handlers={_STATE: ocp.PyTreeCheckpointHandler(),
                       _CHECKSUMS: ocp.JsonCheckpointHandler(),
                       _META: ocp.JsonCheckpointHandler()})

  def latest_step(self) -> int | None:
    return self._manager.latest_step()

  def all_steps(self) -> list[int]:
    return sorted(self._manager.all_steps())

  def save(self, step: int, state, meta: dict | None = None) -> None:
    """Starts saving `state` (a pytree of arrays) as `step`; see `wait`.

    Args:
      step: the step number.
      state: the arrays.
      meta: a JSON object saved beside them (`meta`), or None.

    Raises:
      errors.SaveError: an earlier save failed.
    """
    self.check()
    sums = checksums(state)  # Before returning: the caller may donate state.
    items = {_STATE: ocp.args.PyTreeSave(state),
             _CHECKSUMS: ocp.args.JsonSave(sums)}
    if meta is not None:
      items[_META] = ocp.args.JsonSave(meta)
    with _save_errors(self.directory):
      self._manager.save(step, args=ocp.args.Composite(**items), force=True)

  def meta(self, step: int) -> dict:
    """The JSON object saved with `step` ({} where it has none: a step
    saved without one, or by an older version).

    Raises:
      Damaged: the step has one that cannot be read.
    """
    step_dir = os.path.join(self.directory, str(step))
    if not os.path.isdir(os.path.join(step_dir, _META)):
      return {}
    try:
      return self._manager.restore(step, args=ocp.args.Composite(**{
          _META: ocp.args.JsonRestore()}))[_META]
    except Exception as error:
      raise Damaged(f'checkpoint step {step} in {self.directory}: its '
                    f'{_META} record cannot be read '
                    f'({_reason(error, step_dir)})') from error

  def check(self) -> None:
    """Raises errors.SaveError if a save that has finished failed.

    Orbax keeps a failed save's error for `wait_until_finished` (its
    check_for_errors does not see a failed finalisation), which returns at
    once when no save is in flight.
    """
    with _save_errors(self.directory):
      if not self._manager.is_saving_in_progress():
        self._manager.wait_until_finished()

  def restore(self, step: int, abstract_state, only: str | None = None):
    """The state saved at `step`, shaped and sharded as `abstract_state`.

    Args:
      step: a saved step.
      abstract_state: ShapeDtypeStructs (with sharding) of the saved state,
        or of its `only` subtree; None: numpy arrays, as saved.
      only: restore this top-level entry alone (e.g. 'params': an
        evaluation needs no optimizer state, and damage to that alone does
        not stop it); the result is {only: subtree}.

    Raises:
      Damaged: the step cannot be read back intact.
    """
    step_dir = os.path.join(self.directory, str(step))
    # Orbax restores some trees without this file and fails on others (a
    # training state's types are read from it): a step without it is
    # damaged, for every caller alike.
    if not os.path.isfile(os.path.join(step_dir, _STATE, '_METADATA')):
      raise Damaged(f'checkpoint step {step} in {self.directory} cannot be '
                    f'read: its metadata file {_STATE}/_METADATA is missing')
    reason = None
    try:
      restored = self._manager.restore(step, args=ocp.args.Composite(**{
          _STATE: self._restore_args(step, abstract_state, only)}))
    except Exception as error:  # Orbax/TensorStore raise many kinds.
      # Only the text is kept: the error's frames hold Orbax's read
      # coroutines (their reports are dropped when they are collected).
      reason = _reason(error, step_dir)
    if reason is not None:
      raise Damaged(f'checkpoint step {step} in {self.directory} cannot be '
                    f'read: {reason}')
    state = restored[_STATE]
    expected = self._saved_checksums(step, step_dir)
    if expected is not None:
      _verify(state, expected, step, self.directory)
    return state

  def _restore_args(self, step: int, abstract_state, only: str | None):
    """Orbax's restore arguments: into `abstract_state`, or as saved."""
    if abstract_state is None:
      tree = self._manager.item_metadata(step)[_STATE].tree
      item = {only: tree[only]} if only else tree
      restore_args = jax.tree.map(
          lambda _: ocp.RestoreArgs(restore_type=np.ndarray), item)
    else:
      item = {only: abstract_state} if only else abstract_state
      restore_args = ocp.checkpoint_utils.construct_restore_args(item)
    return ocp.args.PyTreeRestore(item, restore_args=restore_args,
                                  partial_restore=bool(only))

  def restore_latest(self, abstract_for, only: str | None = None,
                     set_aside: str | None = None):
    """(step, state) of the newest step that reads back intact.

    Args:
      abstract_for: step -> the abstract state to restore that step into
        (it may depend on the step: a phase's optimizer state), or None.
      only: as in `restore`.
      set_aside: a directory to move the damaged steps newer than the one
        restored into (a run that goes on training must be able to save
        those steps again); None leaves them where they are (a reader).

    Returns:
      (None, None) if the directory holds no step.

    Raises:
      errors.CheckpointError: no step reads back intact (naming each).
    """
    failures = []
    for step in reversed(self.all_steps()):
      try:
        state = self.restore(step, abstract_for(step), only=only)
      except Damaged as damaged:
        self._log(f'{damaged}; trying an older step.')
        failures.append(str(damaged))
        continue
      if failures:
        self._log(f'Using step {step}, the newest intact checkpoint in '
                  f'{self.directory}.')
        if set_aside is not None:
          self._set_aside([s for s in self.all_steps() if s > step],
                          set_aside)
      return step, state
    if failures:
      raise errors.CheckpointError(
          f'no checkpoint in {self.directory} reads back intact '
          f'({len(failures)} tried; newest: {failures[0]}).')
    return None, None

  def _set_aside(self, steps: list[int], destination: str) -> None:
    """Moves `steps` (damaged) into `destination`, each under a new name."""
    os.makedirs(destination, exist_ok=True)
    moved = []
    for step in steps:
      target = os.path.join(destination, str(step))
      copy = 1
      while os.path.exists(target):  # An earlier fallback's step `step`.
        copy += 1
        target = os.path.join(destination, f'{step}.{copy}')
      os.replace(os.path.join(self.directory, str(step)), target)
      moved.append(target)
    self._manager.reload()  # Orbax caches the steps it found.
    self._log(f'Moved the damaged step(s) {", ".join(moved)} aside (kept '
              f'for inspection, never read again): training goes on from '
              f'the intact step.')

  def wait(self) -> None:
    """Blocks until saves in flight are on disk.

    Raises:
      errors.SaveError: one of them failed.
    """
    with _save_errors(self.directory):
      self._manager.wait_until_finished()
      self._manager.check_for_errors()

  def close(self) -> None:
    """Waits for saves in flight and releases the directory (see `wait`)."""
    with _save_errors(self.directory):
      self._manager.close()

  def _saved_checksums(self, step: int, step_dir: str) -> dict | None:
    if not os.path.isdir(os.path.join(step_dir, _CHECKSUMS)):
      if not self._read_unverified:
        raise Damaged(f'checkpoint step {step} in {self.directory} has no '
                      f'checksums, so it cannot be verified (to read it '
                      f'anyway: --config.train.read_unverified=True)')
      self._log(f'Checkpoint step {step} in {self.directory} has no '
                f'checksums: read unverified (train.read_unverified).')
      return None
    try:
      return self._manager.restore(step, args=ocp.args.Composite(**{
          _CHECKSUMS: ocp.args.JsonRestore()}))[_CHECKSUMS]
    except Exception as error:
      raise Damaged(f'checkpoint step {step} in {self.directory}: its '
                    f'checksums cannot be read ({_reason(error, step_dir)})'
                    ) from error


def abstract_like(state, shardings=None):
  """ShapeDtypeStructs of `state`, placed with `shardings` (or as state is)."""
  if shardings is None:
    shardings = jax.tree.map(lambda x: x.sharding, state)
  return jax.tree.map(
      lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
      state, shardings)


def restore_params_dict(directory: str, log=print,
                        read_unverified: bool = False) -> dict:
  """The `params` of the newest intact checkpoint in `directory`, as nested
  dicts of numpy arrays (the optimizer state is not read).

  For warm starts and evaluation of a run whose model may differ from the
  caller's (other heads): no target structure is needed. `read_unverified`
  as in `Checkpoints`; `log` takes its fallbacks, then a line naming the
  step read.

  Raises:
    errors.MissingFileError: no checkpoint in `directory`.
    errors.CheckpointError: none reads back intact.
  """
  return restore_latest_params(directory, log, read_unverified)[1]


def restore_latest_params(directory: str, log=print,
                          read_unverified: bool = False
                          ) -> tuple[int, dict, dict]:
  """(step, params, meta) of the newest intact checkpoint in `directory`:
  its `params` as in `restore_params_dict`, and the record saved with it
  (`Checkpoints.meta`).

  Raises:
    errors.MissingFileError: no checkpoint in `directory`.
    errors.CheckpointError: none reads back intact.
  """
  directory = os.path.abspath(directory)
  if not os.path.isdir(directory):
    raise errors.MissingFileError(f'no checkpoint in {directory}: the '
                                  f'directory does not exist.')
  store = Checkpoints(directory, log=log, read_only=True,
                      read_unverified=read_unverified)
  try:
    step, restored = store.restore_latest(lambda _: None, only='params')
    meta = store.meta(step) if step is not None else {}
  finally:
    store.close()
  if step is None:
    raise errors.MissingFileError(f'no checkpoint in {directory}.')
  log(f'Restored step {step} from {directory}.')  # Which one a job reads.
  return step, restored['params'], meta


def checksums(tree) -> dict[str, str]:
  """{array path: checksum} of a pytree of arrays (jax or numpy).

  Each array's bits, as uint32 words w_i, are hashed with their index,
  h_i = mix(w_i + mix(i)) (`mix` a bijection of uint32), and summed twice,
  plainly and weighted by 2i + 1, modulo 2**32. A change to any one word
  changes h_i, hence both sums; words swapped between places change them
  too; constant arrays (zeros, ones) do not collide as plain sums of their
  words would. Exact integer arithmetic: the same on every backend and
  sharding.
  """
  leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
  # One small program per shape and dtype, cached across states, phases
  # and runs (one program for the whole state took 2.5 s to compile for
  # the tests' tiny model, at every phase of every run). The program of an
  # array split over devices ends in an all-reduce; each is awaited before
  # the next starts, since XLA's CPU runtime deadlocks with many
  # collective programs in flight at once (dozens, on simulated devices).
  sums = [jax.device_get(_array_checksum(leaf)) for _, leaf in leaves]
  return {_path_name(path): f'{int(a):08x}{int(b):08x}'
          for (path, _), (a, b) in zip(leaves, sums)}


def fingerprint(tree) -> str:
  """16 hex digits that name the values of a pytree of arrays: sha256 over
  its `checksums` (so the same on every backend and sharding), e.g. of an
  imported base, to tell later whether its folder still holds it."""
  text = json.dumps(checksums(tree), sort_keys=True)
  return hashlib.sha256(text.encode()).hexdigest()[:16]


def _mix(x):
  """MurmurHash3's 32-bit finaliser: a bijection that spreads every bit."""
  x = x ^ (x >> 16)
  x = x * jnp.uint32(0x85EBCA6B)
  x = x ^ (x >> 13)
  x = x * jnp.uint32(0xC2B2AE35)
  return x ^ (x >> 16)


@jax.jit
def _array_checksum(x):
  """[2] uint32: the two sums of `checksums` for one array."""
  words = _words(x)
  index = jnp.arange(words.size, dtype=jnp.uint32)
  hashed = _mix(words + _mix(index))
  return jnp.stack([jnp.sum(hashed, dtype=jnp.uint32),
                    jnp.sum(hashed * (2 * index + 1), dtype=jnp.uint32)])


def _words(x):
  """The bits of `x` as a flat uint32 vector (one word per element, two
  for 8-byte dtypes)."""
  if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
    x = jax.random.key_data(x)
  if x.dtype == jnp.bool_:
    x = x.astype(jnp.uint8)
  unsigned = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint32}
  if x.dtype.itemsize not in unsigned:
    raise TypeError(f'cannot checksum dtype {x.dtype}.')
  return jax.lax.bitcast_convert_type(
      x, unsigned[x.dtype.itemsize]).reshape(-1).astype(jnp.uint32)


def _verify(state, expected: dict, step: int, directory: str) -> None:
  actual = checksums(state)
  for name, value in actual.items():
    if name not in expected:
      raise Damaged(f'checkpoint step {step} in {directory}: array {name} '
                    f'has no saved checksum.')
    if value != expected[name]:
      raise Damaged(f'checkpoint step {step} in {directory}: array {name} '
                    f'does not match its checksum (its data file is '
                    f'damaged).')


def _path_name(path) -> str:
  return '/'.join(str(getattr(key, 'key', getattr(key, 'name',
                                                  getattr(key, 'idx', key))))
                  for key in path)


def _reason(error: Exception, step_dir: str) -> str:
  """What a failed read names, in one line: the array and the first line."""
  text = str(error)
  first = text.split('\n', 1)[0].split(' See full TensorStore details')[0]
  # TensorStore's spec names the array as the innermost relative 'path'.
  arrays = [path for path in re.findall(r"'path': '([^']*)'", text)
            if not path.startswith('/')]
  where = f'array {arrays[-1].rstrip("/")}: ' if arrays else ''
  missing = re.search(r"(No such file or directory|not found)[^\n]*", text)
  if not arrays and missing:
    first = missing.group(0)
  return f'{where}{type(error).__name__}: {first[:200]} (in {step_dir})'


@contextlib.contextmanager
def _save_errors(directory: str):
  """Any failure of Orbax's writer becomes one errors.SaveError line."""
  try:
    yield
  except errors.SaveError:
    raise
  except Exception as error:
    cause = error
    while cause.__cause__ is not None or cause.__context__ is not None:
      cause = cause.__cause__ or cause.__context__
    text = str(cause)
    step = re.search(r'/(\d+)\.orbax-checkpoint-tmp', text)
    # TensorStore: 'Failed to write N bytes to file F: File too large
    # [tensorstore_spec=...] [os_error_code='27']'.
    os_words = re.search(r'Failed [^:"]*: ([^\["]+?) \[', text)
    errno = re.search(r"os_error_code='(\d+)'", text)
    if os_words:
      reason = os_words.group(1) + (f' (errno {errno.group(1)})' if errno
                                    else '')
    else:
      reason = f'{type(cause).__name__}: {text.splitlines()[0][:200]}'
    what = f'checkpoint step {step.group(1)}' if step else 'a checkpoint'
    raise errors.SaveError(f'saving {what} in {directory} failed: {reason}.'
                           ) from error


def _drop_orbax_unraisable_reports() -> None:
  """Drops Python's reports of Orbax's and TensorStore's abandoned work.

  Two kinds, each reported as an unraisable error with its traceback
  (hundreds of lines) when Python collects it, often long after the event:
  after a failed write, TensorStore completes the save's other writes into
  an asyncio loop Orbax has closed ('RuntimeError: Event loop is closed');
  after a failed read, Orbax's read coroutines are closed unfinished
  ('Exception ignored in: <coroutine ...>'). The failure itself is raised
  as one SaveError or reported as one damaged step. Installed once; every
  other unraisable error goes to the previous hook.
  """
  previous = sys.unraisablehook
  if getattr(previous, 'drops_orbax_reports', False):
    return

  def hook(unraisable):
    error = unraisable.exc_value
    closed_loop = (isinstance(error, RuntimeError)
                   and str(error) == 'Event loop is closed')
    code = getattr(unraisable.object, 'cr_code', None)  # A coroutine's.
    abandoned_read = code is not None and any(
        library in code.co_filename for library in ('orbax', 'tensorstore'))
    if not (closed_loop or abandoned_read):
      previous(unraisable)

  hook.drops_orbax_reports = True
  sys.unraisablehook = hook
