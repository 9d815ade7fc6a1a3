"""The built-in translation corpus: splits, vocabulary, the rules, the task."""

from collections.abc import Container

import ml_collections
import pytest

from bpd_jax import tasks
from bpd_jax.infra import token_ids
from bpd_jax.tasks.text import embedded


# Parsing: source words -> tree, so that a test can translate any sentence.

_NOUN_FORMS = {**{noun.singular: (noun, False) for noun in embedded._NOUNS},
               **{noun.plural: (noun, True) for noun in embedded._NOUNS}}
# Keyed by a tuple of one or two words ("looks at").
_VERB_FORMS = {**{tuple(verb.singular.split()): (verb, False)
                  for verb in embedded._VERBS},
               **{tuple(verb.plural.split()): (verb, True)
                  for verb in embedded._VERBS}}
_ADJECTIVES_BY_SOURCE = {adjective.source: adjective
                         for adjective in embedded._ADJECTIVES}
_SOURCE_DETERMINERS = {**{word: word for word in embedded._DETERMINERS},
                       'an': 'a'}


class _Parser:
  """Recursive descent over the source grammar."""

  def __init__(self, source: str):
    self._source = source
    self._words = source.split()
    self._position = 0

  def _peek(self) -> str | None:
    if self._position < len(self._words):
      return self._words[self._position]
    return None

  def _error(self, expected: str) -> ValueError:
    found = self._peek()
    where = (f'{found!r} (word {self._position + 1})' if found is not None
             else 'the end')
    return ValueError(f'{self._source!r} is not a sentence of the source '
                      f'grammar: expected {expected}, found {where}.')

  def _take(self, allowed: Container[str], expected: str) -> str:
    word = self._peek()
    if word not in allowed:
      raise self._error(expected)
    self._position += 1
    return word

  def noun_phrase(self) -> embedded._NounPhrase:
    determiner = _SOURCE_DETERMINERS[
        self._take(_SOURCE_DETERMINERS, 'a determiner')]
    adjectives = []
    while self._peek() in _ADJECTIVES_BY_SOURCE:
      adjectives.append(_ADJECTIVES_BY_SOURCE[self._take(
          _ADJECTIVES_BY_SOURCE, 'an adjective')])
    noun, plural = _NOUN_FORMS.get(self._peek(), (None, False))
    if noun is None:
      raise self._error('an adjective or a noun')
    agreeing = embedded._DETERMINERS[determiner]
    if ('pl' if plural else noun.gender) not in agreeing:
      raise self._error(f'a noun agreeing in number with {determiner!r}')
    self._position += 1
    return embedded._NounPhrase(determiner, tuple(adjectives), noun, plural)

  def verb(self, subject: embedded._NounPhrase,
           subordinate: bool) -> embedded._Verb:
    # Two words first: "looks at" is one verb.
    for length in (2, 1):
      key = tuple(self._words[self._position:self._position + length])
      if key in _VERB_FORMS:
        break
    else:
      raise self._error('a verb')
    verb, plural = _VERB_FORMS[key]
    if plural != subject.plural:
      raise self._error('a verb agreeing in number with the subject')
    if subordinate and verb.kind == 'clausal':
      raise self._error('a verb without "that" in a subordinate clause')
    self._position += len(key)
    return verb

  def clause(self, subordinate: bool) -> embedded._Clause:
    subject = self.noun_phrase()
    verb = self.verb(subject, subordinate)
    noun_object = self.noun_phrase() if verb.kind == 'transitive' else None
    place = None
    if verb.kind != 'clausal' and self._peek() in embedded._PREPOSITIONS:
      preposition = self._take(embedded._PREPOSITIONS, 'a preposition')
      place = embedded._PrepositionalPhrase(preposition, self.noun_phrase())
    return embedded._Clause(subject, verb, noun_object, place)

  def sentence(self) -> embedded._Sentence:
    main = self.clause(subordinate=False)
    conjunction = subordinate = None
    if main.verb.kind == 'clausal':
      conjunction = self._take(('that',), '"that"')
    elif self._peek() in embedded._ADVERBIAL_CONJUNCTIONS:
      conjunction = self._take(embedded._ADVERBIAL_CONJUNCTIONS,
                               'a conjunction')
    if conjunction:
      subordinate = self.clause(subordinate=True)
    self._take(('.',), '"."' if subordinate else '"." or a conjunction')
    if self._peek() is not None:
      raise self._error('nothing after "."')
    return embedded._Sentence(main, conjunction, subordinate)


def translate(source: str) -> str:
  """The target of any sentence of the source grammar, by parsing it.

  The corpus writes each target from the tree it sampled; parsing the
  source alone and applying the same rules must give that target, so the
  target is a function of the source (the task is learnable exactly).

  Args:
    source: words separated by spaces, e.g. "the dog sees a cat ."; the
      length limit of the corpus does not apply.

  Raises:
    ValueError: a word outside the source vocabulary (naming it), or a
      sentence the grammar cannot produce.
  """
  for word in source.split():
    if word not in embedded._SOURCE_WORDS:
      raise ValueError(f'unknown source word {word!r} in {source!r}.')
  return ' '.join(embedded._target_words(_Parser(source).sentence()))


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
    assert translate(source) == target


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
  assert translate(source) == target


def test_docstring_example():
  assert translate(
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
    translate('the zebra sleeps .')


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
    translate(source)


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


def test_a_split_size_out_of_range_names_its_field():
  config = ml_collections.ConfigDict(dict(sizes=dict(train=0, validation=8)))
  with pytest.raises(ValueError, match=r'^task.sizes.train=0: num_examples '
                     r'must be a positive integer'):
    embedded.SPEC.load(config, '')
