"""A built-in translation task: an English-like into a German-like language.

The corpus is generated, not downloaded: a small probabilistic grammar writes
source sentences, and a fixed set of rules translates them, so a small
Transformer can learn the task exactly in minutes on a CPU and blockwise
decoding has real translations to speed up. An example pair:

  three big dogs look at a small cat because the woman opens the door .
  drei hunde grossen betrachten eine katze kleine , weil die frau die tuer
  aufmacht .

Sentences are lower-case words separated by single spaces, ending in a "."
token. A source sentence is a clause (subject, verb, object for a transitive
verb, optionally a prepositional phrase such as "in the house"), optionally
followed by a subordinate clause after "because", "while", "although" or
"when"; a verb like "says" or "thinks" takes a clause after "that" instead
of an object. Nouns take an article or a number and up to two adjectives.
The corpus keeps sentences of 4 to 20 words; targets have 4 to 22. The
vocabulary (words()) is about 200 source and 270 target words.

The target follows from the source by four kinds of rule:

1. Words. Each source word has its own target word ("dog" -> "hund").
   "looks at" and "wakes up" become one word ("betrachtet", "erwacht");
   "opens" becomes two ("macht ... auf"), a separable verb.
2. Word order. Adjectives follow their noun ("the old door" -> "die tuer
   alte"). A main clause keeps the source order, but a separable verb's
   particle goes to its end ("the woman opens the door" -> "die frau macht
   die tuer auf"). In a subordinate clause the verb goes to the end, the
   particle joined in front of it ("... because the woman opens the door" ->
   "... , weil die frau die tuer aufmacht"). A comma precedes the
   conjunction.
3. Agreement. Each target noun is masculine, feminine or neuter. The article
   follows the noun's gender and number ("der hund", "die katze", "das haus",
   plural "die"; "ein", "eine", "ein"), and so does the adjective ending
   ("-er", "-e", "-es", plural "-en": "der hund alter", "die katze alte").
   Plural nouns take a suffix by gender ("-e", "-en", "-er": "hunde",
   "frauen", "kinder"). An ending's first "e" merges with a final "e" of
   the stem ("katze" -> "katzen", "muede" -> "mueder"). A verb agrees with
   its subject's number in both languages ("sees" -> "sieht", "see" ->
   "sehen").
4. Numbers. "one" declines like "a" ("one cat" -> "eine katze"); "two" to
   "nine" become numerals with a plural noun and plural adjective endings
   ("three old cats" -> "drei katzen alten").

Splits. Each split samples sentences from its own fixed seed, and each
distinct source sentence belongs to exactly one split, picked by a checksum
of its text (80% train, 10% validation, 10% test), so the splits are disjoint
at any size and no source sentence repeats within a split.

The 'embedded' task (SPEC below) serves these pairs with a word vocabulary
(words()); its section has, besides name, max_source_len and
max_target_len, only sizes: {split: number of pairs}.
"""

import functools
import itertools
import typing
import zlib
from collections.abc import Iterator, Sequence

import numpy as np

from bpd_jax.tasks import spec
from bpd_jax.tasks.text import task as task_lib
from bpd_jax.tasks.text import vocab as vocab_lib

SPLITS = {'train': 50_000, 'validation': 1_000, 'test': 1_000}

# Fixed seeds rather than hash(split): Python salts string hashes per process.
_SEEDS = {'train': 1, 'validation': 2, 'test': 3}
# Checksum buckets (crc32 % 10) owned by each split.
_BUCKETS = {'train': range(0, 8), 'validation': range(8, 9),
            'test': range(9, 10)}
_MAX_SOURCE_WORDS = 20
# Sampling gives up after this many sentences per requested example; a split
# owns a tenth of all sentences or more, so about 10 suffice.
_MAX_DRAWS_PER_EXAMPLE = 100
# Uniform numbers drawn from numpy per call; fewer calls keep sampling fast.
_UNIFORMS_PER_CALL = 1 << 16


class _Noun(typing.NamedTuple):
  singular: str
  plural: str
  target: str  # Target singular; the plural is derived from the gender.
  gender: str  # 'm', 'f' or 'n'.


class _Verb(typing.NamedTuple):
  kind: str  # 'transitive', 'intransitive' or 'clausal' (takes "that").
  singular: str  # One or two source words.
  plural: str
  target_singular: str  # One word, or a separable verb and its particle.
  target_plural: str


class _Adjective(typing.NamedTuple):
  source: str
  target: str  # Stem; the ending agrees with the noun.


_NOUNS = tuple(_Noun(*entry) for entry in (
    ('dog', 'dogs', 'hund', 'm'), ('friend', 'friends', 'freund', 'm'),
    ('tree', 'trees', 'baum', 'm'), ('table', 'tables', 'tisch', 'm'),
    ('chair', 'chairs', 'stuhl', 'm'), ('king', 'kings', 'koenig', 'm'),
    ('wolf', 'wolves', 'wolf', 'm'), ('cook', 'cooks', 'koch', 'm'),
    ('doctor', 'doctors', 'arzt', 'm'),
    ('mountain', 'mountains', 'berg', 'm'), ('road', 'roads', 'weg', 'm'),
    ('letter', 'letters', 'brief', 'm'), ('train', 'trains', 'zug', 'm'),
    ('hat', 'hats', 'hut', 'm'),
    ('cat', 'cats', 'katze', 'f'), ('woman', 'women', 'frau', 'f'),
    ('flower', 'flowers', 'blume', 'f'), ('door', 'doors', 'tuer', 'f'),
    ('city', 'cities', 'stadt', 'f'), ('lamp', 'lamps', 'lampe', 'f'),
    ('mouse', 'mice', 'maus', 'f'), ('church', 'churches', 'kirche', 'f'),
    ('street', 'streets', 'strasse', 'f'),
    ('school', 'schools', 'schule', 'f'), ('bag', 'bags', 'tasche', 'f'),
    ('clock', 'clocks', 'uhr', 'f'), ('cloud', 'clouds', 'wolke', 'f'),
    ('bridge', 'bridges', 'bruecke', 'f'),
    ('child', 'children', 'kind', 'n'), ('house', 'houses', 'haus', 'n'),
    ('book', 'books', 'buch', 'n'), ('picture', 'pictures', 'bild', 'n'),
    ('field', 'fields', 'feld', 'n'), ('song', 'songs', 'lied', 'n'),
    ('ship', 'ships', 'schiff', 'n'), ('horse', 'horses', 'pferd', 'n'),
    ('dress', 'dresses', 'kleid', 'n'),
    ('village', 'villages', 'dorf', 'n'), ('egg', 'eggs', 'ei', 'n'),
    ('lamb', 'lambs', 'lamm', 'n'), ('nest', 'nests', 'nest', 'n'),
    ('pig', 'pigs', 'schwein', 'n'),
))

_VERBS = tuple(_Verb(*entry) for entry in (
    ('transitive', 'sees', 'see', 'sieht', 'sehen'),
    ('transitive', 'likes', 'like', 'mag', 'moegen'),
    ('transitive', 'finds', 'find', 'findet', 'finden'),
    ('transitive', 'holds', 'hold', 'haelt', 'halten'),
    ('transitive', 'paints', 'paint', 'malt', 'malen'),
    ('transitive', 'follows', 'follow', 'folgt', 'folgen'),
    ('transitive', 'visits', 'visit', 'besucht', 'besuchen'),
    ('transitive', 'carries', 'carry', 'traegt', 'tragen'),
    ('transitive', 'builds', 'build', 'baut', 'bauen'),
    ('transitive', 'buys', 'buy', 'kauft', 'kaufen'),
    ('transitive', 'loves', 'love', 'liebt', 'lieben'),
    ('transitive', 'describes', 'describe', 'beschreibt', 'beschreiben'),
    ('transitive', 'looks at', 'look at', 'betrachtet', 'betrachten'),
    ('transitive', 'looks for', 'look for', 'sucht', 'suchen'),
    ('transitive', 'waits for', 'wait for', 'erwartet', 'erwarten'),
    ('transitive', 'listens to', 'listen to', 'hoert', 'hoeren'),
    ('transitive', 'opens', 'open', 'macht auf', 'machen auf'),
    ('transitive', 'closes', 'close', 'macht zu', 'machen zu'),
    ('transitive', 'calls', 'call', 'ruft an', 'rufen an'),
    ('transitive', 'invites', 'invite', 'laedt ein', 'laden ein'),
    ('intransitive', 'sleeps', 'sleep', 'schlaeft', 'schlafen'),
    ('intransitive', 'runs', 'run', 'laeuft', 'laufen'),
    ('intransitive', 'sings', 'sing', 'singt', 'singen'),
    ('intransitive', 'laughs', 'laugh', 'lacht', 'lachen'),
    ('intransitive', 'dances', 'dance', 'tanzt', 'tanzen'),
    ('intransitive', 'swims', 'swim', 'schwimmt', 'schwimmen'),
    ('intransitive', 'cries', 'cry', 'weint', 'weinen'),
    ('intransitive', 'works', 'work', 'arbeitet', 'arbeiten'),
    ('intransitive', 'wakes up', 'wake up', 'erwacht', 'erwachen'),
    ('intransitive', 'gets up', 'get up', 'steht auf', 'stehen auf'),
    ('clausal', 'says', 'say', 'sagt', 'sagen'),
    ('clausal', 'thinks', 'think', 'denkt', 'denken'),
    ('clausal', 'knows', 'know', 'weiss', 'wissen'),
    ('clausal', 'hopes', 'hope', 'hofft', 'hoffen'),
    ('clausal', 'believes', 'believe', 'glaubt', 'glauben'),
))

_ADJECTIVES = tuple(_Adjective(*entry) for entry in (
    ('big', 'gross'), ('small', 'klein'), ('old', 'alt'), ('young', 'jung'),
    ('red', 'rot'), ('blue', 'blau'), ('black', 'schwarz'),
    ('green', 'gruen'), ('happy', 'froh'), ('fast', 'schnell'),
    ('slow', 'langsam'), ('cold', 'kalt'), ('warm', 'warm'), ('new', 'neu'),
    ('beautiful', 'schoen'), ('strong', 'stark'), ('tired', 'muede'),
    ('quiet', 'leise'), ('clever', 'klug'), ('wild', 'wild'),
))

# Target determiner by agreement class: a noun's gender, or 'pl'. A missing
# class is a disagreement ("a cats", "three cat").
_INDEFINITE = {'m': 'ein', 'f': 'eine', 'n': 'ein'}
_DETERMINERS = {
    'the': {'m': 'der', 'f': 'die', 'n': 'das', 'pl': 'die'},
    'a': _INDEFINITE, 'one': _INDEFINITE,
    'two': {'pl': 'zwei'}, 'three': {'pl': 'drei'}, 'four': {'pl': 'vier'},
    'five': {'pl': 'fuenf'}, 'six': {'pl': 'sechs'},
    'seven': {'pl': 'sieben'}, 'eight': {'pl': 'acht'},
    'nine': {'pl': 'neun'},
}
_NUMBERS = ('one', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight',
            'nine')
_ADJECTIVE_ENDINGS = {'m': 'er', 'f': 'e', 'n': 'es', 'pl': 'en'}
_PLURAL_SUFFIXES = {'m': 'e', 'f': 'en', 'n': 'er'}
_PREPOSITIONS = {'in': 'in', 'on': 'auf', 'with': 'mit', 'under': 'unter',
                 'behind': 'hinter', 'near': 'neben', 'from': 'von',
                 'without': 'ohne'}
_CONJUNCTIONS = {'that': 'dass', 'because': 'weil', 'while': 'waehrend',
                 'although': 'obwohl', 'when': 'wenn'}
_ADVERBIAL_CONJUNCTIONS = ('because', 'while', 'although', 'when')
_VERBS_BY_KIND = {kind: tuple(verb for verb in _VERBS if verb.kind == kind)
                  for kind in ('transitive', 'intransitive', 'clausal')}
_PREPOSITION_LIST = tuple(_PREPOSITIONS)
_VOWELS = 'aeiou'


class _NounPhrase(typing.NamedTuple):
  determiner: str  # A key of _DETERMINERS ("an" is spelled when rendered).
  adjectives: tuple[_Adjective, ...]
  noun: _Noun
  plural: bool


class _PrepositionalPhrase(typing.NamedTuple):
  preposition: str
  noun_phrase: _NounPhrase


class _Clause(typing.NamedTuple):
  subject: _NounPhrase
  verb: _Verb
  object: _NounPhrase | None
  place: _PrepositionalPhrase | None


class _Sentence(typing.NamedTuple):
  main: _Clause
  conjunction: str | None
  subordinate: _Clause | None


# Source sentences: tree -> words.


def _source_noun_phrase(phrase: _NounPhrase) -> list[str]:
  words = [adjective.source for adjective in phrase.adjectives]
  words.append(phrase.noun.plural if phrase.plural else phrase.noun.singular)
  determiner = phrase.determiner
  if determiner == 'a' and words[0][0] in _VOWELS:
    determiner = 'an'
  return [determiner] + words


def _source_clause(clause: _Clause) -> list[str]:
  verb = clause.verb
  words = _source_noun_phrase(clause.subject)
  words += (verb.plural if clause.subject.plural else verb.singular).split()
  if clause.object:
    words += _source_noun_phrase(clause.object)
  if clause.place:
    words.append(clause.place.preposition)
    words += _source_noun_phrase(clause.place.noun_phrase)
  return words


def _source_words(sentence: _Sentence) -> list[str]:
  words = _source_clause(sentence.main)
  if sentence.subordinate:
    words.append(sentence.conjunction)
    words += _source_clause(sentence.subordinate)
  words.append('.')
  return words


# Target sentences: tree -> words, by the rules of the module docstring.


def _with_ending(stem: str, ending: str) -> str:
  """Appends an ending whose first 'e' merges with a final 'e' of the stem."""
  if stem.endswith('e') and ending.startswith('e'):
    ending = ending[1:]
  return stem + ending


def _target_noun_phrase(phrase: _NounPhrase) -> list[str]:
  """Determiner, noun, adjectives, all agreeing with the noun."""
  noun = phrase.noun
  agreement = 'pl' if phrase.plural else noun.gender
  words = [_DETERMINERS[phrase.determiner][agreement]]
  words.append(_with_ending(noun.target, _PLURAL_SUFFIXES[noun.gender])
               if phrase.plural else noun.target)
  ending = _ADJECTIVE_ENDINGS[agreement]
  words += [_with_ending(adjective.target, ending)
            for adjective in phrase.adjectives]
  return words


def _target_verb(clause: _Clause) -> list[str]:
  """The verb, then the particle of a separable verb."""
  verb = clause.verb
  return (verb.target_plural if clause.subject.plural
          else verb.target_singular).split()


def _target_object_and_place(clause: _Clause) -> list[str]:
  words = []
  if clause.object:
    words += _target_noun_phrase(clause.object)
  if clause.place:
    words.append(_PREPOSITIONS[clause.place.preposition])
    words += _target_noun_phrase(clause.place.noun_phrase)
  return words


def _target_main_clause(clause: _Clause) -> list[str]:
  """Source order, except that a particle goes to the end."""
  verb, *particle = _target_verb(clause)
  return (_target_noun_phrase(clause.subject) + [verb] +
          _target_object_and_place(clause) + particle)


def _target_subordinate_clause(clause: _Clause) -> list[str]:
  """Verb last, any particle joined in front of it."""
  verb_and_particle = _target_verb(clause)
  return (_target_noun_phrase(clause.subject) +
          _target_object_and_place(clause) +
          [''.join(reversed(verb_and_particle))])


def _target_words(sentence: _Sentence) -> list[str]:
  words = _target_main_clause(sentence.main)
  if sentence.subordinate:
    words += [',', _CONJUNCTIONS[sentence.conjunction]]
    words += _target_subordinate_clause(sentence.subordinate)
  words.append('.')
  return words


# Every word a source sentence can hold ("an" before a vowel).
_SOURCE_WORDS = frozenset(itertools.chain(
    (form for noun in _NOUNS for form in (noun.singular, noun.plural)),
    (word for verb in _VERBS for form in (verb.singular, verb.plural)
     for word in form.split()),
    (adjective.source for adjective in _ADJECTIVES), _DETERMINERS, ['an'],
    _PREPOSITIONS, _CONJUNCTIONS, ['.']))


# Sampling: seeded uniforms -> trees.


def _uniforms(seed: int) -> Iterator[float]:
  """An endless stream of uniform numbers in [0, 1) from a seed."""
  generator = np.random.default_rng(seed)
  while True:
    yield from generator.random(_UNIFORMS_PER_CALL).tolist()


class _Sampler:
  """Draws sentence trees from the source grammar."""

  def __init__(self, seed: int):
    self._uniforms = _uniforms(seed)

  def _chance(self, probability: float) -> bool:
    return next(self._uniforms) < probability

  def _choice(self, options: Sequence):
    return options[int(next(self._uniforms) * len(options))]

  def _adjectives(self) -> tuple[_Adjective, ...]:
    if self._chance(0.55):
      return ()
    first = self._choice(_ADJECTIVES)
    if self._chance(0.75):
      return (first,)
    second = self._choice(_ADJECTIVES)
    # "the big big dog" is no sentence.
    return (first,) if second == first else (first, second)

  def _noun_phrase(self) -> _NounPhrase:
    if self._chance(0.5):
      determiner, plural = 'the', self._chance(0.4)
    elif self._chance(0.4):
      determiner, plural = 'a', False
    else:
      determiner = self._choice(_NUMBERS)
      plural = determiner != 'one'
    return _NounPhrase(determiner, self._adjectives(),
                       self._choice(_NOUNS), plural)

  def _clause(self, subordinate: bool) -> _Clause:
    if not subordinate and self._chance(0.15):
      kind = 'clausal'
    else:
      kind = 'transitive' if self._chance(0.65) else 'intransitive'
    subject = self._noun_phrase()
    verb = self._choice(_VERBS_BY_KIND[kind])
    noun_object = self._noun_phrase() if kind == 'transitive' else None
    place = None
    if kind != 'clausal' and self._chance(0.3):
      place = _PrepositionalPhrase(self._choice(_PREPOSITION_LIST),
                                   self._noun_phrase())
    return _Clause(subject, verb, noun_object, place)

  def sentence(self) -> _Sentence:
    main = self._clause(subordinate=False)
    if main.verb.kind == 'clausal':
      conjunction = 'that'
    elif self._chance(0.3):
      conjunction = self._choice(_ADVERBIAL_CONJUNCTIONS)
    else:
      return _Sentence(main, None, None)
    return _Sentence(main, conjunction, self._clause(subordinate=True))


def _split_of(source: str) -> str:
  """The one split a source sentence may appear in."""
  bucket = zlib.crc32(source.encode()) % 10
  return next(split for split, buckets in _BUCKETS.items()
              if bucket in buckets)


@functools.lru_cache(maxsize=None)
def _generate(split: str, num_examples: int) -> tuple[tuple[str, str], ...]:
  """The split's first num_examples distinct sentences of its stream."""
  sampler = _Sampler(_SEEDS[split])
  seen = set()
  pairs = []
  for _ in range(_MAX_DRAWS_PER_EXAMPLE * num_examples):
    sentence = sampler.sentence()
    source_words = _source_words(sentence)
    if len(source_words) > _MAX_SOURCE_WORDS:
      continue
    source = ' '.join(source_words)
    if source in seen or _split_of(source) != split:
      continue
    seen.add(source)
    pairs.append((source, ' '.join(_target_words(sentence))))
    if len(pairs) == num_examples:
      return tuple(pairs)
  raise ValueError(f'could not fill split {split!r}: found {len(pairs)} of '
                   f'{num_examples} distinct sentences in '
                   f'{_MAX_DRAWS_PER_EXAMPLE * num_examples} draws.')


def examples(split: str,
             num_examples: int | None = None) -> list[tuple[str, str]]:
  """(source, target) sentence pairs of a split.

  The same on every call and machine; a smaller num_examples gives a prefix
  of a larger one.

  Args:
    split: a key of SPLITS.
    num_examples: how many pairs; defaults to SPLITS[split].

  Raises:
    ValueError: an unknown split, or num_examples is not a positive integer.
  """
  if split not in SPLITS:
    raise ValueError(f'unknown split {split!r}; expected one of '
                     f'{sorted(SPLITS)}.')
  if num_examples is None:
    num_examples = SPLITS[split]
  if not isinstance(num_examples, int) or num_examples < 1:
    raise ValueError(f'num_examples must be a positive integer (or None for '
                     f'{SPLITS[split]}), got {num_examples!r}.')
  return list(_generate(split, num_examples))


def _target_vocabulary() -> set[str]:
  """Every target word, each form built as the rules build it."""
  nouns = [noun.target for noun in _NOUNS]
  nouns += [_with_ending(noun.target, _PLURAL_SUFFIXES[noun.gender])
            for noun in _NOUNS]
  adjectives = [_with_ending(adjective.target, ending)
                for adjective in _ADJECTIVES
                for ending in _ADJECTIVE_ENDINGS.values()]
  verbs = []
  for verb in _VERBS:
    for form in (verb.target_singular, verb.target_plural):
      words = form.split()
      verbs += words + [''.join(reversed(words))]
  determiners = [word for table in _DETERMINERS.values()
                 for word in table.values()]
  return set(itertools.chain(nouns, adjectives, verbs, determiners,
                             _PREPOSITIONS.values(), _CONJUNCTIONS.values(),
                             [',', '.']))


def words() -> list[str]:
  """Every word (token) that can occur in a source or target sentence.

  Sorted, without duplicates.
  """
  return sorted(_SOURCE_WORDS | _target_vocabulary())


def _load(config, workdir: str, train_vocab: bool = True) -> task_lib.TextTask:
  """task.sizes: {split: number of pairs}; no file, no trained vocabulary."""
  del workdir, train_vocab  # Generated and fixed: nothing to read or train.
  splits = {}
  for split, size in config.sizes.items():
    try:
      splits[split] = examples(split, size)
    except ValueError as error:  # Named as the config names it.
      raise ValueError(f'task.sizes.{split}={size!r}: {error}') from None
  return task_lib.TextTask(vocab_lib.WordVocabulary(words()), splits)


# Its one field, task.sizes, is checked by examples() as the task loads.
SPEC = spec.TaskSpec(name='embedded', kind='text', load=_load)
