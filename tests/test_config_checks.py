"""Config checks: a bad field stops before any work, named with its value."""

import ml_collections
import numpy as np
import pytest

from bpd_jax import config_checks
from bpd_jax.models.transformer_config import SIZES

from train_configs import demo_config, load_config


def test_demo_configs_pass():
  config_checks.check(demo_config())
  config_checks.check(demo_config('quick'))
  config_checks.check(demo_config('distilled=/tmp/x'))
  for heads in ('independent', 'joint', 'sequential', 'autoregressive'):
    config = demo_config(f'heads={heads}')
    assert config.model.head_layer == heads
    config_checks.check(config)
    # The draft job's refinements read the paper's heads' lattice.
    assert bool(config.drafts.refinements) == (heads in ('independent',
                                                         'joint'))
  with pytest.raises(ValueError, match="config option heads='paper' is not "
                     'one of'):
    demo_config('heads=paper')


def test_a_config_at_every_limit_passes():
  """Each limit is inclusive; the bad fields below are one past it."""
  config = demo_config()
  assert max(config.eval.ks) == 8 and config.model.max_target_len == 48
  config.eval.update(max_len=40, min_block=2)  # 40 + 8 positions; min k.
  config.task.update(max_source_len=config.model.max_source_len,
                     max_target_len=config.model.max_target_len)
  config.train.bucket_lengths = (12, 16, 48)  # The last holds the longest.
  config_checks.check(config)
  config.eval.max_len = 41
  with pytest.raises(ValueError, match='needs 49 decoder positions'):
    config_checks.check(config)


@pytest.mark.parametrize('section,field,value,message', [
    ('train', 'batch_size', 0, 'train.batch_size=0 must be an integer >= 1'),
    ('eval', 'draft_vocab_size', -1, 'eval.draft_vocab_size=-1 must be an '
     'integer >= 0'),
    ('eval', 'perplexity_tokens', -1, r'^eval.perplexity_tokens=-1 must be '
     r'an integer >= 0\.$'),
    ('train', 'batch_size', True, 'train.batch_size=True must be an integer '
     '>= 1'),
    ('train', 'learning_rate', 0.0, r'train.learning_rate=0.0 must be a '
     r'finite number in \(0, 3.40282e\+38\]'),
    ('train', 'learning_rate', float('inf'), 'train.learning_rate=inf must be '
     'a finite number in'),
    ('train', 'learning_rate', float('nan'), 'train.learning_rate=nan must be '
     'a finite number in'),
    ('train', 'learning_rate', 1e39, r'train.learning_rate=1e\+39 must be a '
     r'finite number in \(0, 3.40282e\+38\]'),
    ('train', 'label_smoothing', 1.0, r'train.label_smoothing=1.0 must be a '
     r'finite number in \[0, 1\)'),
    ('train', 'clip_norm', -1.0, 'train.clip_norm=-1.0 must be a finite '
     'number >= 0'),
    ('train', 'clip_norm', float('inf'), 'train.clip_norm=inf must be a '
     'finite number >= 0'),
    ('train', 'head1_weight', 1.0, r'train.head1_weight=1.0 must be a finite '
     r'number in \[0, 1\)'),
    ('train', 'head1_weight', float('nan'), 'train.head1_weight=nan'),
    ('train', 'head_position_fraction', 0.0,
     r'train.head_position_fraction=0.0 must be a finite number in \(0, 1\]'),
    ('train', 'head_position_fraction', 1.5,
     r'train.head_position_fraction=1.5 must be a finite number in \(0, 1\]'),
    ('train', 'warmup_steps', 0, 'train.warmup_steps=0'),
    ('train', 'base_learning_rate_scale', 0.0,
     r'train.base_learning_rate_scale=0.0 must be a finite number in '
     r'\(0, 1\]'),
    ('train', 'input_dropout', float('-inf'), r'train.input_dropout=-inf must '
     r'be a finite number in \[0, 1\)'),
    ('train', 'schedule', 'cosine', "train.schedule='cosine' is not one of"),
    ('eval', 'ks', (2, 9), r'eval \(ks=\(2, 9\).*k=9 must be an integer in '
     r'\[1, 8\]'),
    ('eval', 'ks', (0, 2), r'eval.ks=\(0, 2\) must be distinct integers >= 1 '
     r'\(block sizes of the blockwise rows; greedy decoding is always '
     r'reported\)'),
    ('eval', 'ks', (True,), r'eval.ks=\(True,\) must be distinct integers'),
    ('eval', 'ks', (2, 2), r'eval.ks=\(2, 2\) must be distinct integers'),
    ('eval', 'max_len', True, 'eval.max_len=True must be an integer >= 1'),
    ('eval', 'min_block', True, r'min_block=True must be an integer in'),
    ('eval', 'min_block', 3, r'min_block=3 must be an integer in \[1, k=2\]'),
    ('eval', 'criteria', ('top3',), "criterion 'top3' is not"),
    ('eval', 'criteria', (), 'must be a non-empty tuple'),
    ('eval', 'max_len', 45, 'eval.max_len=45 with k up to 8 needs 53 decoder '
     'positions; model.max_target_len=48'),
    ('model', 'dropout_rate', 2.0, r'dropout_rate=2.0 must be a finite '
     r'number in \[0, 1\)'),
    ('model', 'size', 'huge', "unknown model size 'huge'"),
    ('task', 'name', 'wmt', "task.name='wmt' is not one of"),
    ('task', 'max_source_len', 1, 'task.max_source_len=1'),
    ('task', 'max_source_len', 40, 'task.max_source_len=40 exceeds '
     'model.max_source_len=32'),
    ('task', 'max_target_len', 49, 'task.max_target_len=49 exceeds '
     'model.max_target_len=48'),
    ('mesh', 'data_axis', 'rows', "mesh.data_axis='rows' is not one of"),
    ('mesh', 'shape', (2, 2), 'differ in length'),
    ('mesh', 'shape', (0,), r'mesh.shape=\(0,\) must be integers >= 1, one '
     r'of them -1 at most'),
    ('mesh', 'shape', (-1, -1), r'mesh.shape=\(-1, -1\) must be'),
    ('mesh', 'shape', (True,), r'mesh.shape=\(True,\) must be'),
    ('eval', 'samplers', ('temperature=-1',), r'eval.samplers: '
     r'temperature=-1.0 must be a finite number >= 0'),
    ('eval', 'samplers', ('heat=2',), "eval.samplers: sampler 'heat=2'"),
    ('eval', 'samplers', ('temperature=nan',), r'eval.samplers: '
     r'temperature=nan must be a finite number >= 0'),
    ('eval', 'criteria', ('distance:inf',), r"criterion 'distance:inf': "
     r'distance verification needs a finite eps >= 0, got eps=inf'),
    ('eval', 'drafters', ('lookup:min=0',), r"eval.drafters \('lookup:min=0' "
     r'at ks=\(.*\)\): lookup min=0 must be an integer >= 1'),
    ('eval', 'drafters', ('',), r"eval.drafters=\('',\): '' is the model's "
     'heads, whose rows eval.ks gives'),
    ('eval', 'drafters', ('ngram',), r"an 'ngram' drafter reads "
     r'eval.ngram_path, an n-gram model'),
    ('eval', 'ngram_path', '/no/such.npz', "eval.ngram_path='/no/such.npz' "
     'is not a file'),
    ('eval', 'ngram_path', __file__, f'{__file__} is not an n-gram model '
     'NgramModel.save wrote'),
    ('eval', 'trees', (5,), r"eval.trees \(5\): a tree is a spec string"),
    ('eval', 'trees', ('dynamic:x',), r"eval.trees \('dynamic:x'\): tree "
     "'dynamic:x' is not"),
    ('eval', 'trees', ('1,1,1,1,1,1,1,1',), r"eval.trees \('1,1,1,1,1,1,1,1'"
     r'\): no k of eval.ks=\(.*\) is deep enough'),
    ('eval', 'trees', ('dynamic:8,top=4,frontier=0',), 'frontier=0 must be '
     'an integer >= 1'),
])
def test_bad_fields(section, field, value, message):
  config = demo_config()
  config[section][field] = value
  with pytest.raises(ValueError, match=message):
    config_checks.check(config)


def test_a_model_larger_than_the_hosts_memory_is_refused(monkeypatch):
  config = demo_config()
  model = config.model  # 2 + 2 layers of 2 x d_model x d_ff >= 2 bytes.
  memory = 16 * model.d_model * model.d_ff
  monkeypatch.setattr(config_checks, 'host_memory_bytes', lambda: memory)
  config_checks.check(config)  # The floor is the memory itself: it fits.
  model.d_ff += 1  # A typo's zero is far more.
  with pytest.raises(ValueError, match=(
      rf'model.d_model=128, d_ff={model.d_ff} and 4 layers .* hold at least '
      r'.* billion parameters, .* GiB even in bfloat16: more than this '
      r"host's .* GiB of memory; check those fields\.")):
    config_checks.check(config)


@pytest.mark.parametrize('fields,message', [
    (dict(param_rules='megatron'), r"mesh.param_rules='megatron' is not one "
     r"of \('tensor', 'fsdp'\)"),
    (dict(param_rules='tensor'), r"mesh.param_rules='tensor' splits over a "
     r"'model' mesh axis; mesh.axes=\('data',\)"),
    (dict(param_rules='fsdp', axes=('rows',), data_axis='rows'),
     r"'fsdp' splits over a 'data' mesh axis"),
    (dict(param_rules=(('up', 'model'),)), r"entry \('up', 'model'\) is not "
     r"a \(regex, spec\) pair"),
    (dict(param_rules=(('up[', (None,)),)), r"mesh.param_rules regex 'up\['"),
    (dict(param_rules=(('up', (None, 'model')),)), r"names 'model', not one "
     r"of mesh.axes=\('data',\)"),
    (dict(param_rules='tensor', shape=(2, 4), axes=('data', 'model')),
     r"eval.batch_size=1 does not split over the 2 devices of the data axis, "
     r"and mesh.param_rules='tensor'"),
])
def test_bad_param_rules(fields, message):
  config = demo_config()
  config.mesh.update(fields)
  with pytest.raises(ValueError, match=message):
    config_checks.check(config)


def test_param_rules_that_fit_the_mesh_pass():
  for rules in ('tensor', 'fsdp', (('.*/ffn/up/kernel', (..., 'model')),)):
    config = demo_config()
    config.mesh.update(shape=(1, -1), axes=('data', 'model'),
                       param_rules=rules)
    config_checks.check(config)


@pytest.mark.parametrize('seed', [-1, 2**63, True])
def test_a_seed_numpy_and_jax_cannot_take_is_named(seed):
  config = demo_config()
  config.seed = seed
  with pytest.raises(ValueError, match=r'seed=.* must be an integer in '
                     r'\[0, 2\*\*63\)'):
    config_checks.check(config)


def test_numpy_numbers_are_numbers():
  # A value read from an array (a sweep's grid) is a number like any other.
  config = demo_config()
  config.eval.ks = (np.int64(2), 4)
  config_checks.check(config)


def test_acceptance_weighting_refuses_a_random_head():
  config = demo_config()
  config.train.acceptance_weighted = True
  config.train.head_position_fraction = 1.0  # Refused with random_head too.
  config_checks.check(config)  # The mean over all heads: served.
  config.train.random_head = True
  with pytest.raises(ValueError, match='acceptance_weighted=True with '
                     'train.random_head=True'):
    config_checks.check(config)


@pytest.mark.parametrize('fields,message', [
    (dict(train=dict(random_head=True)), 'with train.random_head=True: each '
     'cuts'),
    (dict(model=dict(head_layer='autoregressive')), "the 'autoregressive' "
     'drafter attends over every position'),
])
def test_sampled_head_positions_refuse_what_they_cannot_serve(fields,
                                                              message):
  config = demo_config()
  config.train.head_position_fraction = 0.5
  config_checks.check(config)  # Independent heads, the mean loss: served.
  for section, values in fields.items():
    config[section].update(values)
  with pytest.raises(ValueError, match=message):
    config_checks.check(config)
  config.train.head_position_fraction = 1.0
  config_checks.check(config)  # Every position: no sample, no conflict.


def test_a_block_drafter_samples_its_anchors_and_decays_its_heads():
  config = demo_config()
  config.model.head_layer = 'block'
  config.train.head_position_fraction = 0.25  # A block at a quarter of them.
  config.train.head_loss_decay = 4.0
  config_checks.check(config)
  for value in (-1.0, float('nan')):
    config.train.head_loss_decay = value
    with pytest.raises(ValueError, match='train.head_loss_decay'):
      config_checks.check(config)


def test_a_language_model_of_its_sizes_encoder_is_refused():
  """Without model.num_encoder_layers the depth is its size's (the
  model factory's rule), which the message names."""
  config = load_config('lm_demo')
  config_checks.check(config)
  del config.model['num_encoder_layers']
  depth = SIZES[config.model.size]['num_encoder_layers']
  with pytest.raises(ValueError, match=(
      rf'set model.num_encoder_layers=0 \(it is {depth}\)')):
    config_checks.check(config)


def test_missing_section():
  config = demo_config()
  del config['eval']
  with pytest.raises(ValueError, match="no 'eval' section"):
    config_checks.check(config)


def image_config(name='embedded_images', **task_fields):
  """The demo config on a super-resolution task, 8x8 from 4x4."""
  config = demo_config()
  config.task = ml_collections.ConfigDict(dict(
      name=name, high_res=8, low_res=4, max_source_len=48,
      max_target_len=192))
  if name == 'embedded_images':
    config.task.update(sizes=dict(train=100, validation=10),
                       scales=(1, 2))
  else:
    config.task.update(dataset='celeb_a', data_dir='/data/tfds',
                       splits=dict(train='train', test='test[:64]'),
                       mock_examples=0)
  config.task.update(task_fields)
  config.model.update(max_source_len=48, max_target_len=200)
  config.train.tokens_per_batch = 0  # Batches of train.batch_size images.
  config.eval.max_len = 192
  config.eval.grid_examples = 4
  config.eval.criteria = ('exact', 'distance:2')
  return config


def test_image_configs_pass():
  for name in ('embedded_images', 'tfds_images'):
    config = image_config(name)
    # The lengths the check derives: every intensity of the 4x4 and the
    # 8x8 image, 3 channels, no eos.
    assert (config.task.max_source_len, config.task.max_target_len) == (
        4 * 4 * 3, 8 * 8 * 3)
    config_checks.check(config)


def test_a_missing_field_is_named():
  config = image_config()
  del config.eval['grid_examples']
  with pytest.raises(ValueError, match='eval.grid_examples is missing'):
    config_checks.check(config)


@pytest.mark.parametrize('name,field,value,message', [
    ('embedded_images', 'low_res', 3, 'task.high_res=8 must be a multiple of '
     'task.low_res=3'),
    ('embedded_images', 'high_res', 0, 'task.high_res=0 must be an integer'),
    ('embedded_images', 'max_target_len', 193, r'task.max_target_len=193 '
     r'must be 192 \(8x8x3 intensities, no eos\)'),
    ('embedded_images', 'max_source_len', 40, 'task.max_source_len=40 must '
     'be 48'),
    ('embedded_images', 'sizes', dict(validation=3), 'must have a "train" '
     'entry'),
    ('embedded_images', 'sizes', dict(train=3, dev=3), 'only splits of'),
    ('embedded_images', 'sizes', dict(train=0), r"task.sizes\['train'\]=0 "
     'must be an integer >= 1'),
    ('embedded_images', 'scales', (1, 0), r'task.scales=\(1, 0\) must be'),
    ('embedded_images', 'scales', (1, True), r'task.scales=\(1, True\) must '
     r'be integers >= 1'),
    ('embedded_images', 'sizes', dict(train=True), r"task.sizes\['train'\]="
     'True must be an integer >= 1'),
    ('embedded_images', 'high_res', True, 'task.high_res=True must be an '
     'integer'),
    ('tfds_images', 'splits', dict(test='test'), 'needs a "train" entry'),
    ('tfds_images', 'dataset', '', "task.dataset='' must be a TFDS name"),
    ('tfds_images', 'mock_examples', -1, 'task.mock_examples=-1 must be an '
     'integer >= 0'),
    ('embedded_images', 'targets', 'deltas', "task.targets='deltas' is not "
     'one of'),
    ('tfds_images', 'targets', 'deltas', "task.targets='deltas' is not one "
     'of'),
])
def test_bad_image_task_fields(name, field, value, message):
  config = image_config(name)
  config.task[field] = value
  with pytest.raises(ValueError, match=message):
    config_checks.check(config)


def test_a_mixture_output_takes_no_label_smoothing():
  config = image_config()
  config.model.mixture_components = 3
  config.train.label_smoothing = 0.0
  config_checks.check(config)
  config.train.label_smoothing = 0.1
  with pytest.raises(ValueError, match=(
      r'train.label_smoothing=0.1 with a mixture output \(model.'
      r'mixture_components=3\): set it to 0.0')):
    config_checks.check(config)
  config.model.mixture_components = -1
  with pytest.raises(ValueError, match='mixture.components=-1 must be'):
    config_checks.check(config)


def test_a_mixture_output_takes_no_drafting_vocabulary():
  config = image_config()
  config.model.mixture_components = 3
  config.train.label_smoothing = 0.0
  config.eval.draft_vocab_size = 16
  with pytest.raises(ValueError, match=(
      r'eval.draft_vocab_size=16 with a mixture output \(model.'
      r'mixture_components=3\): its drafts have no vocabulary projection')):
    config_checks.check(config)


def test_a_base_learning_rate_scale_needs_a_fine_tuned_base():
  config = demo_config()
  config.train.base_learning_rate_scale = 0.4
  config_checks.check(config)  # The demo fine-tunes its base.
  config.train.freeze_base = True
  with pytest.raises(ValueError, match='base_learning_rate_scale=0.4 applies '
                     'only when the heads phase fine-tunes the base'):
    config_checks.check(config)


@pytest.mark.parametrize('fields,message', [
    (dict(train=dict(base_steps=0, head_steps=0)),
     'train.base_steps=0 and train.head_steps=0 must be >= 0 with a '
     'positive sum'),
    (dict(train=dict(base_steps=-1)), 'train.base_steps=-1 must be an '
     'integer >= 0'),
    (dict(train=dict(base_steps=0, head_steps=5, freeze_base=True)),
     'heads on a frozen base need a trained base: set train.init_from'),
    (dict(train=dict(init_heads=True)), 'train.init_heads=True starts the '
     'heads from a trained run: set train.init_from'),
    (dict(model=dict(num_proposal_heads=1), eval=dict(ks=(1,))),
     'train.head_steps=.* needs proposal heads: '
     'model.num_proposal_heads=1 must be >= 2'),
])
def test_a_phase_plan_that_cannot_run_is_named(fields, message):
  config = demo_config()
  for section, values in fields.items():
    config[section].update(values)
  with pytest.raises(ValueError, match=message):
    config_checks.check(config)


def test_phase_plans_that_run_pass():
  config = demo_config()
  # A base alone (k = 1), no heads phase.
  config.model.num_proposal_heads = 1
  config.eval.ks = (1,)
  config.train.update(base_steps=10, head_steps=0)
  config_checks.check(config)
  # Heads on a frozen base: one trained here, or another run's.
  config = demo_config()
  config.train.update(freeze_base=True, base_steps=10)
  config_checks.check(config)
  config.train.update(base_steps=0, init_from='/runs/base')
  config_checks.check(config)
  # Its heads too, fine-tuned with its base.
  config.train.update(init_heads=True, freeze_base=False)
  config_checks.check(config)
