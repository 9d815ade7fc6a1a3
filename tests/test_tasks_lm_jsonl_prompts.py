"""The 'jsonl_prompts' LM task: prompts read from a JSONL file, every one
for the distill job to continue, then the model's continuations split into
training and held-out examples; with the tiny GPT-2's tokenizer."""

import json
import os

import ml_collections
import pytest

from bpd_jax import tasks
from bpd_jax.infra import errors
from bpd_jax.tasks import batching
from bpd_jax.tasks.lm import jsonl_prompts
from bpd_jax.tasks.lm import task as task_lib

TINY_GPT2 = os.path.join(os.path.dirname(__file__), 'data', 'tiny_gpt2')


def write_prompts(path, records, blank_line=True):
  lines = [json.dumps(r) if not isinstance(r, str) else r for r in records]
  path.write_text('\n'.join(lines) + ('\n\n' if blank_line else ''),
                  encoding='utf-8')
  return str(path)


def task_config(path, **fields):
  return ml_collections.ConfigDict(dict(dict(
      name='jsonl_prompts', path=str(path), vocab_type='hf',
      vocab_path=TINY_GPT2, distilled='', max_source_len=4,
      max_target_len=16), **fields))


RECORDS = [{'prompt': f'def f{i}(x):'} if i % 2 else {'text': f'Number {i}'}
           for i in range(21)]


def test_prompts_come_from_the_prompt_or_the_text_field(tmp_path):
  path = write_prompts(tmp_path / 'p.jsonl', [{'prompt': 'a', 'text': 'b'},
                                             {'text': 'c', 'id': 3}])
  assert jsonl_prompts.read_prompts(path) == ['a', 'c']


@pytest.mark.parametrize('records,message', [
    (['{"prompt": "a"}', '{"prompt": '], r'p.jsonl:2 is not JSON \(Expecting '
     r'value, column 12\)'),
    (['["a"]'], r'p.jsonl:1: each line must be a JSON object with a string '
     r'"prompt" \(or "text"\)'),
    ([{'prompt': 3}], r'p.jsonl:1: each line must be'),
    ([{'question': 'a'}], r'p.jsonl:1: each line must be'),
    ([{'prompt': ' '}], r'p.jsonl holds no prompt'),
])
def test_a_bad_line_is_named(tmp_path, records, message):
  path = write_prompts(tmp_path / 'p.jsonl', records)
  with pytest.raises(errors.DataError, match=message) as raised:
    tasks.load_task(task_config(path), str(tmp_path))
  assert '\n' not in str(raised.value)
  with pytest.raises(errors.MissingFileError, match=r"task.path='.*none.jsonl"
                     r"': no such JSONL file"):
    tasks.load_task(task_config(tmp_path / 'none.jsonl'), str(tmp_path))


def test_every_prompt_is_for_the_distill_job_and_training_refuses_them(
    tmp_path):
  path = write_prompts(tmp_path / 'p.jsonl', RECORDS)
  task = tasks.load_task(task_config(path), str(tmp_path))
  vocab = task.vocab
  encoded = [vocab.encode(jsonl_prompts.read_prompts(path)[i])
             for i in range(21)]
  train = task.encoded('train')
  assert len(train) == 21 and not train.lengths()[1].any()
  # A prompt keeps its last max_source_len tokens.
  assert [list(p) for p, _ in train] == [ids[-4:] for ids in encoded]
  sources, cut = task.sources('train', max_len=5)
  assert sources[1] == [vocab.bos_id] + encoded[1][-4:] and cut == 0
  assert [list(p) for p, _ in task.encoded('validation')] == [
      encoded[19][-4:]]
  with pytest.raises(ValueError, match=r'no training example fits .* with a '
                     r'target to learn \(21 of 21 have no target: prompts '
                     r'alone, which python -m bpd_jax.distill continues '
                     r'first\)'):
    batching.TrainBatches(train, 4, 4, 16, seed=0, pad_id=vocab.pad_id)


def test_distilled_continuations_train_and_one_in_20_is_held_out(tmp_path):
  path = write_prompts(tmp_path / 'p.jsonl', RECORDS)
  prompts = tasks.load_task(task_config(path), str(tmp_path))
  pairs = [(list(p), [5 + i, prompts.vocab.eos_id])
           for i, (p, _) in enumerate(prompts.encoded('train'))]
  task_lib.write_distilled(str(tmp_path / 'continued'),
                           batching.EncodedPairs.from_pairs(pairs),
                           prompts.vocab)
  task = tasks.load_task(
      task_config(path, distilled=str(tmp_path / 'continued')), str(tmp_path))
  as_lists = lambda split: [(list(p), list(c))
                            for p, c in task.encoded(split)]
  assert as_lists('validation') == [pairs[19]]
  assert as_lists('train') == pairs[:19] + pairs[20:]
  assert task.train_source_len(4) == 4


def test_config_checks(tmp_path):
  config = ml_collections.ConfigDict(dict(
      task=task_config(''),
      model=dict(num_encoder_layers=0, max_source_len=5, max_target_len=40),
      eval=dict(max_len=8, ks=(2,), split='validation')))
  with pytest.raises(ValueError, match=r"task.path='' must name the JSONL"):
    tasks.check(config)
  config.task = task_config('p.jsonl', distilled=str(tmp_path))
  config.eval.max_len = 17
  with pytest.raises(ValueError, match=r'eval.max_len=17 .* exceeds '
                     r'task.max_target_len=16'):
    tasks.check(config)
