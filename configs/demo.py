"""The README's main job: train a translator, then its blockwise heads.

    python -m bpd_jax.main --config=configs/demo.py --workdir=/tmp/bpd_demo

On the built-in translation task (bpd_jax/data/embedded.py: an English-like
to German-like language pair with reordering and agreement, generated, no
download) this trains a small Transformer (phase 'base', 500 steps), then
8 proposal heads with the whole model fine-tuned (phase 'heads', 1,000
steps; head 1 keeps half the loss so the base keeps its quality), then
decodes the 500 validation sentences greedily and blockwise for k = 2, 4,
6, 8 at batch size 1 and prints the table: BLEU, mean accepted block size,
model calls, wall-clock, speedup and the fraction of outputs identical to
greedy.

Expected (measured on a shared 2-core CPU): BLEU 99.1 for every decoder,
identical_to_greedy 1.0, mean accepted block 1.76 / 2.81 / 3.47 / 3.99 for
k = 2 / 4 / 6 / 8; 10 minutes end to end on that machine under a load of
~4, about 4 idle (scaled from the previous settings' idle 9.5). A heads step costs 1.8x a base step (XLA: 18.2 vs 9.9
GFLOP: 8 heads' layers and vocabulary projections), so the heads phase is
two thirds of the time. The previous 1,500 + 2,000 steps at learning rate
2e-3 with dropout 0.1 gave BLEU 99.95 and 1.77 / 2.86 / 3.54 / 4.14 in 2.2x
the training compute; at 3e-3 (warm-up 200), 600 + 900 steps gave BLEU 99.4
and 3.84 at k = 8, 600 + 1,200 steps 99.1 and 4.00.
Dropout is off: the generated corpus is far from being memorised in two
epochs, and a step without it is ~10% faster. The random-head loss
(`train.random_head`) costs 1.4x a base step (every head's layer still runs)
and trains each of heads 2..8 one step in 14: per head trained, the mean
is the cheaper loss here. With `train.freeze_base=True` the base stays
bit-identical but the heads reach only 1.41 / 1.48 / 1.48 / 1.48 (measured
with 2,500 + 1,500 steps at the previous settings), as the paper also
found for frozen bases.

Options (`--config=configs/demo.py:quick`): quick (a one-minute run that
shows the pipeline, not the quality); distilled=DIR (train on a corpus
written by `python -m bpd_jax.distill ... --output_dir=DIR`, the paper's
sequence-level distillation). Any field can be overridden, e.g.
`--config.train.head_steps=3000 --config.eval.ks=(4,8)`.
"""

import ml_collections

from bpd_jax import config_options


def get_config(arg=None):
  options = config_options.parse(arg, quick=False, distilled='')
  quick = options['quick']
  config = ml_collections.ConfigDict()
  config.seed = 0  # Seed of the weights, data order, dropout and head draws.

  config.task = task = ml_collections.ConfigDict()
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

  config.model = model = ml_collections.ConfigDict()
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
  model.head_layer = 'independent'  # 'independent' heads or the paper's 'joint' layer.
  model.head_hidden = 256  # Hidden width of one head's layer.
  model.head1_from_base = True  # Head 1 is the base model's own output.

  config.train = train = ml_collections.ConfigDict()
  train.batch_size = 64  # Sentence pairs a step, over all devices.
  train.base_steps = 100 if quick else 500  # Phase 'base': the whole model.
  train.head_steps = 50 if quick else 1000  # Phase 'heads': heads (+ base).
  train.freeze_base = False  # Fine-tune all (the paper's longer blocks); True: frozen.
  train.head1_weight = 0.5  # Head 1's share of a fine-tuning loss (0: 1/k).
  train.random_head = False  # One random head a step (True) or the mean of all.
  train.init_from = ''  # Workdir of a trained base to start the heads from.
  train.learning_rate = 5e-3  # Peak learning rate, reached after warm-up.
  train.warmup_steps = 150  # Linear warm-up, then 1/sqrt(step) decay (each phase).
  train.label_smoothing = 0.1  # As in the paper.
  train.clip_norm = 1.0  # Global gradient norm clip (0: none).
  train.grad_accum_steps = 1  # Micro-batches accumulated per update.
  train.log_every = 50 if quick else 100  # Steps between progress lines.
  train.checkpoint_every = 1000  # Steps between checkpoints (and at phase ends).
  train.keep_checkpoints = 2  # Newest checkpoints kept.

  config.mesh = mesh = ml_collections.ConfigDict()
  mesh.shape = (-1,)  # Devices per mesh axis; -1: all the remaining ones.
  mesh.axes = ('data',)  # Mesh axis names.
  mesh.data_axis = 'data'  # The axis the batch is split along.
  mesh.param_rules = ()  # (regex on param path, spec) pairs; none: replicated.

  config.eval = ev = ml_collections.ConfigDict()
  ev.split = 'validation'  # Split decoded by evaluation.
  ev.num_examples = 100 if quick else 0  # First N sentences (0: all).
  ev.batch_size = 1  # Sentences decoded together (1: latency, as the paper).
  ev.max_len = 32  # Most tokens generated per sentence.
  ev.ks = (2, 4, 6, 8)  # Blockwise block sizes compared with greedy.
  ev.criterion = 'exact'  # 'exact', 'top-k:T' or 'distance:EPS'.
  ev.min_block = 1  # Fewest tokens accepted per call (<= the smallest k).
  ev.every = 0  # Steps between evaluations during training (0: none).
  ev.periodic_examples = 100  # Sentences decoded by those evaluations.
  ev.after_training = True  # The main job evaluates when training ends.
  # Draft analysis and refinement (Kim et al. 2024): python -m bpd_jax.drafts.
  config.drafts = dr = ml_collections.ConfigDict()
  dr.ks = (4, 8)  # Block sizes analysed, and compared plain vs refined.
  dr.num_examples = 50 if quick else 200  # First N eval sentences analysed and decoded (0: all).
  dr.batch_size = 1  # Sentences decoded together in the timed comparison.
  dr.repeats = 3  # Interleaved timed rounds; the median is reported.
  dr.top_ts = (1, 2, 3, 5, 10)  # t of the oracle top-t block efficiency.
  # Refinements compared with plain drafts: 'RESCORER:p=P,t=T,w=W', RESCORER
  # none (heads' scores alone), ngram or neural; p drafts verified per call,
  # t tokens per head, w the rescorer's weight (bpd_jax/drafts/checks.py).
  dr.refinements = ('none:p=4,t=2', 'ngram:p=1,t=4,w=0.2',
                    'ngram:p=4,t=4,w=0.2', 'neural:p=1,t=4,w=0.2')
  dr.corpus = 'targets'  # Rescorers' text: training targets, or a file (e.g. a distilled train.tgt).
  dr.corpus_limit = 0  # Sentences of it used (0: all).
  dr.ngram_order = 3  # n of the Kneser-Ney n-gram model.
  dr.lm_window = 8  # Output tokens the neural rescorer reads before a draft.
  dr.lm_d_model = 64  # Width of the neural rescorer (a decoder-only Transformer).
  dr.lm_layers = 2  # Its depth.
  dr.lm_steps = 100 if quick else 1500  # Its training steps (batch 256 windows).
  return config
