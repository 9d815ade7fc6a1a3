"""The main job: a small translator and its blockwise heads, on a built-in task.

    python -m bpd_jax.main --config=configs/demo.py --workdir=/tmp/bpd_demo

On the built-in translation task (bpd_jax/tasks/text/embedded.py: an
English-like to German-like language pair with reordering and agreement,
generated, no download) this trains a small Transformer (2+2 layers,
d_model 128) and 8 sequential proposal heads together from the start (one
phase; head 1, the model's own output, keeps half the loss so the
translator keeps its quality; heads 2..8 learn from half the positions),
then decodes the 500 validation sentences greedily and blockwise for
k = 2, 4, 6, 8 at batch size 1 and prints the table: BLEU, mean accepted
block size, model calls, wall-clock, speedup and the fraction of outputs
identical to greedy. A few minutes on a 2-core CPU.

Options (`--config=configs/demo.py:quick,heads=independent`):

    quick            a one-minute run that shows the pipeline, not the
                     quality
    heads=TYPE       the head layer: sequential (default), or the paper's
                     independent or joint heads, autoregressive or block
                     (models/drafters/); the draft job's refinements need
                     one-pass heads (independent, joint, block)
    distilled=DIR    train on a corpus written by `python -m
                     bpd_jax.distill ... --output_dir=DIR` (the paper's
                     sequence-level distillation)

Any field can be overridden, e.g. `--config.train.head_steps=3000
--config.eval.ks=(4,8)`. Results: docs/results/demo.md (with how these
settings were chosen). Fields not set here keep configs/base.py's value
(documented there).
"""

from bpd_jax.infra import config_options
from bpd_jax.models import drafters

base = config_options.sibling(__file__, 'base')


def get_config(arg=None):
  options = config_options.parse(arg, quick=False, heads='sequential',
                                 distilled='')
  config_options.check_choice(options, 'heads', drafters.NAMES)
  quick = options['quick']
  config = base.get_config()

  task = config.task
  task.name = 'embedded'  # The built-in generated translation task.
  task.sizes = dict(train=50_000, validation=500, test=1_000)  # Pairs a split.
  if options['distilled']:
    task.name = 'parallel_text'  # Aligned text files, here the distilled ones.
    task.data_dir = options['distilled']  # Where {split}.src / .tgt lie.
    task.source_lang = 'src'  # File suffix of the source sentences.
    task.target_lang = 'tgt'  # File suffix of the target sentences.
    task.splits = dict(train='train', validation='validation')  # Split: stem.
    task.train_limit = 0  # Read at most this many training pairs (0: all).
    task.vocab_type = 'words'  # The task's words, as the embedded task has.
    task.vocab_size = 0  # Unused with a word vocabulary.
  task.max_source_len = 24  # Longest training source, in tokens with eos.
  task.max_target_len = 24  # Longest training target, in tokens with eos.

  model = config.model
  model.size = 'tiny'  # models/transformer_config.py SIZES, overridden below.
  model.d_model = 128  # Width of every layer.
  model.d_ff = 512  # Feed-forward hidden width.
  model.num_heads = 4  # Attention heads.
  model.num_encoder_layers = 2  # Encoder depth.
  model.num_decoder_layers = 2  # Decoder depth.
  model.dropout_rate = 0.0  # Training only; none: faster steps, no loss here.
  model.max_source_len = 32  # Longest source the encoder takes (eval sources too).
  model.max_target_len = 48  # Decoder positions: eval.max_len + k must fit.
  model.num_proposal_heads = 8  # k heads; decoding may use any k up to this.
  # Heads that read the previous head's proposed token (default;
  # models/drafters/): longer blocks than the paper's independent heads
  # for the same steps.
  base.drafter(config, options['heads'])

  train = config.train
  # Batches of ~1,024 target tokens bucketed by length (85 pairs of <= 12
  # tokens, 64 of <= 16 or 42 of <= 24): sentences average 11.6 tokens, so
  # padding every batch to 24 spent half of each step on padding.
  train.tokens_per_batch = 1024
  train.bucket_lengths = (12, 16, 24)  # Padded lengths of the buckets.
  # One phase: the base and its heads trained together from the start.
  train.base_steps = 0  # No base-only phase.
  train.head_steps = 150 if quick else 1000  # Phase 'heads': base + heads.
  train.freeze_base = False  # The whole model trains (the paper's longer blocks).
  train.head1_weight = 0.5  # Head 1's share of the loss (0: 1/k).
  # Heads 2..8 learn from half of each row's positions: a step costs ~1.45x
  # a base step instead of ~2x, for slightly shorter blocks per step (the
  # draft layer attends over every position: all of them).
  train.head_position_fraction = (1.0 if options['heads'] == 'autoregressive'
                                  else 0.5)
  train.learning_rate = 5e-3  # Peak learning rate, reached after warm-up.
  train.warmup_steps = 50 if quick else 150  # Linear warm-up, then the decay.
  # Decay to zero at the end of the phase: at 400 + 800 steps (paper heads,
  # two phases) k=8 blocks of 3.93 against the paper's rsqrt decay's 3.84.
  train.schedule = 'linear'
  train.log_every = 50 if quick else 100  # Steps between progress lines.

  ev = config.eval
  ev.num_examples = 100 if quick else 0  # First N sentences (0: all).
  ev.max_len = 32  # Most tokens generated per sentence.
  ev.ks = (2, 4, 6, 8)  # Blockwise block sizes compared with greedy.
  ev.criteria = ('exact',)  # Verification: exact returns greedy's output.
  ev.periodic_examples = 100  # Sentences decoded by those evaluations.
  # Draft analysis and refinement (Kim et al. 2024): python -m bpd_jax.drafts.
  config.drafts = base.drafts_config(num_examples=50 if quick else 200,
                                     lm_steps=100 if quick else 1500)
  if drafters.dependent(options['heads']):
    # Refinement's lattice is of independent heads: the analysis only.
    config.drafts.refinements = ()
  return config
