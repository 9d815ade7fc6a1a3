"""A code language model with blockwise heads, on Python's own library.

    python -m bpd_jax.main --config=configs/lm_demo.py --workdir=/tmp/bpd_lm

On the 'python_source' task (bpd_jax/tasks/lm/python_source.py: the
standard library's source, split by file, no download) this trains a
2 000-piece SentencePiece vocabulary that keeps code's whitespace, a small
decoder-only Transformer and 8 sequential proposal heads together from the
start, then reports the validation perplexity and decodes validation
prompts (the first 32 tokens of held-out 128-token examples) greedily and
blockwise for k = 2, 4, 6, 8, 64 tokens each at batch size 1: mean
accepted block, model calls, wall-clock, speedup and the fraction of
continuations identical to greedy. About a quarter of an hour on a 2-core
CPU.

Options (`--config=configs/lm_demo.py:quick,heads=independent`):

    quick            a short run that shows the pipeline, not the quality
    heads=TYPE       the head layer: sequential (default), or the paper's
                     independent or joint heads, autoregressive (a draft
                     layer), or block (the whole draft in one pass from
                     the base's features, DFlash)
    k=K              proposal heads (default 8): decoding may use any
                     k up to K
    root=DIR         another directory of Python code instead of the
                     standard library
    init_from=DIR    start from that run's model and vocabulary
    distilled=DIR    train on the model's own continuations (python -m
                     bpd_jax.distill): the paper's sequence-level
                     distillation
    base=frozen      with init_from: train only new heads on that run's
                     base, which stays bit-identical (default finetuned:
                     the base trains with its heads)
    with_heads       with init_from: start from that run's trained heads
                     too, not new ones (a drafter trained on the frozen
                     base, then fine-tuned with it)
    features=I+J     the draft layer or the block drafter also reads
                     these lower layers' outputs (EAGLE-3, DFlash; the
                     block drafter's default: layer 0, 'top': none)
    block_layers=L   the block drafter's layers (default 1)
    correction=token
                     the corrected block drafter's correction reads only
                     the proposal before each head, not also the corrected
                     state before it (default recurrent: more tokens per
                     call at the same cost)
    targets=base     heads 2..k learn the base's own distribution at each
                     position, what exact verification accepts (default
                     data)
    inputs=own       the dependent heads read their own drafts in
                     training, as when decoding (default data)
    prompt=N         evaluation prompts of N tokens (default 32), each
                     continued for 128 where lookup drafting has context
                     to find (drafter='lookup', eval.drafters); training
                     examples of N + 128 tokens and the positions to
                     match, 2,048 tokens a batch

Drafting among the N most frequent ids of the training targets (a
cheaper projection per draft, the same output; docs/guide/heads.md), on
any trained run: --config.eval.draft_vocab_size=N.

Distillation, on a trained run $RUNS/lm:

    python -m bpd_jax.distill --config=configs/lm_demo.py --workdir=$RUNS/lm \
        --output_dir=$RUNS/lm_distilled
    python -m bpd_jax.main --config=configs/lm_demo.py:init_from=$RUNS/lm,distilled=$RUNS/lm_distilled \
        --workdir=$RUNS/lm_on_distilled

Results (head types, trees, distillation, the bench, the draft analysis):
docs/results/code_lm.md. Fields not set here keep configs/base.py's value
(documented there).
"""

from bpd_jax.infra import config_options
from bpd_jax.infra import workdir
from bpd_jax.models import drafters

base = config_options.sibling(__file__, 'base')

BASES = ('frozen', 'finetuned')


def get_config(arg=None):
  options = config_options.parse(arg, quick=False, heads='sequential', k=8,
                                 root='', init_from='', distilled='',
                                 base='finetuned',
                                 with_heads=False, features='',
                                 block_layers=1, correction='',
                                 targets='data', inputs='data', prompt=32)
  config_options.check_choice(options, 'base', BASES)
  frozen = options['base'] == 'frozen'
  for option, given in (('base=frozen', frozen),
                        ('with_heads', options['with_heads'])):
    if given and not options['init_from']:
      raise ValueError(f'config option {option} reads a trained run: give '
                       f'init_from=DIR.')
  config_options.check_choice(options, 'heads', drafters.NAMES)
  if options['k'] < 2:
    raise ValueError(f'config option k={options["k"]} must be >= 2.')
  prompt = options['prompt']
  if prompt < 1:
    raise ValueError(f'config option prompt={prompt} must be >= 1.')
  long_prompts = prompt != 32
  if long_prompts and options['distilled']:
    raise ValueError(f'config option prompt={prompt} with distilled=: the '
                     f'distilled corpus holds 32-token prompts; use one or '
                     f'the other.')
  # An example: its prompt, then what the model continues (the training
  # length: 128 tokens by default, N + 128 with long prompts).
  example_len = prompt + 128 if long_prompts else 128
  quick = options['quick']
  config = base.get_config()

  task = config.task
  task.name = 'python_source'  # The standard library's source, by file.
  task.root = options['root']  # Directory of *.py files ('': the stdlib's).
  task.train_files = 60 if quick else 0  # First N training files (0: all).
  task.vocab_size = 2_000  # SentencePiece pieces, special ids included.
  # An existing vocabulary ('': WORKDIR/vocab.model, trained on first run).
  task.vocab_path = (workdir.run_vocabulary(options['init_from'])
                     if options['init_from'] else '')
  # A corpus of the model's own continuations (python -m bpd_jax.distill).
  task.distilled = options['distilled']
  task.vocab_lines = 200_000  # Lines of code the vocabulary learns from.
  task.max_source_len = prompt  # Tokens of an evaluation prompt.
  task.max_target_len = example_len  # Tokens of an example: the training length.

  model = config.model
  model.size = 'tiny'  # models/transformer_config.py SIZES, overridden below.
  model.num_encoder_layers = 0  # Decoder-only: a language model.
  model.num_decoder_layers = 2  # Decoder depth.
  model.d_model = 128  # Width of every layer.
  model.d_ff = 512  # Feed-forward hidden width.
  model.num_heads = 4  # Attention heads.
  model.dropout_rate = 0.0  # Training only; none: faster steps.
  model.max_source_len = prompt + 1  # Input width: the start token and a prompt.
  # Positions: a training example (after its prompt, on a distilled
  # corpus), or a decode (a long prompt, 128 tokens and a block).
  model.max_target_len = (example_len + options['k'] if long_prompts
                          else 160 if options['distilled'] else 128)
  model.num_proposal_heads = options['k']  # Decoding may use any k up to it.
  # The drafter (default sequential: heads read the last proposal), the
  # lower layers it reads, a block drafter's layers (configs/base.py).
  base.drafter(config, options['heads'], options['features'],
               options['block_layers'], options['correction'])

  train = config.train
  train.batch_size = max(1, 2_048 // example_len)  # Examples a step (16 of 128 tokens).
  # One phase: the base and its heads trained together from the start.
  train.base_steps = 0  # No base-only phase.
  train.head_steps = 100 if quick else 1500  # Phase 'heads': base + heads.
  train.init_from = options['init_from']  # A trained run to start from.
  train.init_heads = options['with_heads']  # Its heads too (or new ones).
  # The whole model trains (frozen: only new heads, on init_from's base).
  train.freeze_base = frozen
  # Head 1's share of the loss (0: 1/k); a frozen base's head 1 is fixed.
  train.head1_weight = 0.0 if frozen else 0.5
  train.head_targets = options['targets']  # See configs/base.py.
  train.draft_inputs = options['inputs']  # See configs/base.py.
  # Heads 2..8 learn from half of each row's positions (the draft layer:
  # all of them, it attends over every position).
  train.head_position_fraction = (1.0 if options['heads'] == 'autoregressive'
                                  else 0.5)
  train.label_smoothing = 0.0  # Perplexity is of the plain likelihood.
  train.learning_rate = 3e-3  # Peak learning rate, reached after warm-up.
  train.warmup_steps = 30 if quick else 150  # Linear warm-up, then the decay.
  train.schedule = 'linear'  # To zero at the end of the phase.
  train.log_every = 25 if quick else 100  # Steps between progress lines.

  ev = config.eval
  ev.num_examples = 20 if quick else 100  # Prompts decoded (0: all).
  ev.max_len = 128 if long_prompts else 64  # Tokens generated per prompt.
  # Blockwise block sizes compared with greedy.
  ev.ks = tuple(k for k in (2, 4, 6, 8, 12, 16) if k <= options['k'])
  ev.criteria = ('exact',)  # Verification: exact returns greedy's output.
  ev.periodic_examples = 20  # Prompts decoded by periodic evaluations.
  # Draft analysis and refinement (Kim et al. 2024): python -m bpd_jax.drafts.
  config.drafts = base.drafts_config(num_examples=20 if quick else 100,
                                     lm_steps=100 if quick else 1000)
  # The rescorers learn from the continuations of this many training
  # examples (~1M tokens of the ~29,000: a smaller trigram model, built fast).
  config.drafts.corpus_limit = 1_000 if quick else 10_000
  if drafters.dependent(options['heads']):
    # Refinement's lattice is of independent heads: the analysis only.
    config.drafts.refinements = ()
  return config
