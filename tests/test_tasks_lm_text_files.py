"""The 'text_files' LM task: which files, read how, split how, checked
when loaded; with the tiny GPT-2's tokenizer (a Hugging Face folder's ids,
as configs/hf_heads.py gives it)."""

import os

import ml_collections
import pytest

from bpd_jax import tasks
from bpd_jax.infra import errors
from bpd_jax.tasks.lm import task as task_lib
from bpd_jax.tasks.lm import text_files

TINY_GPT2 = os.path.join(os.path.dirname(__file__), 'data', 'tiny_gpt2')
TEXT = 'Blockwise decoding checks every proposal in one call.\n' * 30


def write(root, relative, data):
  path = os.path.join(root, relative)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'wb') as f:
    f.write(data if isinstance(data, bytes) else data.encode())


def task_config(root, **fields):
  return ml_collections.ConfigDict(dict(dict(
      name='text_files', root=str(root), extensions=(), vocab_type='hf',
      vocab_path=TINY_GPT2, vocab_size=1024, vocab_lines=0, distilled='',
      max_source_len=4, max_target_len=16), **fields))


def test_which_files_are_read(tmp_path):
  for relative in ('a.py', 'notes/b.md', 'notes/c.txt', '.git/config',
                   '.hidden.py', 'pkg/__pycache__/d.py', 'node_modules/e.md',
                   'site-packages/f.py'):
    write(tmp_path, relative, 'x\n')
  root = str(tmp_path)
  assert text_files.text_files(root, ()) == ['a.py', 'notes/b.md',
                                             'notes/c.txt']
  assert text_files.text_files(root, ('.md', '.py')) == ['a.py', 'notes/b.md']
  assert text_files.text_files(str(tmp_path / 'a.py'), ('.md',)) == ['']
  with pytest.raises(FileNotFoundError, match=r"no file whose name ends "
                     r"with one of \('.rst',\) under task.root="):
    text_files.text_files(root, ('.rst',))
  with pytest.raises(FileNotFoundError, match='is not a folder or a file'):
    text_files.text_files(str(tmp_path / 'none'), ())


def test_a_file_that_is_not_text_is_skipped_unless_its_extension_is_asked(
    tmp_path):
  write(tmp_path, 'a.md', '\ufeffcafé\n')
  write(tmp_path, 'b.png', b'\x89PNG\r\n\x1a\n\x00')
  write(tmp_path, 'c.md', b'z = "\xff"\n')
  assert text_files.read_text(str(tmp_path / 'a.md'), True) == 'café\n'
  assert text_files.read_text(str(tmp_path / 'b.png'), False) is None
  with pytest.raises(ValueError, match=r'c.md is not UTF-8 text: byte 0xff '
                     r'is not UTF-8'):
    text_files.read_text(str(tmp_path / 'c.md'), True)
  with pytest.raises(ValueError, match=r'b.png is not UTF-8 text: it holds '
                     r'a NUL byte'):
    text_files.read_text(str(tmp_path / 'b.png'), True)


def test_a_folder_logs_the_files_it_skips(tmp_path, caplog):
  write(tmp_path, 'a.md', TEXT)
  write(tmp_path, 'b.png', b'\x89PNG\r\n\x1a\n\x00')
  write(tmp_path, 'c/d.bin', b'\xff\xfe')
  with caplog.at_level('INFO'):
    tasks.load_task(task_config(tmp_path), str(tmp_path / 'run'))
  assert [r.getMessage() for r in caplog.records if 'Skipped' in
          r.getMessage()] == [
              f"Skipped 2 file(s) under task.root='{tmp_path}' that are not "
              f'UTF-8 text (the first: b.png); task.extensions names the '
              f'endings to read.']


def test_one_file_as_task_root_is_read(tmp_path):
  """task.root may name one file (configs/hf_heads.py:data=FILE): read
  whole, of any name, and it must be text."""
  write(tmp_path, 'one.txt', TEXT)
  folder = tasks.load_task(task_config(tmp_path), str(tmp_path / 'run'))
  one = tasks.load_task(task_config(tmp_path / 'one.txt', extensions=('.md',)),
                        str(tmp_path / 'run'))
  assert ([list(c) for _, c in one.encoded('train')]
          == [list(c) for _, c in folder.encoded('train')])
  write(tmp_path, 'b.png', b'\x89PNG\r\n\x1a\n\x00')
  with pytest.raises(errors.DataError, match=r'b.png is not UTF-8 text: it '
                     r'holds a NUL byte\.$'):
    tasks.load_task(task_config(tmp_path / 'b.png'), str(tmp_path / 'run'))


def test_examples_are_eos_ended_chunks_one_in_20_held_out(tmp_path):
  write(tmp_path, 'a.md', TEXT)
  write(tmp_path, 'b.png', b'\x00\x01')  # Not text: skipped.
  task = tasks.load_task(task_config(tmp_path), str(tmp_path / 'run'))
  vocab = task.vocab
  ids = vocab.encode(TEXT) + [vocab.eos_id]
  chunks = [ids[i:i + 16] for i in range(0, len(ids), 16)]
  chunks = [c for c in chunks if len(c) >= 2]
  assert len(chunks) >= 21  # So that two are held out.
  validation = [list(c) for _, c in task.encoded('validation')]
  train = [list(c) for _, c in task.encoded('train')]
  assert validation == chunks[19::20]
  assert train == [c for i, c in enumerate(chunks) if i % 20 != 19]
  prompt, reference = task.eval_ids('validation')[0]
  assert list(prompt) == chunks[19][:4] and len(reference) == 12
  assert task.sources('validation', 5)[0][0][0] == vocab.bos_id == 383


def test_hold_out_keeps_the_first_of_fewer_than_20():
  examples = [([], [i + 4, 5]) for i in range(3)]
  splits = task_lib.hold_out(task_lib.batching.EncodedPairs.from_pairs(
      examples))
  assert [int(c[0]) for _, c in splits['train']] == [5, 6]
  assert [int(c[0]) for _, c in splits['validation']] == [4]
  assert not len(task_lib.hold_out(splits['validation'])['train'])


@pytest.mark.parametrize('files,message', [
    ({'a.md': ''}, r"task.root='.*' has no text to learn: its 1 file\(s\) "
     r'are empty or not text'),
    ({'a.md': 'One line of text.'}, r"task.root='.*' gives 1 example\(s\) of "
     r'max_target_len=16 tokens: too few to train on one'),
    # The held-out example (the first of fewer than 20) is a.md's 'abc'.
    ({'a.md': 'abc', 'b.md': 'A longer text, long enough for two examples '
      'of sixteen tokens.'}, r'no held-out example is longer than '
     r'task.max_source_len=4 tokens'),
])
def test_too_little_text_is_one_line(tmp_path, files, message):
  for relative, text in files.items():
    write(tmp_path, relative, text)
  with pytest.raises(errors.DataError, match=message) as raised:
    tasks.load_task(task_config(tmp_path), str(tmp_path / 'run'))
  assert '\n' not in str(raised.value)


def test_config_checks():
  config = ml_collections.ConfigDict(dict(
      task=task_config('/x', max_source_len=16),
      model=dict(num_encoder_layers=0, max_source_len=17, max_target_len=80),
      eval=dict(max_len=8, ks=(2,), split='validation')))
  with pytest.raises(ValueError, match='max_source_len=16 .* must be below'):
    tasks.check(config)
  config.task = task_config('/x', extensions='.py')
  with pytest.raises(ValueError, match=r"task.extensions='.py' must be a "
                     r'tuple'):
    tasks.check(config)
  config.task = task_config('')
  with pytest.raises(ValueError, match=r"task.root='' must name the folder"):
    tasks.check(config)
  config.task = task_config('/x', extensions=('.py', '.md'))
  tasks.check(config)
