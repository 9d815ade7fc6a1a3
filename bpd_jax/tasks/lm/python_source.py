"""The 'python_source' task: a code language model on Python's own library.

Every machine with Python has a corpus of real code that nobody here wrote:
the standard library's source (`sysconfig.get_paths()['stdlib']`: several
hundred `*.py` files, around ten megabytes, once tests and site-packages
are left out). Each file belongs to one split by a checksum of its path
relative to the root (crc32 % 100: 0-89 train, 90-94 validation, 95-99
test), so the splits are the same on every machine and patch version and no
file is in two. A file is read as Python reads it (`tokenize.open`: its
coding cookie), encoded with a SentencePiece model trained on the training
files that keeps code's whitespace (indentation is a piece, a newline its
own piece, unseen characters byte pieces: decoding gives the text back
exactly), ended with eos, and cut into examples of max_target_len tokens.

Training examples have no prompt (plain language modelling); evaluation
gives the first max_source_len tokens of each held-out example as the
prompt and the model continues it (tasks/lm/task.py).

Every file is read when the task is loaded, and every split checked: it
has a file, its files are text, and the training files hold code and a
held-out split something to evaluate (a file longer than the prompt). A
split that fails stops the job in one line before the first training step,
not after training (the files are read once, at load, where training read
them a moment later).

The task section's fields, besides name:
  max_source_len: tokens of an evaluation prompt.
  max_target_len: tokens of an example (the training sequence length).
  root: a directory of Python source ('': the standard library's).
  train_files: read the first N training files by path (0: all).
  vocab_type: 'sentencepiece' (default) or 'hf' (the tokenizer of the
    Hugging Face model folder vocab_path, with its ids; tasks/lm/task.py
    `lm_vocab`).
  vocab_size, vocab_path: the SentencePiece model: trained on the training
    files on the first run (WORKDIR/vocab.model) or an existing one.
  vocab_lines: lines of training code the vocabulary is trained on, a
    seeded sample (0: all).
  distilled: '' (the default) or a directory `python -m bpd_jax.distill`
    wrote: the training split is then the model's own continuations of the
    training prompts (sequence-level distillation); the other splits stay
    the code.
"""

import os
import pathlib
import random
import sysconfig
import tokenize
import zlib

from bpd_jax.tasks import spec
from bpd_jax.tasks.checks import at_least
from bpd_jax.tasks.lm import task as task_lib
from bpd_jax.tasks.text import task as text_task

SPLITS = ('train', 'validation', 'test')
# crc32(relative path) % 100 -> split.
_BUCKETS = {'train': range(0, 90), 'validation': range(90, 95),
            'test': range(95, 100)}
# Directories left out: tests (much of them generated data and fixtures)
# and installed third-party packages.
_EXCLUDED_DIRS = frozenset({'test', 'tests', 'idle_test', 'site-packages',
                            'dist-packages', '__pycache__'})
# SentencePiece for code: no normalisation (NFKC would rewrite strings),
# runs of spaces kept and made into pieces (indentation), pieces that span
# words ("return self"), '\n' a piece of its own, no space added in front
# of the text, and byte pieces for characters the training text lacks.
CODE_VOCAB_OPTIONS = dict(
    normalization_rule_name='identity', remove_extra_whitespaces=False,
    split_by_whitespace=False, allow_whitespace_only_pieces=True,
    user_defined_symbols=['\n'], add_dummy_prefix=False, byte_fallback=True)


def stdlib_root() -> str:
  return sysconfig.get_paths()['stdlib']


def split_of(relative_path: str) -> str:
  """The split of a file, by its '/'-separated path under the root."""
  bucket = zlib.crc32(relative_path.encode()) % 100
  return next(s for s, buckets in _BUCKETS.items() if bucket in buckets)


def source_files(root: str) -> dict[str, list[str]]:
  """{split: sorted relative paths} of the *.py files under root, tests and
  site-packages left out.

  Raises:
    FileNotFoundError: root is not a directory, or holds no Python file.
  """
  if not os.path.isdir(root):
    raise FileNotFoundError(f'task.root={root!r} is not a directory.')
  files = {split: [] for split in SPLITS}
  for path in sorted(pathlib.Path(root).rglob('*.py')):
    if path.is_dir():  # A directory named like a module (its files count).
      continue
    relative = path.relative_to(root)
    parts = relative.parts[:-1]
    if any(p in _EXCLUDED_DIRS or p.startswith('test_') for p in parts):
      continue
    if relative.name.startswith('test_'):
      continue
    files[split_of(relative.as_posix())].append(relative.as_posix())
  if not any(files.values()):
    raise FileNotFoundError(f'no Python file under task.root={root!r}.')
  return files


def read_source(path: str) -> str:
  """A Python file's text, decoded as Python decodes it.

  Raises:
    ValueError: it is not text in its declared encoding (naming the file).
  """
  try:
    with tokenize.open(path) as f:
      return f.read()
  except SyntaxError as error:  # Its first lines: no encoding found.
    why = error.msg.replace(f' for {path!r}', '')  # The path comes first.
    raise ValueError(f'{path} is not Python source text: {why} (a file is '
                     f'UTF-8 unless a coding comment names another encoding).'
                     ) from None
  except UnicodeDecodeError as error:
    raise ValueError(f'{path} is not Python source text: byte '
                     f'{error.object[error.start]:#04x} is not '
                     f'{error.encoding} ({error.reason}).') from None
  except OSError as error:  # E.g. a link to nothing.
    raise ValueError(f'{path} cannot be read: {error.strerror}.') from None


def _names(files: list[str], shown: int = 3) -> str:
  """The first few of a split's files, for a message."""
  return ', '.join(files[:shown]) + (', ...' if len(files) > shown else '')


def check_files(root: str, files: dict[str, list[str]],
                texts: dict[str, list[str]], max_source_len: int) -> None:
  """Raises ValueError (naming the split, the root and why) unless every
  split has a file, the training files hold code, and a held-out file may
  be longer than an evaluation prompt.

  Evaluation reads validation or test after training, and distillation
  copies both: a split without a file would stop the job only then. The
  vocabulary and the training examples come from the training files. This
  runs before the vocabulary is trained (a minute on the standard
  library); `check_evaluation` counts the tokens once it is.

  Args:
    root: task.root.
    files: {split: relative paths}, as `source_files` gives them.
    texts: {split: each file's text}.
    max_source_len: tokens of an evaluation prompt.
  """
  for split in SPLITS:
    if not files[split]:
      ranges = ', '.join(f'{s} {buckets[0]}-{buckets[-1]}'
                         for s, buckets in _BUCKETS.items())
      counts = ', '.join(f'{len(files[s])} in {s}' for s in SPLITS)
      raise ValueError(
          f'split {split!r} has no file under task.root={root!r}: a file\'s '
          f'split is crc32(its path) % 100 ({ranges}), and its Python files '
          f'fall {counts}; add files there, or use another root.')
  if not any(text.strip() for text in texts['train']):
    raise ValueError(
        f"split 'train' has no code under task.root={root!r}: its "
        f"{len(files['train'])} file(s) ({_names(files['train'])}) are "
        f'empty; the vocabulary and the training examples come from them.')
  for split in SPLITS[1:]:
    # A token covers a byte or more (but one: the leading space some
    # vocabularies add), so a shorter file cannot fill a prompt and more.
    if not any(len(text.encode()) >= max_source_len - 1
               for text in texts[split]):
      raise _nothing_to_evaluate(split, root, files[split], max_source_len)


def _check(config) -> None:
  task = config.task
  at_least(task, 'task', vocab_size=512, train_files=0, vocab_lines=0)
  task_lib.check_config(config, SPLITS,
                        train_prompts=bool(task.distilled),
                        continued=True)


def _load(config, workdir: str, train_vocab: bool = True) -> task_lib.LMTask:
  root = config.root or stdlib_root()
  files = source_files(root)
  if config.train_files:
    files['train'] = files['train'][:config.train_files]
  # Every file is read now, so a bad one stops the job before training.
  texts = {split: [read_source(os.path.join(root, f)) for f in files[split]]
           for split in SPLITS}
  check_files(root, files, texts, config.max_source_len)

  def vocab_text():
    lines = [line for text in texts['train'] for line in text.split('\n')
             if line.strip()]
    if config.vocab_lines and len(lines) > config.vocab_lines:
      lines = random.Random(0).sample(lines, config.vocab_lines)
    return lines

  vocab = task_lib.lm_vocab(config, workdir, train_vocab, vocab_text,
                            **CODE_VOCAB_OPTIONS)

  def examples(split):
    def reader():
      documents = (ids + [vocab.eos_id]
                   for ids in vocab.encode_many(texts[split]))
      return task_lib.chunked(documents, config.max_target_len)
    return reader

  readers = {split: examples(split) for split in SPLITS}
  distilled = config.distilled
  if distilled:  # The model's own continuations of the training prompts.
    readers['train'] = lambda: task_lib.read_distilled(distilled, vocab)
  for split in SPLITS[1:]:
    check_evaluation(split, root, files[split], texts[split], vocab,
                     config.max_source_len, config.max_target_len)
  return task_lib.LMTask(
      vocab, text_task.LazySplits(readers),
      eval_prompt_len=config.max_source_len,
      train_prompt_len=config.max_source_len if distilled else 0)


def check_evaluation(split: str, root: str, files: list[str],
                     texts: list[str], vocab, max_source_len: int,
                     max_target_len: int) -> None:
  """Raises ValueError unless a held-out file gives evaluation a prompt
  (its first max_source_len tokens) and a token after it.

  Files are encoded one at a time until one does (the first, as a rule):
  the check costs milliseconds, and the split is still read in full only
  when a job uses it.
  """
  examples = (example for text in texts for example in task_lib.chunked(
      [vocab.encode(text) + [vocab.eos_id]], max_target_len))
  if not task_lib.has_eval_example(examples, max_source_len,
                                   eos_id=vocab.eos_id):
    raise _nothing_to_evaluate(split, root, files, max_source_len)


def _nothing_to_evaluate(split: str, root: str, files: list[str],
                         max_source_len: int) -> ValueError:
  return ValueError(
      f'split {split!r} has nothing to evaluate: none of its {len(files)} '
      f'file(s) under task.root={root!r} ({_names(files)}) is longer than '
      f'task.max_source_len={max_source_len} tokens with its eos (the '
      f'evaluation prompt): evaluation needs a token after the prompt.')


SPEC = spec.TaskSpec(name='python_source', kind='lm', load=_load,
                     check=_check, defaults=task_lib.DISTILLED_DEFAULTS)
