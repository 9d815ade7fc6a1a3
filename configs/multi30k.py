"""Multi30k English->German: the same pipeline on real text.

    python -m bpd_jax.main --config=configs/multi30k.py --workdir=/tmp/bpd_m30k

Reads the plain-text corpus in ../shared/data/multi30k (train.en/.de: 29,000
pairs; val.en/.de: 1,014), trains a 4k SentencePiece vocabulary on the
training text (saved as WORKDIR/vocab.model), a 2+2-layer Transformer (phase
'base'), then 8 proposal heads on the frozen base (phase 'heads'), and
compares greedy and blockwise decoding on the validation split. Under an
hour on a 2-core CPU.

Options (`--config=configs/multi30k.py:data_dir=/path,quick`):

    data_dir=DIR     the corpus directory
    quick            a short run that checks the setup
    init_from=DIR    train only the heads, on the base of the run in DIR
                     (base_steps=0; its vocabulary is reused)
    base=finetuned   fine-tune the whole model with the heads, head 1
                     keeping half the loss (default frozen: the base stays
                     bit-identical)
    with_heads       with init_from: start from that run's trained heads
                     too, not new ones (a drafter trained on the frozen
                     base, then fine-tuned with it: base=finetuned)
    heads=TYPE       the head layer: independent (default), joint,
                     sequential (heads that read the previous head's
                     token), autoregressive (a draft layer with its own
                     cache), block (the whole draft in one pass, DFlash's)
                     or block_corrected (that, then a small step a head)
    source=SOURCE    the draft layer or the block drafter attends to the
                     source: none (default), base (through the base's top
                     decoder layer's source keys and values) or own (the
                     draft layer's own projection of the encoder output)
    features=I+J     the draft layer or the block drafter also reads these
                     lower decoder layers' outputs (0-based; '' the top
                     only, the block drafter's default layer 0; 'top' the
                     top only)
    block_layers=L   the block drafter's layers (default 1)
    correction=token
                     the corrected block drafter's correction reads only
                     the proposal before each head, not also the corrected
                     state before it (default recurrent: more tokens per
                     call at the same cost)
    targets=data     what heads 2..k learn: data (the references) or base
                     (the base's own distribution at each position, what
                     exact verification accepts)
    inputs=data      what the dependent heads read as the earlier drafts:
                     data (teacher forcing) or own (their own drafts)
    distilled=DIR    train on a distilled corpus (python -m bpd_jax.distill
                     writes DIR/train.src/.tgt and copies the validation
                     split: BLEU is still against the real references)

Drafting among the N most frequent ids of the training targets (a
cheaper projection per draft, the same output; docs/guide/heads.md), on
any trained run: --config.eval.draft_vocab_size=N.

The paper's recipe (sequence-level distillation, then fine-tuning) and the
other head types, on a trained base in $RUNS/base:

    python -m bpd_jax.distill --config=configs/multi30k.py --workdir=$RUNS/base \
        --output_dir=$RUNS/distilled
    python -m bpd_jax.main --config=configs/multi30k.py:init_from=$RUNS/base,distilled=$RUNS/distilled,base=finetuned \
        --workdir=$RUNS/distilled_finetuned
    python -m bpd_jax.main --config=configs/multi30k.py:init_from=$RUNS/base,heads=sequential \
        --workdir=$RUNS/sequential
    python -m bpd_jax.main --config=configs/multi30k.py:init_from=$RUNS/base,heads=autoregressive,source=base,targets=base \
        --workdir=$RUNS/draft_layer_source

Results, with every setting's command: docs/results/multi30k.md. Fields not
set here keep configs/base.py's value (documented there).
"""

from bpd_jax.infra import config_options
from bpd_jax.infra import workdir
from bpd_jax.models import drafters

base = config_options.sibling(__file__, 'base')

BASES = ('frozen', 'finetuned')


def get_config(arg=None):
  options = config_options.parse(
      arg, data_dir='../shared/data/multi30k', quick=False, init_from='',
      base='frozen', heads='independent', distilled='', source='none',
      features='', block_layers=1, correction='', targets='data',
      inputs='data', with_heads=False)
  quick, init_from = options['quick'], options['init_from']
  if options['with_heads'] and not init_from:
    raise ValueError('config option with_heads starts from a trained run\'s '
                     'heads: give init_from=DIR.')
  config_options.check_choice(options, 'base', BASES)
  config_options.check_choice(options, 'heads', drafters.NAMES)
  config = base.get_config()

  task = config.task
  task.name = 'parallel_text'  # Aligned plain-text files.
  task.data_dir = options['data_dir']  # Directory of {stem}.{lang} files.
  task.source_lang = 'en'  # Source file suffix.
  task.target_lang = 'de'  # Target file suffix.
  task.splits = dict(train='train', validation='val')  # Split name: file stem.
  task.train_limit = 2_000 if quick else 0  # Training pairs read (0: all).
  task.vocab_type = 'sentencepiece'  # Subwords trained on the training text.
  task.vocab_size = 1_000 if quick else 4_000  # Shared source/target pieces.
  # An existing vocabulary (the base run's with init_from); '':
  # WORKDIR/vocab.model, trained on the first run.
  task.vocab_path = workdir.run_vocabulary(init_from) if init_from else ''
  if options['distilled']:
    task.data_dir = options['distilled']  # Written by bpd_jax.distill.
    task.source_lang = 'src'  # Source file suffix.
    task.target_lang = 'tgt'  # Target file suffix.
    # The distilled training split; validation keeps the real references.
    task.splits = dict(train='train', validation='validation')
  task.max_source_len = 32  # Longest training source, in pieces with eos (99%).
  task.max_target_len = 32  # Longest training target, in pieces with eos (98%).

  model = config.model
  model.size = 'small'  # d_model 256, 4 attention heads; overridden below.
  model.d_ff = 512  # Feed-forward hidden width (2 cores: kept small).
  model.num_encoder_layers = 2  # Encoder depth.
  model.num_decoder_layers = 2  # Decoder depth.
  model.max_source_len = 96  # Longest source the encoder takes (eval too).
  model.max_target_len = 112  # Decoder positions: eval.max_len + k must fit.
  model.draft_source = options['source']  # See configs/base.py.
  # The drafter, the lower layers it reads, a block drafter's layers
  # (configs/base.py).
  base.drafter(config, options['heads'], options['features'],
               options['block_layers'], options['correction'])

  train = config.train
  train.batch_size = 64  # Sentence pairs a step, over all devices.
  # Phase 'base': the whole model (none when the heads go on init_from's).
  train.base_steps = 0 if init_from else (60 if quick else 3_000)
  train.head_steps = 20 if quick else 1_000  # Phase 'heads': the heads.
  train.init_from = init_from  # Workdir of the trained base ('': train it).
  train.init_heads = options['with_heads']  # Its heads too (or new ones).
  # Heads on a frozen base (False: fine-tune all).
  train.freeze_base = options['base'] == 'frozen'
  # Head 1's share of a fine-tuning loss (0: 1/k), so the base keeps its
  # quality while the heads learn.
  train.head1_weight = 0.0 if train.freeze_base else 0.5
  train.head_targets = options['targets']  # See configs/base.py.
  train.draft_inputs = options['inputs']  # See configs/base.py.
  train.learning_rate = 1e-3  # Peak learning rate, reached after warm-up.
  train.warmup_steps = 500  # Linear warm-up, then 1/sqrt(step) decay.
  train.log_every = 20 if quick else 250  # Steps between progress lines.

  ev = config.eval
  ev.num_examples = 50 if quick else 0  # First N sentences (0: all).
  ev.max_len = 96  # Most pieces generated per sentence.
  ev.criteria = ('exact',)  # Verification: exact returns greedy's output.
  # Draft analysis and refinement (Kim et al. 2024): python -m bpd_jax.drafts.
  config.drafts = base.drafts_config(num_examples=50 if quick else 300,
                                     lm_steps=100 if quick else 2000)
  if drafters.dependent(options['heads']):
    # Refinement's lattice is of independent heads: the analysis only.
    config.drafts.refinements = ()
  return config
