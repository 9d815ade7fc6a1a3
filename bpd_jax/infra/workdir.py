"""What a job keeps in its workdir besides checkpoints: the lock of the job
that holds it, and the config of the run.

    with workdir.Lock.acquire(path, 'bpd_jax.main', log):
      workdir.check_config(config, path, 'bpd_jax.main', training=True,
                           log=log, write=process_index == 0)
      ...

WORKDIR/job.lock: two jobs training into one workdir interleave their
checkpoints, each resuming from the other's, and neither says so. A job takes
an exclusive `flock` of the file and keeps it until it ends; the file names
the holder, so the second job stops at once saying which job to wait for.
The OS drops a flock when its process dies, even by kill -9, so a crash
leaves no lock to delete by hand: the next job takes it over and says so.

WORKDIR/config.json: the config the run was trained with, as dotted fields.
A rerun with another model, seed or learning rate would restore checkpoints
that mean something else (a shape error at best, a silently mixed run at
worst); a reader (evaluate, bench, drafts, distill) given another model's
config would build the wrong model around the weights. `check_config`
compares the config with the record before any work; the constants below
say which fields may differ, and why. The record also holds the run's
vocabulary (`VOCABULARY_FIELDS`: its fingerprint, size and where it was
read), written and compared by `check_vocabulary` once the task is loaded:
two vocabularies of one size can give the ids other meanings.
"""

import datetime
import fcntl
import fnmatch
import json
import os
import socket

from bpd_jax.infra import atomic_files
from bpd_jax.infra import errors

LOCK_FILE = 'job.lock'
CONFIG_FILE = 'config.json'

# The sections whose fields say what a checkpoint holds: the weights' seed,
# the data and vocabulary, the architecture, the training that made it.
# Any other section (mesh, eval, drafts, one added later) sets how a job lays
# out or what it measures, and may change on a rerun.
CHECKPOINT_SECTIONS = ('seed', 'task', 'model', 'train')

# Fields (fnmatch patterns) a rerun of the training job may change: they set
# how long it runs, what it logs and evaluates and how it lays out, not what
# the checkpoint means. Every other field of CHECKPOINT_SECTIONS refuses.
MAY_CHANGE_ON_RESUME = (
    'train.base_steps',  # A longer phase continues where the run stopped.
    'train.head_steps',  # Likewise (a linear decay then follows new rates).
    'train.log_every',  # Only how often it prints.
    'train.checkpoint_every',  # Only how often it saves.
    'train.keep_checkpoints',  # Only how many saves it keeps.
    'train.init_from',  # Read only at a run's first start, not on resume.
    'train.init_heads',  # Likewise.
    'train.read_unverified',  # How checkpoints are read, not what they hold.
    'mesh.*',  # The same arrays over another device layout.
    'eval.*',  # What it decodes and measures, not what it trains.
    'drafts.*',  # The draft job's settings; training reads none.
)

# Fields (fnmatch patterns) a job that only reads a run (evaluate, bench,
# drafts, distill) must share with it: the architecture and the vocabulary,
# without which the weights do not fit or the tokens mean other words.
# Everything else may differ for a reader: it may evaluate with other eval
# settings, or on data moved elsewhere.
READERS_COMPARE = (
    'model.*',  # The architecture the weights fit.
    'task.name',  # The task, hence the vocabulary's kind and its data.
    'task.vocab_type',  # 'sentencepiece' or 'words': the token ids' meaning.
    'task.vocab_size',  # The embedding and output widths.
)
# Exceptions to READERS_COMPARE: fields of those sections no reader uses.
READERS_IGNORE = (
    'model.dropout_rate',  # Training only.
)

# Fields added to the configs after runs were recorded without them, each
# with the value that does what those runs did: a record that lacks one
# compares as if it held that value, so those runs still resume and read.
ADDED_FIELDS = {
    'train.head_position_fraction': 1.0,  # The heads saw every position.
    'train.head_targets': 'data',  # The heads learned the true tokens.
    'train.draft_inputs': 'data',  # Teacher forcing.
    'model.draft_source': 'none',  # The draft layer read no source.
    # The draft layer read the top only ([]: as config.json writes a tuple).
    'model.draft_feature_layers': [],
    'model.block_layers': 1,  # No block drafter: its default.
    'model.correction_recurrent': False,  # The correction read a token.
    'train.head_loss_decay': 0.0,  # The heads weighed the same.
    'train.acceptance_weighted': False,  # No weighing by reach.
    'train.read_unverified': False,  # Unverifiable steps were refused.
    'train.tokens_per_batch': 0,  # Fixed batches of train.batch_size.
    'train.bucket_lengths': [],  # None (as config.json writes a tuple).
    'train.input_dropout': 0.0,  # Every previous token was read.
    # The base was the paper's Transformer (configs/base.py's model section).
    'model.norm': 'layer', 'model.feed_forward': 'plain',
    'model.num_kv_heads': None, 'model.head_dim': None,
    'model.qkv_bias': True, 'model.out_bias': True, 'model.ffn_bias': True,
    'model.rope_theta': 10_000.0, 'model.rope_scaling': None,
    # Image residuals were taken from bicubic upsampling, with no filter.
    'task.reference': 'bicubic', 'task.reference_window': 5,
    'task.reference_path': '',
    # The defaults of a task's optional fields (spec.TaskSpec.defaults),
    # written into a config since they are filled in by the task check: a
    # run whose config left one out did what the default does.
    'task.targets': 'intensities', 'task.scales': [1, 2, 4, 8],
    'task.seed': 0, 'task.mock_examples': 0,
    'task.vocab_type': 'sentencepiece', 'task.distilled': '',
    'eval.perplexity_tokens': 0,  # Perplexity scored the whole split.
    'eval.drafters': [], 'eval.ngram_path': '',  # Heads drafted alone.
}

# The record's entries that are no config field: the run's vocabulary, as
# the job that trained it found it (`check_vocabulary`).
VOCABULARY_FIELDS = ('vocabulary.fingerprint', 'vocabulary.size',
                     'vocabulary.source')

_ABSENT = object()  # A field one side of a comparison does not have.


class Lock:
  """WORKDIR/job.lock, held with an exclusive flock while a job runs.

  Take it with `Lock.acquire`; `release()` (or leaving a `with` block)
  empties the file and drops the flock, so the next job finds no previous
  holder to report.

  Attributes:
    path: the lock file.
  """

  def __init__(self, path: str, fd: int):
    self.path = path
    self._fd = fd

  @classmethod
  def acquire(cls, workdir: str, job: str, log=print) -> 'Lock':
    """Holds WORKDIR/job.lock for `job`, or stops at once.

    Args:
      workdir: the run's directory (made if missing).
      job: the job's name, shown to a job that finds the lock held.
      log: takes the line saying a crashed holder's lock was taken over.

    Raises:
      errors.WorkdirError: another job holds the lock, or the workdir
        cannot be written.
    """
    path = os.path.join(workdir, LOCK_FILE)
    fd = _open_lock_file(workdir, path)
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      holder = _holder(fd) or 'another job'
      os.close(fd)
      raise errors.WorkdirError(
          f'{workdir} is in use by {holder}: wait for it to end, or use '
          'another --workdir.') from None
    try:
      previous = _holder(fd)
      if previous:
        log(f'took over the lock left by {previous}, which ended without '
            'releasing it.')
      _write_holder(fd, job)
    except OSError as error:  # E.g. a full disk.
      os.close(fd)  # Drops the flock.
      raise _workdir_error(workdir, error) from None
    except BaseException:
      os.close(fd)
      raise
    return cls(path, fd)

  def release(self):
    """Empties the file and drops the lock (again: nothing)."""
    if self._fd is None:
      return
    fd, self._fd = self._fd, None
    try:
      os.ftruncate(fd, 0)  # A clean end: no holder for the next job to report.
    finally:
      fcntl.flock(fd, fcntl.LOCK_UN)
      os.close(fd)

  def __enter__(self) -> 'Lock':
    return self

  def __exit__(self, *exc_info):
    self.release()


def _workdir_error(workdir: str, error: OSError) -> errors.WorkdirError:
  """The one-line error of a workdir that cannot be written."""
  reason = error.strerror or str(error)
  if isinstance(error, FileExistsError):
    reason = 'a file of that name exists, not a directory'
  return errors.WorkdirError(f'cannot write to the workdir {workdir}: '
                             f'{reason}.')


def _open_lock_file(workdir: str, path: str) -> int:
  """The lock file's descriptor, the workdir and the file made if missing."""
  try:
    os.makedirs(workdir, exist_ok=True)
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
  except OSError as error:
    raise _workdir_error(workdir, error) from None


def _holder(fd: int) -> str:
  """Who the lock file names: '' if empty, 'another job' if unparseable.

  A holder writes its record right after taking the flock; a reader that
  finds the flock held but the file empty or half written met it then.
  """
  data = os.pread(fd, 1 << 16, 0)
  if not data.strip():
    return ''
  try:
    record = json.loads(data)
    return (f"{record['job']} (pid {record['pid']} on host {record['host']}, "
            f"since {_show_time(record['started'])})")
  except (ValueError, TypeError, KeyError):
    return 'another job'


def _show_time(started: str) -> str:
  """An ISO time as '2026-12-01 14:03:05 UTC' (as given if not ISO)."""
  try:
    when = datetime.datetime.fromisoformat(started)
  except (TypeError, ValueError):
    return str(started)
  return when.astimezone(datetime.timezone.utc).strftime(
      '%Y-%m-%d %H:%M:%S UTC')


def _write_holder(fd: int, job: str):
  """Replaces the lock file's content with this process's record."""
  now = datetime.datetime.now(datetime.timezone.utc)
  record = dict(job=job, pid=os.getpid(), host=socket.gethostname(),
                started=now.isoformat(timespec='seconds'))
  os.ftruncate(fd, 0)
  os.pwrite(fd, json.dumps(record).encode() + b'\n', 0)
  os.fsync(fd)  # On disk before the job's work: a crash still names it.


def config_fields(config) -> dict[str, object]:
  """The config as {dotted field name: JSON value}, e.g. 'model.num_heads'.

  Nested sections and dict fields are flattened ('task.splits.train');
  values go through JSON (tuples become lists) so that one read back from
  config.json compares equal to the same field of a fresh config.
  """
  fields = {}
  _flatten(config, '', fields)
  return json.loads(json.dumps(fields, default=repr))


def _flatten(section, prefix: str, fields: dict):
  """Adds the fields of a ConfigDict or dict to `fields`, names dotted.

  An empty dict stays one field ({}), so that it differs from none.
  """
  for key, value in section.items():
    name = f'{prefix}{key}'
    if hasattr(value, 'items') and len(value):
      _flatten(value, f'{name}.', fields)
    else:
      fields[name] = {} if hasattr(value, 'items') else value


def _matches(field: str, patterns) -> bool:
  """Whether the field name matches one of the fnmatch patterns."""
  return any(fnmatch.fnmatchcase(field, pattern) for pattern in patterns)


def may_change_on_resume(field: str) -> bool:
  """Whether a rerun of the training job may change this field."""
  return (field.split('.')[0] not in CHECKPOINT_SECTIONS
          or _matches(field, MAY_CHANGE_ON_RESUME))


def readers_compare(field: str) -> bool:
  """Whether a job that only reads a run must share this field with it."""
  return (_matches(field, READERS_COMPARE)
          and not _matches(field, READERS_IGNORE))


def _differences(saved: dict, now: dict) -> list[tuple[str, object, object]]:
  """(field, saved value, current value) of each field that differs.

  A field on one side only differs too; its other value is _ABSENT (for a
  record, the value of ADDED_FIELDS if the field is one of them).
  """
  saved = {**{field: value for field, value in ADDED_FIELDS.items()
              if field in now}, **saved}
  return [(field, saved.get(field, _ABSENT), now.get(field, _ABSENT))
          for field in sorted(saved.keys() | now.keys())
          if saved.get(field, _ABSENT) != now.get(field, _ABSENT)]


def _show(value) -> str:
  """A field's value as the record writes it; '<absent>' for none."""
  return '<absent>' if value is _ABSENT else json.dumps(value)


def _show_refused(differences) -> str:
  """'model.num_heads 4 (saved) vs 8 (now); seed 0 vs 7'."""
  (field, saved, now), *rest = differences
  first = f'{field} {_show(saved)} (saved) vs {_show(now)} (now)'
  return '; '.join([first] + [f'{field} {_show(saved)} vs {_show(now)}'
                              for field, saved, now in rest])


def _show_changed(differences) -> str:
  """'train.base_steps 600 -> 800; eval.ks [2, 4] -> [4]'."""
  return '; '.join(f'{field} {_show(saved)} -> {_show(now)}'
                   for field, saved, now in differences)


def _read_record(path: str) -> dict | None:
  """The fields saved in config.json (None if there is no file).

  Raises:
    errors.WorkdirError: the file cannot be read or holds no fields.
  """
  try:
    with open(path, encoding='utf-8') as f:
      record = json.load(f)
  except (FileNotFoundError, NotADirectoryError):
    return None  # No record, or no workdir (the workdir's own error says).
  except (OSError, ValueError) as error:
    reason = getattr(error, 'strerror', None) or str(error).split('\n')[0]
    raise errors.WorkdirError(
        f'cannot read the run\'s config record {path} ({reason}): delete it '
        'to run without the check (training then saves its config anew).'
    ) from None
  if not isinstance(record, dict):
    raise errors.WorkdirError(
        f'{path} holds no config fields (a JSON {type(record).__name__}): '
        'delete it to run without the check (training then saves its '
        'config anew).')
  return record


def _write_record(workdir: str, fields: dict):
  """Writes config.json atomically (`atomic_files`): a job killed or a disk
  full mid-write leaves the old record (or none), never half one.

  Raises:
    errors.WorkdirError: the workdir cannot be made.
    errors.WriteError: the record could not be written.
  """
  try:
    os.makedirs(workdir, exist_ok=True)
  except OSError as error:
    raise _workdir_error(workdir, error) from None
  atomic_files.write_text(os.path.join(workdir, CONFIG_FILE),
                          json.dumps(fields, indent=1, sort_keys=True) + '\n')


def check_config(config, workdir: str, job: str, training: bool, log=print,
                 write: bool = True):
  """Stops a job whose config does not fit the run saved in WORKDIR.

  Training: a field outside `may_change_on_resume` that differs from the
  record refuses; changed fields that may change are logged and recorded.
  The first start records the config. Reading (evaluate, bench, drafts,
  distill): a `readers_compare` field that differs refuses; the record is
  never written.

  Args:
    config: the job's checked config.
    workdir: the run's directory.
    job: the job's name, for the log lines.
    training: whether the job trains the run (else it only reads it).
    log: takes the one-line notes (a changed resume, no record).
    write: whether this process writes config.json (process 0 only, in a
      multi-process run).

  Raises:
    errors.WorkdirError: the config differs from the run's where it matters,
      or config.json cannot be read, or cannot be written.
  """
  now = config_fields(config)
  saved = _read_record(os.path.join(workdir, CONFIG_FILE))
  if saved is None:
    _no_record(now, workdir, job, training, log, write)
    return
  # The vocabulary's entries are compared by check_vocabulary, and kept.
  vocabulary = {field: saved.pop(field) for field in VOCABULARY_FIELDS
                if field in saved}
  if training:
    _check_resume(saved, now, workdir, log, write, vocabulary)
  else:
    _check_reader(saved, now, workdir)


def check_vocabulary(vocab, workdir: str, job: str, training: bool,
                     log=print, write: bool = True) -> None:
  """Stops a job whose vocabulary gives the ids other meanings than the
  run's (the same size is not enough: another corpus trains other pieces).

  Training records the vocabulary at the run's first start (and in a run
  recorded before fingerprints); readers compare, and say in one line
  when the record has none.

  Args:
    vocab: the task's vocabulary (`fingerprint`, `vocab_size`, and
      `model_path` where it has a file).
    workdir, job, training, log, write: as in `check_config`.

  Raises:
    errors.WorkdirError: the fingerprints differ, or the record cannot be
      read or written.
  """
  path = os.path.join(workdir, CONFIG_FILE)
  saved = _read_record(path)
  source = getattr(vocab, 'model_path', None) or type(vocab).__name__
  now = {'vocabulary.fingerprint': vocab.fingerprint,
         'vocabulary.size': vocab.vocab_size, 'vocabulary.source': source}
  if saved is None:  # No record: `check_config` said what that means.
    return
  recorded = saved.get('vocabulary.fingerprint')
  if recorded is None:
    if training:
      if write and saved:
        _write_record(workdir, {**saved, **now})
    else:
      log(f'{path} records no vocabulary fingerprint, so {job} does not '
          'check that its ids mean what they meant in training.')
    return
  if recorded != now['vocabulary.fingerprint']:
    raise errors.WorkdirError(
        f'{workdir} was trained with another vocabulary: fingerprint '
        f'{recorded} ({saved.get("vocabulary.size")} ids, '
        f'{saved.get("vocabulary.source")}) vs {vocab.fingerprint} '
        f'({vocab.vocab_size} ids, {source}) now. Give the task the run\'s '
        f'vocabulary (task.vocab_path) and its data.')


def run_vocabulary(run: str) -> str:
  """The path of the vocabulary file a run was trained with: its own
  WORKDIR/vocab.model, or, for a run that read another run's (started with
  init_from), the file its record names. A config file that starts from
  `run` gives this as task.vocab_path, so a run started from a run started
  from a third reads the third's vocabulary. Where neither is there, the
  run's own path, whose absence the task's loader reports."""
  own = os.path.join(run, 'vocab.model')
  if os.path.isfile(own):
    return own
  try:
    source = (_read_record(os.path.join(run, CONFIG_FILE)) or {}).get(
        'vocabulary.source')
  except errors.WorkdirError:
    source = None  # Not this project's record: no run of ours.
  return source if isinstance(source, str) and os.path.isfile(source) else own


def check_warm_start_vocabulary(vocab, init_from: str) -> None:
  """Stops a warm start whose vocabulary is not that of the run it starts
  from (its weights would read the ids as other words).

  A folder without this project's record (a GPT-2 checkpoint, a run from
  before fingerprints) is not compared here: its importer checks sizes.

  Raises:
    errors.ConfigError: the fingerprints differ.
  """
  path = os.path.join(init_from, CONFIG_FILE)
  if not os.path.isfile(path):
    return
  try:
    saved = _read_record(path) or {}
  except errors.WorkdirError:
    return  # Not this project's record (another model's config.json).
  recorded = saved.get('vocabulary.fingerprint')
  if recorded is not None and recorded != vocab.fingerprint:
    raise errors.ConfigError(
        f'train.init_from={init_from} was trained with another vocabulary: '
        f'fingerprint {recorded} ({saved.get("vocabulary.size")} ids, '
        f'{saved.get("vocabulary.source")}) vs {vocab.fingerprint} '
        f'({vocab.vocab_size} ids) of this task: give the task that run\'s '
        f'vocabulary ({_vocabulary_source(init_from, saved)}).')


def _vocabulary_source(run: str, saved: dict) -> str:
  """How a config gives the task `run`'s vocabulary: its file (or model
  folder) as task.vocab_path, or, for one made from the task's data (a
  word list) or fixed by it, the run's task section."""
  own = run_vocabulary(run)
  if os.path.isfile(own):
    return f'task.vocab_path={own}'
  if saved.get('task.vocab_path'):  # E.g. a Hugging Face model folder.
    return f'task.vocab_path={saved["task.vocab_path"]}'
  return (f'its {saved.get("vocabulary.source")} follows from the task '
          f'section, task.* in {os.path.join(run, CONFIG_FILE)}')


def _no_record(now: dict, workdir: str, job: str, training: bool, log,
               write: bool):
  """A workdir without config.json: a first start records its config; a
  reader of checkpoints saved without one says it cannot compare (one
  without checkpoints reads no run: an imported base, `jobs.load`)."""
  checkpoints = os.path.isdir(os.path.join(workdir, 'checkpoints'))
  if not training:
    if checkpoints:
      log(f'{workdir} has no saved config ({CONFIG_FILE}), so {job} does '
          'not check its config against the run.')
    return
  if checkpoints:
    log(f'{workdir} holds checkpoints from before configs were saved: '
        f'{job} could not check its config against that run, and saves it '
        f'now as the run\'s {CONFIG_FILE}.')
  if write:
    _write_record(workdir, now)


def _check_resume(saved: dict, now: dict, workdir: str, log, write: bool,
                  vocabulary: dict):
  """A training rerun: refuses a changed checkpoint field, records others
  (with the record's `vocabulary` entries)."""
  differences = _differences(saved, now)
  refused = [d for d in differences if not may_change_on_resume(d[0])]
  if refused:
    raise errors.WorkdirError(
        f'{workdir} was trained with another config: '
        f'{_show_refused(refused)}. Use another --workdir, or start a new '
        "run from this one's weights with "
        f'--config.train.init_from={workdir}.')
  if differences:
    log(f'resuming with changed {_show_changed(differences)}')
    if write:
      _write_record(workdir, {**now, **vocabulary})


def _check_reader(saved: dict, now: dict, workdir: str):
  """A job that reads the run: refuses another architecture or vocabulary."""
  refused = [d for d in _differences(saved, now) if readers_compare(d[0])]
  if saved.get('model.num_encoder_layers') == 0:
    # A decoder-only model's prompt width sizes no weight (its prompt
    # positions are the decoder's): a reader may decode longer prompts.
    refused = [d for d in refused if d[0] != 'model.max_source_len']
  if refused:
    raise errors.WorkdirError(
        f'{workdir} holds a run of another model: {_show_refused(refused)}. '
        'Pass the config it was trained with (its fields are in '
        f'{os.path.join(workdir, CONFIG_FILE)}).')
