"""The README's main job: train a translator, then its blockwise heads.

    python -m bpd_jax.main --config=configs/demo.py --workdir=/tmp/bpd_demo

On the built-in translation task (bpd_jax/tasks/text/embedded.py: an
English-like to German-like language pair with reordering and agreement,
generated, no download) this trains a small Transformer (phase 'base', 500
steps), then 8 proposal heads with the whole model fine-tuned (phase 'heads', 1,000
steps; head 1 keeps half the loss so the base keeps its quality), then
decodes the 500 validation sentences greedily and blockwise for k = 2, 4,
6, 8 at batch size 1 and prints the table: BLEU, mean accepted block size,
model calls, wall-clock, speedup and the fraction of outputs identical to
greedy.

Expected on a 2-core CPU (measured from a clean clone, idle machine): BLEU
100 for every decoder, identical_to_greedy 1.0, mean accepted block 1.77 /
2.83 / 3.50 / 4.04 for k = 2 / 4 / 6 / 8, 5.9-7.0 minutes end to end (two
runs an hour apart: the machine's speed drifts by 20%; 5.1-5.8 a day earlier
with the rsqrt decay). Measured on such machines, one run each (BLEU, k=8
block, minutes):

  1,500 + 2,000 steps, lr 2e-3, dropout 0.1, batches of 64 pairs padded to
    24 tokens (earlier settings): 99.95, 4.14, 9.5;
  500 + 1,000 steps, rsqrt decay, 64 pairs padded to 24: 99.1, 3.99, 6.6;
  the same with the length buckets: 99.8, 4.01, 5.1;
  400 + 800 with the buckets, rsqrt: 99.6, 3.84, 4.9; linear (this
    config's decay): 99.7-99.9, 3.91-3.93, 5.4 (on the slower day);
  400 + 800, linear, d_ff 256 and head_hidden 128: 99.5, 3.71, 4.5;
  300 + 700, linear: 99.0, 3.68; 250 + 750 at lr 8e-3: 95.1, 3.13;
  batches of 512 tokens, 600 + 1,200 steps: 98.5, 3.39.

So k=8 blocks of 4 take about this many steps; the 4 minutes a fixed cost
would allow are not reached. Where the time goes: a 3 + 3-step run of this
config takes 71 s (start-up ~5 s; 6 compiles of the train step, 3 bucket
shapes in each phase, ~40 s; 5 decoders compiled and run over 500
sentences, ~25 s), and a heads step costs 2x a base step (224 vs 113 ms on
64 x 16 tokens): the heads' layer ~55 ms, the vocabulary projections of
heads 2..8 ~30 ms. Batching the heads' product over a leading head axis
took the layer alone to 41 ms but no whole step measurably faster.

Dropout is off: the generated corpus is far from memorised in two epochs,
and a step without it is ~10% faster. The random-head loss
(`train.random_head`) costs 1.7x a base step (196 ms against the mean's 224:
every head's layer still runs) and trains each of heads 2..8 one step in
14: per head trained, the mean is the cheaper loss here. With
`train.freeze_base=True` the base stays bit-identical but the heads reach
only 1.41 / 1.48 / 1.48 / 1.48 (measured with 2,500 + 1,500 steps at the
previous settings), as the paper also found for frozen bases.

Options (`--config=configs/demo.py:quick`): quick (a one-minute run that
shows the pipeline, not the quality); distilled=DIR (train on a corpus
written by `python -m bpd_jax.distill ... --output_dir=DIR`, the paper's
sequence-level distillation). Any field can be overridden, e.g.
`--config.train.head_steps=3000 --config.eval.ks=(4,8)`. Fields not set
here keep configs/base.py's value (documented there).
"""

from bpd_jax import config_options

base = config_options.sibling(__file__, 'base')


def get_config(arg=None):
  options = config_options.parse(arg, quick=False, distilled='')
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
  model.size = 'tiny'  # Starting sizes (models/transformer.py), overridden below.
  model.d_model = 128  # Width of every layer.
  model.d_ff = 512  # Feed-forward hidden width.
  model.num_heads = 4  # Attention heads.
  model.num_encoder_layers = 2  # Encoder depth.
  model.num_decoder_layers = 2  # Decoder depth.
  model.dropout_rate = 0.0  # Training only; none: faster steps, no loss here.
  model.max_source_len = 32  # Longest source the encoder takes (eval sources too).
  model.max_target_len = 48  # Decoder positions: eval.max_len + k must fit.
  model.num_proposal_heads = 8  # k heads; decoding may use any k up to this.

  train = config.train
  train.batch_size = 64  # Unused: tokens_per_batch sets the batches.
  # Batches of ~1,024 target tokens bucketed by length (85 pairs of <= 12
  # tokens, 64 of <= 16 or 42 of <= 24): sentences average 11.6 tokens, so
  # padding every batch to 24 spent half of each step on padding.
  train.tokens_per_batch = 1024
  train.bucket_lengths = (12, 16, 24)  # Padded lengths of the buckets.
  train.base_steps = 100 if quick else 500  # Phase 'base': the whole model.
  train.head_steps = 50 if quick else 1000  # Phase 'heads': heads (+ base).
  train.freeze_base = False  # Fine-tune all (the paper's longer blocks); True: frozen.
  train.head1_weight = 0.5  # Head 1's share of a fine-tuning loss (0: 1/k).
  train.learning_rate = 5e-3  # Peak learning rate, reached after warm-up.
  train.warmup_steps = 150  # Linear warm-up (each phase), then the decay.
  # Decay to zero at the end of each phase: at 400 + 800 steps k=8 blocks of
  # 3.93 against the paper's rsqrt decay's 3.84.
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
  return config
