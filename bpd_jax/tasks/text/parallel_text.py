"""The 'parallel_text' task: aligned plain-text files, one sentence a line.

Files `{data_dir}/{stem}.{lang}`, aligned by line number, e.g. Multi30k's
train.en / train.de, or a distilled corpus written by `bpd_jax.distill`.
The task section's fields, besides name, max_source_len and max_target_len:
  data_dir: the directory of the files.
  source_lang, target_lang: the file suffixes ('en', 'de').
  splits: {split: file stem}, must include 'train' (the vocabulary is built
    from it).
  train_limit: read at most this many training pairs (0: all).
  vocab_type: 'sentencepiece' (trained on the training text, saved in the
    workdir and reused on resume) or 'words'.
  vocab_size, vocab_sample, vocab_path: of a SentencePiece vocabulary
    (vocab_sample: train it on that many seeded pairs, 0: all; vocab_path:
    an existing model, e.g. the run's that wrote a distilled corpus).
"""

import os
import random

from bpd_jax.tasks import spec
from bpd_jax.tasks.checks import at_least, needs_train_split
from bpd_jax.tasks.text import task as task_lib
from bpd_jax.tasks.text import vocab as vocab_lib


def read_lines(path: str) -> list[str]:
  """The lines of a UTF-8 text file, split at '\n' (and '\r\n') only.

  str.splitlines() also breaks at U+2028, U+0085, form feeds and other
  separators that can sit inside a sentence: one such character in one file
  of a pair shifts every later line against the other file. A byte-order
  mark at the start is dropped; a final newline ends the last line.

  Raises:
    ValueError: a byte sequence is not UTF-8 (naming the file and line).
  """
  with open(path, 'rb') as f:
    data = f.read()
  try:
    text = data.decode('utf-8-sig')
  except UnicodeDecodeError as error:
    line = data[:error.start].count(b'\n') + 1
    raise ValueError(f'line {line} of {path}: byte {data[error.start]:#04x} '
                     f'is not UTF-8 ({error.reason}).') from None
  lines = text.split('\n')
  if lines and not lines[-1]:
    lines.pop()  # The final newline.
  return [line[:-1] if line.endswith('\r') else line for line in lines]


def read_parallel(source_path: str, target_path: str,
                  limit: int | None = None) -> list[tuple[str, str]]:
  """(source, target) sentence pairs from two aligned files.

  Args:
    source_path: one source sentence a line (UTF-8).
    target_path: the target sentences, line by line.
    limit: read at most this many pairs (None: all).

  Raises:
    FileNotFoundError: a file is missing.
    ValueError: a file is empty or not UTF-8, the files differ in line
      count, or a line is empty (each naming the file, and the line).
  """
  for path in (source_path, target_path):
    if not os.path.isfile(path):
      raise FileNotFoundError(f'parallel corpus file {path} not found.')
  sources, targets = read_lines(source_path), read_lines(target_path)
  for path, lines in ((source_path, sources), (target_path, targets)):
    if not lines:
      raise ValueError(f'{path} has no lines: a split needs sentences.')
  if len(sources) != len(targets):
    raise ValueError(f'{source_path} has {len(sources)} lines but '
                     f'{target_path} has {len(targets)}.')
  pairs = [(s.strip(), t.strip()) for s, t in zip(sources, targets)]
  for i, (source, target) in enumerate(pairs):
    if not source or not target:
      raise ValueError(f'line {i + 1} of '
                       f'{source_path if not source else target_path} is '
                       f'empty.')
  return pairs[:limit] if limit is not None else pairs


def _check_section(task) -> None:
  if task.vocab_type not in vocab_lib.VOCAB_TYPES:
    raise ValueError(f'task.vocab_type={task.vocab_type!r} is not one of '
                     f'{vocab_lib.VOCAB_TYPES}.')
  needs_train_split(task, 'the vocabulary is built from it')
  # A negative limit would cut pairs off the end ([:-1]); 0 reads all.
  at_least(task, 'task', train_limit=0)
  if task.vocab_type == 'sentencepiece':
    at_least(task, 'task', vocab_size=8)
  if 'vocab_sample' in task:
    at_least(task, 'task', vocab_sample=0)


def _load(config, workdir: str,
          train_vocab: bool = True) -> task_lib.TextTask:
  _check_section(config)
  splits = {}
  for split, stem in config.splits.items():
    path = lambda lang: os.path.join(config.data_dir, f'{stem}.{lang}')
    limit = config.train_limit if split == 'train' else None
    splits[split] = read_parallel(path(config.source_lang),
                                  path(config.target_lang),
                                  limit=limit or None)
  if config.vocab_type == 'words':
    words = sorted({w for pair in splits['train'] for sentence in pair
                    for w in sentence.split()})
    return task_lib.TextTask(vocab_lib.WordVocabulary(words), splits)

  def sample():
    pairs = splits['train']
    if config.get('vocab_sample') and config.vocab_sample < len(pairs):
      # A seeded sample: SentencePiece needs no millions of sentences.
      pairs = random.Random(0).sample(pairs, config.vocab_sample)
    return [sentence for pair in pairs for sentence in pair]

  vocab = vocab_lib.sentencepiece_vocab(config, workdir, train_vocab, sample)
  return task_lib.TextTask(vocab, splits)


SPEC = spec.TaskSpec(name='parallel_text', kind='text', load=_load,
                     check=lambda config: _check_section(config.task))
