"""What the benchmark measures: its flags, read and checked into a `Plan`,
and the sweep of settings it times.

`parse(config)` runs in `jobs.setup` before any work: it reads the flags
(--quick applied) and checks every fixed setting as a decode checks it
(`DecodeOptions.check`). The job tunes k='auto' on training sources
(`Plan.tune`) and then times `Plan.settings(tuning)`.
"""

import dataclasses
import functools
import os
from typing import Sequence

from absl import app
from absl import flags

from bpd_jax import auto_k
from bpd_jax import decoding
from bpd_jax import tasks
from bpd_jax.decoding import tree as tree_lib
from bpd_jax.evaluation.spec import (SAMPLING_CRITERIA, AutoSpec, DecoderSpec,
                                     tree_ks)
from bpd_jax.infra import extras
from bpd_jax.models import drafters
from bpd_jax.rescorers import ngram as ngram_lib
from bpd_jax.tasks import batching

_OUTPUT_DIR = flags.DEFINE_string(
    'output_dir', None, 'Where bench.json/.md/.png go (default: '
    'WORKDIR/bench).')
_BATCH_SIZES = flags.DEFINE_list('batch_sizes', ['1', '8', '32'],
                                 'Batch sizes.')
_KS = flags.DEFINE_list('ks', None, 'Block sizes (default: the config\'s '
                        'eval.ks; 1, greedy decoding, is always timed).')
_CRITERIA = flags.DEFINE_list(
    'criteria', ['exact', 'top-k:2'],
    "Verification criteria: 'exact', 'top-k:T', 'distance:EPS'.")
_MIN_BLOCKS = flags.DEFINE_list('min_blocks', ['1'], 'Minimum block sizes.')
_SAMPLERS = flags.DEFINE_multi_string(
    'sampler', None, "A sampler, e.g. 'temperature=0.7,top_p=0.9' "
    '(repeatable): ancestral and blockwise sampling rows, timed against '
    "that ancestral sampling (default: the config's eval.samplers).")
_TREES = flags.DEFINE_multi_string(
    'tree', None, "A tree of the heads' candidates, as widths per depth, "
    "e.g. '2,2', or a tree of N nodes made each call from the drafter's "
    "confidence, 'dynamic:N[,top=T,frontier=W,temperature=S]' "
    '(repeatable): a row at every k deeper than it, exact verification, '
    'and one under each sampler.')
_TREE_SIZES = flags.DEFINE_list(
    'tree_sizes', [], 'Nodes of the most probable trees under the rank '
    'probabilities measured on the calibration sources (e.g. 16,32; exact '
    "verification): each a row at its depth, and a candidate of k='auto'.")
_DYNAMIC_SIZES = flags.DEFINE_list(
    'dynamic_sizes', [], "Nodes of dynamic trees (tree='dynamic:N' at k = "
    "the model's heads) k='auto' chooses from too, each decoded on the "
    'calibration sources (e.g. 32,64; exact verification).')
_DRAFTERS = flags.DEFINE_multi_string(
    'drafter', None, "A drafter that needs no training, e.g. 'lookup', "
    "'lookup:min=3,heads=tree' or 'ngram' (repeatable): a row at every k, "
    "exact verification (default: the config's eval.drafters).")
_NGRAM = flags.DEFINE_string(
    'ngram', None, "The n-gram model 'ngram' drafters read (the drafts "
    "job's OUTPUT_DIR/ngram.npz; default: the config's eval.ngram_path).")
_EXAMPLES = flags.DEFINE_integer('examples', 256,
                                 'Eval sentences decoded per setting.',
                                 lower_bound=1)
_REPEATS = flags.DEFINE_integer('repeats', 3, 'Timed rounds per setting.',
                                lower_bound=1)
_CALIBRATION = flags.DEFINE_integer(
    'calibration_examples', 64,
    "Training sources k='auto' is tuned on (0: no auto setting).",
    lower_bound=0)
_SHARDING_TABLE = flags.DEFINE_boolean(
    'sharding_table', False, 'Also a table of each rule set (replicated, '
    "'tensor', 'fsdp') on the config's mesh (mesh.shape, mesh.axes): "
    'per-device bytes of parameters, optimizer state and decoding cache '
    'against the replicated layout, and the collectives per loop iteration '
    'of greedy and blockwise decoding at the largest batch size and k '
    '(bench/sharded.py; compiles two programs a rule set).')
_QUICK = flags.DEFINE_boolean(
    'quick', False, 'Under a minute: batch sizes 1 and 8, the smallest and '
    'largest k, exact only, 16 sentences, 1 round, auto tuned on 16 '
    'sources (flags given explicitly keep their values).')


def setting(max_len: int, k: int = 1, criterion: str = 'exact',
            min_block: int = 1, sampler: str = '',
            tree: str | decoding.Tree = '', drafter: str = '') -> DecoderSpec:
  """A fixed decoder of the sweep, `max_len` tokens an example, named as
  the bench names it: 'greedy' (k = 1), 'k=4 top-k:2 l=2', 'k=4 tree=2,2'
  (widths), 'k=5 tree:32' (a `decoding.Tree` of 32 nodes), 'ancestral
  temperature=0.7', 'k=4 temperature=0.7', 'k=8 lookup:heads=tree'."""
  spec = DecoderSpec.of(max_len, k, criterion, min_block, sampler=sampler,
                        tree=tree, drafter=drafter)
  return dataclasses.replace(spec, name=spec.name.removeprefix('blockwise '))


def sweep(ks: Sequence[int], criteria: Sequence[str] = ('exact',),
          min_blocks: Sequence[int] = (1,),
          tuning: auto_k.AutoK | None = None, samplers: Sequence[str] = (),
          trees: Sequence[str] = (), drafters: Sequence[str] = (), *,
          max_len: int) -> list[DecoderSpec | AutoSpec]:
  """Every setting decodes `max_len` tokens an example. Greedy first
  (the reference), every blockwise combination (k > 1), the trees (widths
  specs; 'dynamic:N' at every k deep enough to draft N nodes) with
  exact verification, the
  drafters that need no training at every k (exact), then where a tuning
  is given its trees (`AutoK.trees`, the most probable of each size) at
  their depth and k='auto'; then per sampler its ancestral sampling (that
  sampler's reference), blockwise sampling at every k > 1 with each
  criterion sampling takes, and the trees under sampling."""
  for spec in criteria:
    decoding.from_spec(spec)  # A bad spec fails here, before any work.
  for spec in samplers:
    decoding.Sampler.from_spec(spec)
  ks = [k for k in ks if k > 1]  # Greedy decoding is the first setting.
  setting_ = functools.partial(setting, max_len)
  settings = [setting_()]
  settings += [setting_(k, criterion, min_block)
               for criterion in criteria for min_block in min_blocks
               for k in ks if min_block <= k]
  # A bad tree spec fails here too.
  decodes_at = {tree: tree_ks(tree, ks) for tree in trees}
  for tree in trees:
    if not decodes_at[tree]:
      raise ValueError(f'tree {tree!r}: no k of {tuple(ks)} is deep '
                       f'enough for it.')
    settings += [setting_(k, tree=tree) for k in decodes_at[tree]]
  settings += [setting_(k, drafter=drafter) for drafter in drafters
               for k in ks]
  if tuning is not None:
    settings += [setting_(tree.depth + 1, tree=tree)
                 for tree in (*tuning.trees, *tuning.dynamic_trees)]
    settings.append(AutoSpec(tuning, max_len))
  for sampler in samplers:
    settings.append(setting_(sampler=sampler))
    settings += [setting_(k, criterion, sampler=sampler)
                 for criterion in criteria for k in ks
                 if criterion.split(':')[0] in SAMPLING_CRITERIA]
    # Trees under sampling (recursive rejection sampling).
    settings += [setting_(k, sampler=sampler, tree=tree)
                 for tree in trees for k in decodes_at[tree]]
  return settings


@dataclasses.dataclass(frozen=True)
class Plan:
  """The bench's flags, read and checked (`parse`).

  Attributes:
    max_len: most tokens generated per example (eval.max_len).
    ks, criteria, min_blocks, samplers, trees, drafters: the sweep
      (`sweep`).
    batch_sizes: the batch sizes timed.
    tree_sizes: nodes of the most probable trees: rows of their own and
      candidates of k='auto'.
    dynamic_sizes: nodes of dynamic trees at the largest k, candidates of
      k='auto' (and rows of their own).
    examples: eval sentences decoded per setting.
    repeats: timed rounds per setting.
    calibration_examples: training sources k='auto' is tuned on (0: no
      auto setting).
    output_dir: where the reports go (None: WORKDIR/bench).
    sharding_table: also the rule sets' table (`sharded.table`).
    ngram_path: the n-gram model 'ngram' drafters read ('' : none).
  """
  max_len: int
  ks: list[int]
  criteria: list[str]
  min_blocks: list[int]
  samplers: list[str]
  trees: list[str]
  batch_sizes: list[int]
  tree_sizes: list[int]
  examples: int
  repeats: int
  calibration_examples: int
  output_dir: str | None
  sharding_table: bool = False
  drafters: list[str] = dataclasses.field(default_factory=list)
  ngram_path: str = ''
  dynamic_sizes: list[int] = dataclasses.field(default_factory=list)

  def settings(self, tuning: auto_k.AutoK | None = None) -> list:
    """The sweep, with k='auto' where `tuning` is given."""
    return sweep(self.ks, self.criteria, self.min_blocks, tuning=tuning,
                 samplers=self.samplers, trees=self.trees,
                 drafters=self.drafters, max_len=self.max_len)

  def ngram(self, vocab_size: int) -> ngram_lib.NgramModel | None:
    """The n-gram model 'ngram' drafters read (None: none), checked
    against the model's `vocab_size` (errors.DataError: another)."""
    if not self.ngram_path:
      return None
    return ngram_lib.NgramModel.load(self.ngram_path, vocab_size, '--ngram')

  def tune(self, decoder, task) -> auto_k.AutoK | None:
    """k='auto''s tuning on the first calibration_examples training
    sources (not the timed ones); None without them."""
    if not self.calibration_examples:
      return None
    max_source_len = decoder.config.max_source_len
    calibration, _ = task.sources('train', max_source_len,
                                  self.calibration_examples)
    print(f'Tuning k=auto on {len(calibration)} training sources...',
          flush=True)
    return auto_k.tune_k(
        decoder, batching.pad_rows(calibration, max_source_len,
                                   pad_id=decoder.config.pad_id),
        max_len=self.max_len, candidates=self.ks,
        tree_sizes=self.tree_sizes, dynamic_sizes=self.dynamic_sizes)

  def batches(self, sources, max_source_len: int, pad_id: int) -> dict:
    """{batch size: [(inputs [batch, length], real rows)]} of `sources`,
    padded with pad_id (the model's)."""
    return {b: list(batching.eval_batches(sources, b, max_source_len,
                                          pad_id=pad_id))
            for b in self.batch_sizes}


def parse(config) -> Plan:
  """The flags as a Plan (--quick applied), every setting checked against
  the config's model before any work; raises app.UsageError."""
  tasks.require_kind(config, ('text', 'lm'), job='bench')
  extras.require()  # bench.png, drawn at the end: checked before any work.
  heads = config.model.num_proposal_heads
  ks = _ints('ks', _KS.value or list(config.eval.ks))
  if max(ks) > heads:
    raise app.UsageError(f'--ks={ks} exceed the model\'s {heads} heads.')
  values = dict(
      max_len=config.eval.max_len, ks=ks, criteria=list(_CRITERIA.value),
      min_blocks=_ints('min_blocks', _MIN_BLOCKS.value),
      samplers=list(_SAMPLERS.value or config.eval.samplers),
      trees=list(_TREES.value or config.eval.get('trees', ())),
      batch_sizes=_ints('batch_sizes', _BATCH_SIZES.value),
      tree_sizes=(_ints('tree_sizes', _TREE_SIZES.value, low=2)
                  if _TREE_SIZES.value else []),
      dynamic_sizes=(_ints('dynamic_sizes', _DYNAMIC_SIZES.value, low=2)
                     if _DYNAMIC_SIZES.value else []),
      examples=_EXAMPLES.value, repeats=_REPEATS.value,
      calibration_examples=_CALIBRATION.value, output_dir=_OUTPUT_DIR.value,
      sharding_table=_SHARDING_TABLE.value,
      drafters=list(_DRAFTERS.value or config.eval.drafters),
      ngram_path=(config.eval.ngram_path if _NGRAM.value is None
                  else _NGRAM.value))
  if _QUICK.value:
    values.update(_quick(values))
  plan = Plan(**values)
  for name in ('tree_sizes', 'dynamic_sizes'):
    if getattr(plan, name) and not plan.calibration_examples:
      raise app.UsageError(f'--{name} are measured on the calibration '
                           f'sources: they need '
                           f'--calibration_examples > 0.')
  for size in plan.dynamic_sizes:  # tune_k's trees, checked before it tunes.
    try:
      decoding.DynamicTree(size, heads - 1)
    except ValueError as error:
      raise app.UsageError(f'--dynamic_sizes: {error}') from None
  try:  # tune_k's rule, checked before it tunes.
    tree_lib.check_sizes(plan.tree_sizes, auto_k.TREE_TOP_T, heads - 1)
  except ValueError as error:
    raise app.UsageError(f'--tree_sizes: {error}') from None
  for spec in plan.settings():  # Samplers and criteria checked together.
    spec.options.check(
        heads, 2**31, drafters.dependent(config.model.head_layer))
  if any(d.startswith('ngram') for d in plan.drafters) and (
      not plan.ngram_path):
    raise app.UsageError(f"--drafter={plan.drafters}: an 'ngram' drafter "
                         f'reads an n-gram model: give --ngram=FILE (the '
                         f"drafts job's OUTPUT_DIR/ngram.npz).")
  if plan.ngram_path and not os.path.isfile(plan.ngram_path):
    raise app.UsageError(f'--ngram={plan.ngram_path}: no such file.')
  return plan


def _quick(values: dict) -> dict:
  """--quick's values of the flags not given explicitly."""
  quick = dict(batch_sizes=[1, 8],
               ks=sorted({min(values['ks']), max(values['ks'])}),
               criteria=['exact'], min_blocks=[1], examples=16, repeats=1,
               calibration_examples=min(values['calibration_examples'], 16))
  flag_names = dict(batch_sizes=_BATCH_SIZES, ks=_KS, criteria=_CRITERIA,
                    min_blocks=_MIN_BLOCKS, examples=_EXAMPLES,
                    repeats=_REPEATS, calibration_examples=_CALIBRATION)
  return {name: value for name, value in quick.items()
          if not flags.FLAGS[flag_names[name].name].present}


def _ints(name, values, low=1):
  try:
    out = [int(v) for v in values]
  except ValueError as error:
    raise app.UsageError(f'--{name}: {error}') from error
  if not out or min(out) < low:
    raise app.UsageError(f'--{name}={values} must be integers >= {low}.')
  return out
