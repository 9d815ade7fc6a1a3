"""Plain-text parallel corpora, and the 'parallel_text' task."""

import ml_collections
import pytest

from bpd_jax import tasks
from bpd_jax.tasks.text import parallel_text
from bpd_jax.tasks.text import vocab as vocab_lib


def write(path, lines):
  path.write_text(''.join(line + '\n' for line in lines), encoding='utf-8')
  return str(path)


def test_reads_aligned_pairs(tmp_path):
  src = write(tmp_path / 'a.en', ['a dog .', ' a cat . '])
  tgt = write(tmp_path / 'a.de', ['ein hund .', 'eine katze .'])
  assert parallel_text.read_parallel(src, tgt) == [('a dog .', 'ein hund .'),
                                          ('a cat .', 'eine katze .')]
  assert parallel_text.read_parallel(src, tgt, limit=1) == [('a dog .', 'ein hund .')]


def test_missing_file_line_counts_and_empty_lines(tmp_path):
  src = write(tmp_path / 'a.en', ['a dog .', 'a cat .'])
  with pytest.raises(FileNotFoundError, match='b.de not found'):
    parallel_text.read_parallel(src, str(tmp_path / 'b.de'))
  short = write(tmp_path / 'c.de', ['ein hund .'])
  with pytest.raises(ValueError, match='has 2 lines but .* has 1'):
    parallel_text.read_parallel(src, short)
  blank = write(tmp_path / 'd.de', ['ein hund .', ''])
  with pytest.raises(ValueError, match='line 2 of .*d.de is empty'):
    parallel_text.read_parallel(src, blank)


@pytest.mark.parametrize('separator', [
    '\u2028', '\u2029', '\x85', '\x0b', '\x0c', '\x1c', '\x1d', '\x1e'])
def test_lines_break_at_newlines_only(tmp_path, separator):
  # str.splitlines() breaks at each of these: one of them inside a sentence
  # of one file shifted every later pair out of line.
  src = write(tmp_path / 'a.en', [f'a{separator}dog .', 'a cat .'])
  tgt = write(tmp_path / 'a.de', ['ein hund .', 'eine katze .'])
  pairs = parallel_text.read_parallel(src, tgt)
  assert pairs == [(f'a{separator}dog .', 'ein hund .'),
                   ('a cat .', 'eine katze .')]


def test_windows_line_ends_a_byte_order_mark_and_no_final_newline(tmp_path):
  src = tmp_path / 'a.en'
  src.write_bytes('\ufeffa dog .\r\na cat .'.encode('utf-8'))
  assert parallel_text.read_lines(str(src)) == ['a dog .', 'a cat .']


def test_undecodable_bytes_and_empty_files_name_the_file(tmp_path):
  src = write(tmp_path / 'a.en', ['a dog .', 'a cat .'])
  bad = tmp_path / 'b.de'
  bad.write_bytes(b'ein hund .\neine \xff katze .\n')
  with pytest.raises(ValueError, match=r'line 2 of .*b.de: byte 0xff is not '
                     r'UTF-8'):
    parallel_text.read_parallel(src, str(bad))
  empty = write(tmp_path / 'c.de', [])
  with pytest.raises(ValueError, match=r'c.de has no lines'):
    parallel_text.read_parallel(src, empty)


def parallel_config(tmp_path, **overrides):
  for split in ('train', 'val'):
    (tmp_path / f'{split}.en').write_text(
        ''.join(f'a dog number {i} .\n' for i in range(40)))
    (tmp_path / f'{split}.de').write_text(
        ''.join(f'ein hund nummer {i} .\n' for i in range(40)))
  return ml_collections.ConfigDict({**dict(
      name='parallel_text', data_dir=str(tmp_path), source_lang='en',
      target_lang='de', splits=dict(train='train', validation='val'),
      train_limit=0, vocab_type='sentencepiece', vocab_size=40), **overrides})


def test_parallel_text_with_sentencepiece_saved_in_workdir(tmp_path):
  workdir = tmp_path / 'work'
  task = tasks.load_task(parallel_config(tmp_path), str(workdir))
  assert (workdir / 'vocab.model').exists()
  assert len(task.pairs('validation')) == 40
  source, _ = task.encoded('train')[3]
  assert task.vocab.decode(source) == 'a dog number 3 .'
  # Reused on resume, not retrained.
  mtime = (workdir / 'vocab.model').stat().st_mtime_ns
  tasks.load_task(parallel_config(tmp_path), str(workdir))
  assert (workdir / 'vocab.model').stat().st_mtime_ns == mtime


def test_parallel_text_with_words_and_limit(tmp_path):
  task = tasks.load_task(parallel_config(tmp_path, vocab_type='words',
                                         train_limit=10), str(tmp_path))
  assert len(task.pairs('train')) == 10
  assert isinstance(task.vocab, vocab_lib.WordVocabulary)


@pytest.mark.parametrize('overrides,message', [
    (dict(name='wmt'), "task.name='wmt' is not one of"),
    (dict(vocab_type='bpe'), "task.vocab_type='bpe' is not one of"),
    (dict(splits=dict(validation='val')), 'needs a "train" entry'),
    (dict(data_dir='/nonexistent'), 'train.en not found'),
    (dict(train_limit=-1), 'task.train_limit=-1 must be an integer >= 0'),
    (dict(train_limit=True), 'task.train_limit=True must be an integer'),
    (dict(vocab_size=4), 'task.vocab_size=4 must be an integer >= 8'),
    (dict(vocab_sample=-1), 'task.vocab_sample=-1 must be an integer >= 0'),
])
def test_task_section_errors(tmp_path, overrides, message):
  with pytest.raises((ValueError, FileNotFoundError), match=message):
    tasks.load_task(parallel_config(tmp_path, **overrides), str(tmp_path))


def test_parallel_text_vocab_sample_shards_and_missing_vocabulary(tmp_path):
  config = parallel_config(tmp_path, vocab_sample=10)
  with pytest.raises(FileNotFoundError, match='vocab.model not found'):
    tasks.load_task(config, str(tmp_path / 'work'), train_vocab=False)
  task = tasks.load_task(config, str(tmp_path / 'work'))
  shards = [task.train_examples(p, 3) for p in range(3)]
  assert [len(s) for s in shards] == [14, 13, 13]
  encoded = task.encoded('train')
  assert [list(x) for x in shards[1][2]] == [list(x) for x in encoded[7]]
  # Another run reuses this vocabulary through task.vocab_path.
  other = tasks.load_task(parallel_config(
      tmp_path, vocab_path=str(tmp_path / 'work' / 'vocab.model')),
      str(tmp_path / 'other'))
  assert other.vocab.vocab_size == task.vocab.vocab_size
  assert not (tmp_path / 'other').exists()
