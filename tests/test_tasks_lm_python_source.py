"""The Python-source LM task: files, splits, the code vocabulary, examples."""

import os

import ml_collections
import pytest

from bpd_jax import tasks
from bpd_jax.infra import errors
from bpd_jax.tasks.lm import python_source

CODE = '''import os


class Thing:
    """A thing."""

    def __init__(self, name):
        self.name = name  # Kept.

    def path(self):
        return os.path.join('/tmp', self.name)
'''


def write(root, relative, text=CODE):
  path = os.path.join(root, relative)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'wb') as f:
    f.write(text if isinstance(text, bytes) else text.encode())


def test_tests_and_site_packages_are_left_out(tmp_path):
  for relative in ('a.py', 'pkg/b.py', 'test/c.py', 'pkg/tests/d.py',
                   'site-packages/e.py', 'idlelib/idle_test/f.py',
                   'test_g.py', 'notes.txt', 'pkg.py/h.py'):
    write(tmp_path, relative)
  files = python_source.source_files(str(tmp_path))
  # A directory named pkg.py is no file to read (it was read, and failed).
  assert sorted(f for split in files.values() for f in split) == [
      'a.py', 'pkg.py/h.py', 'pkg/b.py']


@pytest.mark.parametrize('path,split', [
    # crc32(path) % 100 at the ends of each split's buckets: 0, 89 train,
    # 90, 94 validation, 95, 99 test.
    ('asyncio/subprocess.py', 'train'), ('asyncio/__main__.py', 'train'),
    ('email/_policybase.py', 'validation'),
    ('asyncio/queues.py', 'validation'), ('curses/textpad.py', 'test'),
    ('encodings/cp1251.py', 'test'),
    # The whole relative path counts, not the file name alone.
    ('datetime.py', 'validation'), ('a/datetime.py', 'train')])
def test_a_files_split_is_fixed_by_its_path(path, split):
  assert python_source.split_of(path) == split


def test_splits_share_the_files_as_their_buckets_say():
  splits = [python_source.split_of(f'module_{i}.py') for i in range(400)]
  shares = {s: splits.count(s) / len(splits) for s in python_source.SPLITS}
  assert 0.85 < shares['train'] < 0.95 and shares['validation'] > 0.02


def test_the_standard_library_is_a_corpus():
  files = python_source.source_files(python_source.stdlib_root())
  assert len(files['train']) > 300 and files['validation'] and files['test']
  assert not any('site-packages' in f or '/test/' in f'/{f}'
                 for split in files.values() for f in split)


def test_bad_roots_and_files_are_named(tmp_path):
  with pytest.raises(FileNotFoundError, match='is not a directory'):
    python_source.source_files(str(tmp_path / 'missing'))
  with pytest.raises(FileNotFoundError, match='no Python file'):
    python_source.source_files(str(tmp_path))
  (tmp_path / 'bad.py').write_bytes(b'x = "\xff\xfe"\n')
  with pytest.raises(ValueError, match='bad.py is not Python source'):
    python_source.read_source(str(tmp_path / 'bad.py'))


def task_config(root, **fields):
  return ml_collections.ConfigDict(dict(dict(
      name='python_source', root=str(root), train_files=0, vocab_size=512,
      vocab_path='', vocab_lines=0, max_source_len=4, max_target_len=24),
      **fields))


@pytest.fixture(scope='module')
def loaded(tmp_path_factory):
  root = tmp_path_factory.mktemp('code')
  # 20 training files and 2 of each other split (the split is by path).
  wanted = {'train': 20, 'validation': 2, 'test': 2}
  for i in range(1000):
    name = f'mod_{i}.py'
    split = python_source.split_of(name)
    if wanted[split]:
      wanted[split] -= 1
      write(root, name, CODE.replace('Thing', f'Thing{i}'))
  workdir = tmp_path_factory.mktemp('run')
  return root, workdir, tasks.load_task(task_config(root), str(workdir))


def test_code_round_trips_through_the_vocabulary(loaded):
  _, workdir, task = loaded
  assert os.path.exists(workdir / 'vocab.model')
  text = CODE + '\tx = "naïve ∑"\n'  # A tab and characters it never saw.
  assert task.vocab.decode(task.vocab.encode(text)) == text
  assert task.vocab.encode('\n') == task.vocab.encode('\n')[:1]


def test_examples_are_chunks_of_the_files_ending_with_eos(loaded):
  _, _, task = loaded
  train = task.encoded('train')
  prompts, lengths = train.lengths()
  assert (prompts == 0).all() and lengths.max() == 24
  # Each training file's last example ends with eos, and only that one.
  assert sum(int(c[-1]) == 1 for _, c in train) == sum(
      1 in [int(t) for t in c] for _, c in train) > 0
  prompt, reference = task.eval_ids('validation')[0]
  assert len(prompt) == 4 and len(reference) <= 20
  sources, cut = task.sources('validation', max_len=5, limit=3)
  assert len(sources) == 3 and cut == 0 and all(s[0] == 2 for s in sources)


def code_root(root, **texts):
  """Files under root, by split: texts[split] holds their texts (other
  splits get CODE: 20 training files, 2 of each other split)."""
  wanted = dict(train=[CODE] * 20, validation=[CODE] * 2, test=[CODE] * 2)
  wanted.update(texts)
  for i in range(1000):
    name = f'mod_{i}.py'
    if wanted[python_source.split_of(name)]:
      write(root, name, wanted[python_source.split_of(name)].pop())
  return root


@pytest.mark.parametrize('texts,message', [
    (dict(validation=[b'\x89PNG\r\n\x1a\n\x00']), r'mod_\d+.py is not Python '
     r'source text: invalid or missing encoding declaration \(a file is '
     r'UTF-8 unless'),
    (dict(validation=[b'x = 1\ny = 2\nz = "\xff"\n']), r'mod_\d+.py is not '
     r'Python source text: byte 0xff is not utf-8 \(invalid start byte\)'),
    (dict(validation=['', '\n']), r"split 'validation' has nothing to "
     r"evaluate: none of its 2 file\(s\) under task.root='.*' \(mod_\d+.py, "
     r'mod_\d+.py\) is longer than task.max_source_len=4 tokens with its '
     r'eos'),
    # 3 bytes may be 3 tokens: only the vocabulary tells it is too short.
    (dict(test=['\n\n\n']), r"split 'test' has nothing to evaluate"),
    (dict(test=[]), r"split 'test' has no file under task.root='.*': a "
     r"file's split is crc32\(its path\) % 100 \(train 0-89, validation "
     r'90-94, test 95-99\), and its Python files fall 20 in train, 2 in '
     r'validation, 0 in test'),
    (dict(train=[]), r"split 'train' has no file under task.root"),
    (dict(train=['', ' \n']), r"split 'train' has no code under "
     r"task.root='.*': its 2 file\(s\) \(mod_\d+.py, mod_\d+.py\) are empty"),
])
def test_every_split_is_checked_when_the_task_loads(loaded, tmp_path, texts,
                                                    message):
  """Each of these stopped the job after training, with a traceback."""
  _, workdir, _ = loaded
  root = code_root(tmp_path / 'code', **texts)
  config = task_config(root, vocab_path=str(workdir / 'vocab.model'))
  with pytest.raises(errors.DataError, match=message) as raised:
    tasks.load_task(config, str(tmp_path), train_vocab=False)
  assert '\n' not in str(raised.value)


def test_evaluation_jobs_need_the_trained_vocabulary(loaded, tmp_path):
  root, _, _ = loaded
  with pytest.raises(Exception, match='vocabulary .* not found'):
    tasks.load_task(task_config(root), str(tmp_path), train_vocab=False)


def test_config_checks():
  config = ml_collections.ConfigDict(dict(
      task=task_config('', max_source_len=24),
      model=dict(num_encoder_layers=0, max_source_len=25, max_target_len=80),
      eval=dict(max_len=8, ks=(2,), split='validation')))
  with pytest.raises(ValueError, match='max_source_len=24 .* must be below'):
    tasks.check(config)
  config.task.vocab_size = 10
  with pytest.raises(ValueError, match='task.vocab_size=10'):
    tasks.check(config)
  config.task.update(vocab_size=512, max_source_len=8)
  config.eval.split = 'dev'
  with pytest.raises(ValueError, match="eval.split='dev' is not a split"):
    tasks.check(config)
