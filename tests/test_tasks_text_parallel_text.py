"""Plain-text parallel corpora."""

import pytest

from bpd_jax.tasks.text import parallel_text


def write(path, lines):
  path.write_text(''.join(line + '\n' for line in lines), encoding='utf-8')
  return str(path)


def test_reads_aligned_pairs(tmp_path):
  src = write(tmp_path / 'a.en', ['a dog .', ' a cat . '])
  tgt = write(tmp_path / 'a.de', ['ein hund .', 'eine katze .'])
  assert parallel_text.read_parallel(src, tgt) == [('a dog .', 'ein hund .'),
                                          ('a cat .', 'eine katze .')]
  assert parallel_text.read_parallel(src, tgt, limit=1) == [('a dog .', 'ein hund .')]


def test_errors(tmp_path):
  src = write(tmp_path / 'a.en', ['a dog .', 'a cat .'])
  with pytest.raises(FileNotFoundError, match='b.de not found'):
    parallel_text.read_parallel(src, str(tmp_path / 'b.de'))
  short = write(tmp_path / 'c.de', ['ein hund .'])
  with pytest.raises(ValueError, match='has 2 lines but .* has 1'):
    parallel_text.read_parallel(src, short)
  blank = write(tmp_path / 'd.de', ['ein hund .', ''])
  with pytest.raises(ValueError, match='line 2 of .*d.de is empty'):
    parallel_text.read_parallel(src, blank)
