"""The 'text_files' task: a language model on a folder of text or code.

The text a user has at hand (a repository, notes, documentation) as plain
language modelling: every file under task.root whose name ends with one of
task.extensions ('.py', '.md', ...; none: every text file), or the one
file task.root names, is read as UTF-8, ended with eos, and cut into
examples of max_target_len tokens, files in path order. One example in
`task_lib.HOLD_OUT_EVERY` (the first, where there are fewer) is held out
for evaluation ('validation'), so that a folder of a single file has both
splits. Hidden files and folders ('.git') and Python's caches and
installed packages are left out; without extensions, a file that is not
UTF-8 text (a NUL byte, or bytes UTF-8 does not decode) is skipped (one
log line counts them and names the first), while a file of a named
extension, or the one file task.root names, must be text.

Training examples have no prompt (plain language modelling); evaluation
gives the first max_source_len tokens of each held-out example as the
prompt and the model continues it (tasks/lm/task.py). Every file is read
when the task is loaded, so a bad one stops the job before training.

The task section's fields, besides name:
  max_source_len: tokens of an evaluation prompt.
  max_target_len: tokens of an example (the training sequence length).
  root: the folder (or one file) to read.
  extensions: file name endings to read, e.g. ('.py',) or ('.md', '.txt');
    (): every text file.
  vocab_type, vocab_path: 'hf' and a Hugging Face model folder (its
    tokenizer and ids: configs/hf_heads.py), or 'sentencepiece' (the
    default) and an existing model or '' (trained on the training text on
    the first run, vocab_size pieces, vocab_lines sampled lines: 0 all).
  distilled: '' (the default) or a directory `python -m bpd_jax.distill`
    wrote: the training split is then the model's own continuations of the
    training prompts (self-distillation); validation stays the text.
"""

import functools
import os
import pathlib
import random

from absl import logging

from bpd_jax.tasks import spec
from bpd_jax.tasks.checks import at_least
from bpd_jax.tasks.lm import python_source
from bpd_jax.tasks.lm import task as task_lib
from bpd_jax.tasks.text import task as text_task

SPLITS = ('train', 'validation')
# Folders never read: version control and tool state (hidden), Python's
# caches and installed packages.
_EXCLUDED_DIRS = frozenset({'__pycache__', 'site-packages', 'dist-packages',
                            'node_modules'})


def text_files(root: str, extensions: tuple[str, ...]) -> list[str]:
  """Sorted paths (relative to root; '' for root itself when it is a file)
  of the files to read.

  Raises:
    FileNotFoundError: root is missing, or holds no file of `extensions`.
  """
  if os.path.isfile(root):
    return ['']
  if not os.path.isdir(root):
    raise FileNotFoundError(f'task.root={root!r} is not a folder or a file.')
  found = []
  for path in sorted(pathlib.Path(root).rglob('*')):
    relative = path.relative_to(root)
    if (not path.is_file() or any(
        part.startswith('.') or part in _EXCLUDED_DIRS
        for part in relative.parts)):
      continue
    if not extensions or relative.name.endswith(tuple(extensions)):
      found.append(relative.as_posix())
  if not found:
    which = (f' whose name ends with one of {tuple(extensions)}'
             if extensions else '')
    raise FileNotFoundError(f'no file{which} under task.root={root!r}.')
  return found


def read_text(path: str, required: bool) -> str | None:
  """The UTF-8 text of a file (a byte-order mark dropped); None for a file
  that is not text, unless `required`.

  Raises:
    ValueError: a required file is not UTF-8 text, or cannot be read.
  """
  try:
    with open(path, 'rb') as f:
      data = f.read()
  except OSError as error:  # E.g. a link to nothing.
    raise ValueError(f'{path} cannot be read: {error.strerror}.') from None
  try:
    if b'\0' in data:
      raise UnicodeError('it holds a NUL byte')
    return data.decode('utf-8-sig')
  except UnicodeError as error:
    if not required:
      return None
    why = (f'byte {error.object[error.start]:#04x} is not UTF-8'
           if isinstance(error, UnicodeDecodeError) else str(error))
    raise ValueError(f'{path} is not UTF-8 text: {why}.') from None


def _check(config) -> None:
  task = config.task
  at_least(task, 'task', vocab_size=8, vocab_lines=0)
  if not isinstance(task.root, str) or not task.root:
    raise ValueError(f'task.root={task.root!r} must name the folder (or '
                     f'file) of text to read.')
  extensions = task.extensions
  if isinstance(extensions, str) or not all(
      isinstance(e, str) and e for e in extensions):
    raise ValueError(f'task.extensions={extensions!r} must be a tuple of '
                     f'file name endings, e.g. (".py",); () reads every text '
                     f'file.')
  task_lib.check_config(config, SPLITS,
                        train_prompts=bool(task.distilled),
                        continued=True)


def _load(config, workdir: str, train_vocab: bool = True) -> task_lib.LMTask:
  extensions = tuple(config.extensions)
  files = text_files(config.root, extensions)
  texts, skipped = {}, []
  for relative in files:  # Every file read now: a bad one stops the job.
    # '' is root itself, a file: joined with '', it would read as a folder.
    path = os.path.join(config.root, relative) if relative else config.root
    text = read_text(path, required=bool(extensions) or not relative)
    if text is None:
      skipped.append(relative)
    else:
      texts[relative] = text
  if skipped:
    logging.info('Skipped %d file(s) under task.root=%r that are not UTF-8 '
                 'text (the first: %s); task.extensions names the endings '
                 'to read.', len(skipped), config.root, skipped[0])
  if not any(text.strip() for text in texts.values()):
    raise ValueError(f'task.root={config.root!r} has no text to learn: its '
                     f'{len(files)} file(s) are empty or not text.')

  def vocab_text():
    lines = [line for text in texts.values() for line in text.split('\n')
             if line.strip()]
    if config.vocab_lines and len(lines) > config.vocab_lines:
      lines = random.Random(0).sample(lines, config.vocab_lines)
    return lines

  vocab = task_lib.lm_vocab(config, workdir, train_vocab, vocab_text,
                            **python_source.CODE_VOCAB_OPTIONS)

  @functools.cache
  def splits():
    documents = (ids + [vocab.eos_id]
                 for ids in vocab.encode_many(list(texts.values())))
    return task_lib.hold_out(task_lib.chunked(documents,
                                              config.max_target_len))

  _check_examples(config, splits(), vocab.eos_id)
  readers = {split: lambda split=split: splits()[split] for split in SPLITS}
  if config.distilled:  # The model's own continuations.
    readers['train'] = lambda: task_lib.read_distilled(config.distilled,
                                                       vocab)
  return task_lib.LMTask(
      vocab, text_task.LazySplits(readers),
      eval_prompt_len=config.max_source_len,
      train_prompt_len=config.max_source_len if config.distilled else 0)


def _check_examples(config, splits, eos_id: int) -> None:
  """Raises ValueError unless training has an example and evaluation a
  prompt with a token after it (checked before any training)."""
  count = len(splits['train']) + len(splits['validation'])
  if not len(splits['train']):
    raise ValueError(
        f'task.root={config.root!r} gives {count} example(s) of '
        f'max_target_len={config.max_target_len} tokens: too few to train on '
        f'one and evaluate another; give more text.')
  if not task_lib.has_eval_example(
      (splits['validation'][i] for i in range(len(splits['validation']))),
      config.max_source_len, eos_id=eos_id):
    raise ValueError(
        f'task.root={config.root!r}: no held-out example is longer than '
        f'task.max_source_len={config.max_source_len} tokens (the '
        f'evaluation prompt): evaluation needs a token after the prompt.')


SPEC = spec.TaskSpec(name='text_files', kind='lm', load=_load, check=_check,
                     defaults=task_lib.DISTILLED_DEFAULTS)
