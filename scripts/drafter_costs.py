"""What one decoding call costs with each drafter, side by side, at a
model's shape: T(k) and T(k) / T(1).

    python scripts/drafter_costs.py --output_dir=/tmp/drafter_costs
    python scripts/drafter_costs.py --shapes=llama-3.2-1b --ks=1,2,4,8 --output_dir=/tmp/drafter_costs_1b

For each shape (SHAPES: the code LM's and Multi30k's models of
configs/lm_demo.py and configs/multi30k.py, SmolLM2-135M's and
Llama-3.2-1B's decoder-only Llama-family pieces; random weights in
float32) and each drafter of --drafters, a model with that drafter and k =
max(--ks) heads; T(k) is the seconds of one call of block size k as the
decoding loop makes it (the base scoring k positions, head 1 at all of
them, the drafter's whole draft of heads 2..k: its serial steps, its cache
writes; `bpd_jax.bench.step_costs`), at batch 1 with --prompt_len tokens
of prompt and --max_len generated at most. A shape's drafters share its
base weights (one seed); every (drafter, k) is measured once a round,
the drafters' order rotated each round, over --rounds rounds, and its
fastest round kept: the machine's drifts fall on every drafter alike.
T(1), greedy's call, is one program whatever the drafter: every row's is
the fastest of all of them. The row 'verification' (in --drafters by
default) is the call without a draft, the base scoring k positions and
head 1 at all of them: no drafter's call costs less, so tokens per call
over its T(k)/T(1) bound any drafter's speedup at that k.
--draft_vocab_size=N drafts among N ids (a
drafting vocabulary, `generate.Decoder`'s draft_vocab: the proposals'
projection reads N rows of the vocabulary, not all).

On the default device (an accelerator where there is one).
Outputs: drafter_costs.json (every figure, the settings, the machine) and
drafter_costs.md (a table per shape: T(1) ms and T(k) / T(1) of each
drafter) in --output_dir.
"""

import gc
import os
import platform

from absl import app
from absl import flags
import jax
import numpy as np
import tabulate
from flax import nnx

from bpd_jax.bench import step_costs
from bpd_jax.infra import atomic_files
from bpd_jax.models import Transformer, TransformerConfig
from bpd_jax.models import drafters

# TransformerConfig fields of each shape (the drafters' own fields apart).
LLAMA = dict(num_encoder_layers=0, norm='rms', feed_forward='gated',
             activation='silu', positions='rotary', qkv_bias=False,
             out_bias=False, ffn_bias=False, scale_embeddings=False,
             layer_norm_epsilon=1e-5, pre_norm=True)
SHAPES = {
    # configs/lm_demo.py: a 2,000-piece vocabulary, decoder-only.
    'code_lm': dict(vocab_size=2_000, d_model=128, d_ff=512, num_heads=4,
                    num_encoder_layers=0, num_decoder_layers=2,
                    head_hidden=256),
    # configs/multi30k.py: a 4k vocabulary, 2 + 2 layers.
    'multi30k': dict(vocab_size=4_000, d_model=256, d_ff=512, num_heads=4,
                     num_encoder_layers=2, num_decoder_layers=2,
                     head_hidden=256),
    'smollm2-135m': dict(vocab_size=49_152, d_model=576, d_ff=1_536,
                         num_heads=9, num_kv_heads=3, head_dim=64,
                         num_decoder_layers=30, rope_theta=100_000.0,
                         head_hidden=576, **LLAMA),
    'llama-3.2-1b': dict(vocab_size=128_256, d_model=2_048, d_ff=8_192,
                         num_heads=32, num_kv_heads=8, head_dim=64,
                         num_decoder_layers=16, rope_theta=500_000.0,
                         head_hidden=2_048, **LLAMA),
    'tiny': dict(vocab_size=64, d_model=32, d_ff=64, num_heads=4,
                 num_encoder_layers=1, num_decoder_layers=2,
                 head_hidden=32),
}
DRAFTERS = ('independent', 'autoregressive', 'block', 'block_corrected')
# Not a drafter: a call without its draft (the base scoring k positions and
# head 1 at all of them), the floor of every drafter's T(k).
VERIFICATION = 'verification'


def config_of(shape: str, drafter: str, k: int, prompt_len: int,
              max_len: int) -> TransformerConfig:
  """The float32 model of the shape with `drafter`'s k heads. An
  encoder-decoder's draft layer and block drafter read the source through
  the base's keys and values; the block drafter reads the base's lowest
  and middle decoder layers beside the top and its correction is recurrent
  (configs/base.py's `drafter`), the draft layer the top alone (as its
  measured runs)."""
  fields = dict(SHAPES[shape])
  below_top = fields['num_decoder_layers'] - 1
  block = drafter in ('block', 'block_corrected')
  features = ()
  if block:
    features = tuple(sorted({0, (below_top - 1) // 2} & set(range(below_top))))
  reads_source = block or drafter == 'autoregressive'
  source = 'base' if reads_source and fields['num_encoder_layers'] else 'none'
  config = TransformerConfig(
      **fields, num_proposal_heads=k, head_layer=drafter,
      draft_feature_layers=features, draft_source=source, dropout_rate=0.0,
      correction_recurrent=drafter == 'block_corrected',
      max_source_len=prompt_len + 1, max_target_len=prompt_len + max_len + k)
  return config


def check_draft_vocab_size(shape: str, size: int):
  """Raises ValueError unless 0 <= size <= the shape's vocabulary."""
  vocab_size = SHAPES[shape]['vocab_size']
  if not 0 <= size <= vocab_size:
    raise ValueError(f'draft_vocab_size={size} must be in [0, '
                     f'{vocab_size}] (the {shape} vocabulary).')


def measure(shape: str, names, ks, rounds: int, prompt_len: int,
            max_len: int, progress=print,
            draft_vocab_size: int = 0) -> list[dict]:
  """One row per drafter of `names`: T(1) ms and T(k) / T(1) for each k
  (the fastest of `rounds` interleaved rounds), drafting among the first
  `draft_vocab_size` ids (0: all; the cost is the same whichever ids)."""
  check_draft_vocab_size(shape, draft_vocab_size)
  draft_ids = (np.arange(draft_vocab_size, dtype=np.int32)
               if draft_vocab_size else None)
  best = {(d, k): float('inf') for d in names for k in ks}
  for round_ in range(rounds):
    shift = round_ % len(names)
    for drafter in names[shift:] + names[:shift]:
      verification = drafter == VERIFICATION
      model = Transformer(config_of(
          shape, 'independent' if verification else drafter, max(ks),
          prompt_len, max_len), rngs=nnx.Rngs(0))
      costs = step_costs.measure_all(model, ks, draft_ids,
                                     draft=not verification, batch_size=1,
                                     source_len=prompt_len, max_len=max_len,
                                     repeats=1)
      for k, seconds in costs.items():
        best[drafter, k] = min(best[drafter, k], seconds)
      progress(f'{shape} round {round_ + 1}: {drafter} ' + ' '.join(
          f'T({k})={1000 * best[drafter, k]:.2f}ms' for k in ks))
      del model
      gc.collect()
      jax.clear_caches()
  # T(1) is greedy's call: the base alone, one compiled program whatever
  # the drafter (its weights unread at k = 1). Its fastest measurement over
  # every drafter's rounds is each row's T(1), so that a drafter's ratio
  # carries the noise of its own T(k) only, not that of a second T(1).
  t1 = min(best[drafter, 1] for drafter in names)
  rows = []
  for drafter in names:
    row = dict(shape=shape, drafter=drafter, t1_ms=1000.0 * t1)
    row.update({f'T({k})/T(1)': best[drafter, k] / t1 for k in ks if k > 1})
    rows.append(row)
  return rows


def _define_flags():
  """The CLI's flags, defined only when run as a program (as the other
  scripts': a test imports several of them into one process)."""
  flags.DEFINE_list('shapes', ['code_lm', 'multi30k'],
                    f'Shapes to measure, of {sorted(SHAPES)}.')
  flags.DEFINE_list('drafters', [*DRAFTERS, VERIFICATION],
                    f'Drafters (model.head_layer names), and '
                    f'{VERIFICATION!r}: the call without a draft.')
  flags.DEFINE_list('ks', ['1', '2', '4', '8'],
                    'Block sizes; 1 (greedy) is always measured.')
  flags.DEFINE_integer('rounds', 2, 'Interleaved rounds.')
  flags.DEFINE_integer('prompt_len', 32, 'Prompt (or source) tokens.')
  flags.DEFINE_integer('max_len', 64, 'Tokens a decode generates at most '
                       '(the cache size).')
  flags.DEFINE_integer('draft_vocab_size', 0, 'Draft among this many '
                       'ids (a drafting vocabulary); 0: the whole '
                       'vocabulary.', lower_bound=0)
  flags.DEFINE_string('output_dir', None, 'Where the report goes.')
  flags.mark_flags_as_required(['output_dir'])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  options = flags.FLAGS
  unknown = sorted(set(options.shapes) - set(SHAPES))
  if unknown:
    raise app.UsageError(f'--shapes: {unknown} not of {sorted(SHAPES)}.')
  known = (*drafters.NAMES, VERIFICATION)
  unknown = sorted(set(options.drafters) - set(known))
  if unknown:
    raise app.UsageError(f'--drafters: {unknown} not of {known}.')
  if not all(k.isdigit() and int(k) >= 1 for k in options.ks):
    raise app.UsageError(f'--ks={",".join(options.ks)}: block sizes are '
                         'integers >= 1.')
  ks = sorted({1, *(int(k) for k in options.ks)})
  for shape in options.shapes:  # Every shape's, before any measurement.
    try:
      check_draft_vocab_size(shape, options.draft_vocab_size)
    except ValueError as error:
      raise app.UsageError(f'--{error}') from None
  settings = dict(shapes=options.shapes, drafters=options.drafters, ks=ks,
                  rounds=options.rounds, prompt_len=options.prompt_len,
                  max_len=options.max_len,
                  draft_vocab_size=options.draft_vocab_size)
  rows = []
  for shape in options.shapes:
    rows += measure(shape, options.drafters, ks, options.rounds,
                    options.prompt_len, options.max_len,
                    draft_vocab_size=options.draft_vocab_size)
  report = dict(settings=settings, rows=rows,
                machine=dict(cpu=platform.processor() or platform.machine(),
                             cores=os.cpu_count(),
                             device=jax.devices()[0].device_kind,
                             jax=jax.__version__))
  os.makedirs(options.output_dir, exist_ok=True)
  atomic_files.write_json(os.path.join(options.output_dir,
                                       'drafter_costs.json'), report,
                          indent=2)
  tables = []
  for shape in options.shapes:
    shown = [{key: value for key, value in row.items() if key != 'shape'}
             for row in rows if row['shape'] == shape]
    tables.append(f'## {shape}\n\n' + tabulate.tabulate(
        shown, headers='keys', tablefmt='github', floatfmt='.2f'))
  text = '\n\n'.join(tables) + '\n'
  atomic_files.write_text(os.path.join(options.output_dir,
                                       'drafter_costs.md'), text)
  print(text)


if __name__ == '__main__':
  _define_flags()
  app.run(main)
