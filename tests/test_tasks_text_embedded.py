"""The built-in translation corpus: splits, vocabulary, the rules, the task."""

import ml_collections
import pytest

from bpd_jax import tasks
from bpd_jax.tasks import token_ids
from bpd_jax.tasks.text import embedded


@pytest.fixture(scope='module')
def corpus():
  return {split: embedded.examples(split) for split in embedded.SPLITS}


def all_pairs(corpus):
  return [pair for pairs in corpus.values() for pair in pairs]


def test_examples_are_deterministic(corpus):
  assert embedded.examples('validation') == corpus['validation']
  # Pinned, so a change of seed, grammar or platform shows up here.
  assert embedded.examples('validation', 1) == [
      ('a doctor closes six churches .', 'ein arzt macht sechs kirchen zu .')]
  assert embedded.examples('test', 1) == [
      ('the clever city follows one cook .',
       'die stadt kluge folgt ein koch .')]


def test_callers_get_their_own_list(corpus):
  embedded.examples('test').clear()
  assert embedded.examples('test') == corpus['test']


def test_split_sizes(corpus):
  assert embedded.SPLITS == {'train': 50_000, 'validation': 1_000,
                             'test': 1_000}
  for split, size in embedded.SPLITS.items():
    assert len(corpus[split]) == size
  assert len(embedded.examples('validation', 7)) == 7


def test_smaller_request_is_a_prefix(corpus):
  assert embedded.examples('train', 100) == corpus['train'][:100]


def test_splits_are_disjoint_and_without_repeats(corpus):
  sources = {split: {source for source, _ in pairs}
             for split, pairs in corpus.items()}
  for split, pairs in corpus.items():
    assert len(sources[split]) == len(pairs)
  assert not sources['train'] & sources['validation']
  assert not sources['train'] & sources['test']
  assert not sources['validation'] & sources['test']


def test_vocabulary_covers_the_corpus(corpus):
  vocabulary = embedded.words()
  assert vocabulary == sorted(set(vocabulary))
  used = {word for pair in all_pairs(corpus) for sentence in pair
          for word in sentence.split(' ')}
  # Every listed word is used, so words() is no larger than it must be.
  assert used == set(vocabulary)
  assert len(vocabulary) < 500


def test_sentence_format_and_lengths(corpus):
  for source, target in all_pairs(corpus):
    for sentence, most in ((source, 20), (target, 22)):
      words = sentence.split(' ')
      assert 4 <= len(words) <= most, sentence
      assert words[-1] == '.' and '.' not in words[:-1], sentence
      assert all(words) and sentence == sentence.lower(), sentence


def test_translate_reproduces_every_pair(corpus):
  for source, target in all_pairs(corpus):
    assert embedded.translate(source) == target


def test_target_is_not_a_copy(corpus):
  pairs = all_pairs(corpus)
  assert all(source != target for source, target in pairs)
  differing = sum(len(source.split()) != len(target.split())
                  for source, target in pairs)
  assert differing > len(pairs) // 10


@pytest.mark.parametrize('source, target', [
    # Lexicon, word for word.
    ('the dog sees a cat .', 'der hund sieht eine katze .'),
    # Two source words to one.
    ('the cat looks at the dog .', 'die katze betrachtet der hund .'),
    ('the king wakes up .', 'der koenig erwacht .'),
    # One source word to two: a separable verb, its particle last.
    ('the woman opens the door .', 'die frau macht die tuer auf .'),
    ('the woman opens the door in the house .',
     'die frau macht die tuer in das haus auf .'),
    # Adjectives after the noun, in source order.
    ('a big black dog sleeps .', 'ein hund grosser schwarzer schlaeft .'),
    # Verb last in a subordinate clause, a comma before the conjunction.
    ('the child sings because the dog sees a cat .',
     'das kind singt , weil der hund eine katze sieht .'),
    ('the king says that a dog sleeps .',
     'der koenig sagt , dass ein hund schlaeft .'),
    # ... with the particle joined to the verb.
    ('the dog runs while the woman opens the door .',
     'der hund laeuft , waehrend die frau die tuer aufmacht .'),
    # Agreement of article and adjective with gender and number.
    ('the old dog sees the old cat .', 'der hund alter sieht die katze alte .'),
    ('the old house sees the old dogs .',
     'das haus altes sieht die hunde alten .'),
    ('an old egg sleeps .', 'ein ei altes schlaeft .'),
    # Plural suffix by gender; an ending's "e" merging with the stem's.
    ('the dogs like the cats with the children .',
     'die hunde moegen die katzen mit die kinder .'),
    ('the tired women sleep .', 'die frauen mueden schlafen .'),
    ('a tired cat sleeps .', 'eine katze muede schlaeft .'),
    # Verb agreement with the subject's number.
    ('the dogs see a cat .', 'die hunde sehen eine katze .'),
    # Numbers: a numeral, a plural noun, plural endings; "one" as "a".
    ('three old cats sleep .', 'drei katzen alten schlafen .'),
    ('one small child sees nine red hats .',
     'ein kind kleines sieht neun hute roten .'),
])
def test_rules(source, target):
  assert embedded.translate(source) == target


def test_docstring_example():
  assert embedded.translate(
      'three big dogs look at a small cat because the woman opens the door .'
  ) == ('drei hunde grossen betrachten eine katze kleine , weil die frau die '
        'tuer aufmacht .')


@pytest.mark.parametrize('split', ['dev', 'Train', ''])
def test_unknown_split(split):
  with pytest.raises(ValueError, match=f"{split!r}.*'test'.*'train'"):
    embedded.examples(split)


@pytest.mark.parametrize('num_examples', [0, -1, 2.5])
def test_bad_num_examples(num_examples):
  with pytest.raises(ValueError, match=f'positive integer.*{num_examples}'):
    embedded.examples('train', num_examples)


def test_split_that_cannot_be_filled(monkeypatch):
  monkeypatch.setattr(embedded, '_MAX_DRAWS_PER_EXAMPLE', 1)
  with pytest.raises(ValueError, match="could not fill split 'test'"):
    embedded.examples('test', 5)


def test_unknown_word():
  with pytest.raises(ValueError, match="'zebra'"):
    embedded.translate('the zebra sleeps .')


@pytest.mark.parametrize('source', [
    'the cats sleeps .',  # Verb number.
    'a cats sleep .',  # Determiner number.
    'three cat sleeps .',
    'the dog sees .',  # Missing object.
    'the dog sleeps',  # Missing ".".
    'the dog says .',  # Missing "that" clause.
    'the dog sleeps that the cat runs .',
    'the dog sleeps because the cat says that a dog runs .',
    'the dog sleeps . the cat runs .',
])
def test_outside_the_grammar(source):
  with pytest.raises(ValueError, match='not a sentence of the source grammar'):
    embedded.translate(source)


def test_embedded_task():
  config = ml_collections.ConfigDict(dict(
      name='embedded', sizes=dict(train=50, validation=5)))
  task = tasks.load_task(config, '/nonexistent')
  assert len(task.pairs('train')) == 50 and len(task.pairs('validation')) == 5
  source, target = task.encoded('train')[0]
  assert source[-1] == target[-1] == token_ids.EOS_ID
  assert token_ids.UNK_ID not in source + target
  with pytest.raises(ValueError, match="split 'test' is not one of"):
    task.pairs('test')
