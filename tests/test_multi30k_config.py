"""configs/multi30k.py: the frozen default and the recipe's options."""

import itertools

import pytest

from bpd_jax import config_checks

from train_configs import load_config


def test_every_option_combination_builds_and_passes_the_checks():
  checked = 0
  for init, base, heads, distilled in itertools.product(
      ('', '/runs/base'), ('frozen', 'finetuned'),
      ('independent', 'joint', 'sequential', 'autoregressive'),
      ('', '/runs/distilled')):
    config = load_config('multi30k', f'init_from={init},base={base},'
                         f'heads={heads},distilled={distilled}')
    config_checks.check(config)
    assert config.model.head_layer == heads
    # Dependent heads take no refinement: the draft job analyses them only.
    assert (not config.drafts.refinements) == (
        heads in ('sequential', 'autoregressive'))
    assert config.train.freeze_base == (base == 'frozen')
    # Fine-tuning keeps half the loss on head 1 (the base's own output).
    assert config.train.head1_weight == (0.0 if base == 'frozen' else 0.5)
    assert (config.train.base_steps == 0) == bool(init)
    assert config.train.init_from == init
    assert config.task.vocab_path == (f'{init}/vocab.model' if init else '')
    if distilled:
      assert config.task.data_dir == distilled
      assert (config.task.source_lang, config.task.target_lang) == ('src',
                                                                    'tgt')
      # bpd_jax.distill copies the validation split under its own name:
      # BLEU is against the real references.
      assert config.task.splits.validation == 'validation'
    else:
      assert config.task.splits.validation == 'val'
    checked += 1
  assert checked == 32


def test_default_is_the_frozen_independent_run():
  config = load_config('multi30k')
  assert (config.model.head_layer, config.train.freeze_base,
          config.train.base_steps) == ('independent', True, 3_000)


@pytest.mark.parametrize('arg,message', [
    ('base=melted', "base='melted' is not one of"),
    ('heads=tree', "heads='tree' is not one of"),
    ('beam=4', "unknown config option 'beam'"),
    ('with_heads', "with_heads starts from a trained run's heads: give "
     'init_from'),
    ('heads=block_corrected,correction=chain',
     r"correction='chain' is not one of \('token', 'recurrent'\)"),
    ('heads=block,correction=recurrent', "correction='recurrent' is the "
     "corrected block drafter's: give heads=block_corrected"),
    ('heads=independent,correction=token', "correction='token' is the "
     "corrected block drafter's: give heads=block_corrected"),
])
def test_bad_options(arg, message):
  with pytest.raises(ValueError, match=message):
    load_config('multi30k', arg)


def test_drafter_options_reach_the_model_and_the_loss():
  config = load_config('multi30k', 'init_from=/runs/base,heads=autoregressive,'
                       'source=base,features=0,targets=base,inputs=own')
  config_checks.check(config)
  assert config.model.draft_source == 'base'
  assert config.model.draft_feature_layers == (0,)
  assert (config.train.head_targets, config.train.draft_inputs) == ('base',
                                                                    'own')
  # The corrected block drafter's correction is recurrent unless told
  # otherwise; no other drafter has one.
  for correction, recurrent in (('', True), (',correction=recurrent', True),
                                (',correction=token', False)):
    corrected = load_config('multi30k', 'init_from=/runs/base,source=base,'
                            'heads=block_corrected' + correction)
    config_checks.check(corrected)
    assert corrected.model.correction_recurrent == recurrent
  assert not config.model.correction_recurrent
  # The source and the lower layers are the draft layer's; own drafts are
  # read only by heads that read drafts.
  for arg, message in (('heads=sequential,source=own', "draft_source='own': "
                        "head_layer='sequential' reads no source"),
                       ('heads=independent,inputs=own', "draft_inputs='own': "
                        "head_layer='independent' heads read no"),
                       ('heads=autoregressive,targets=teacher',
                        "head_targets='teacher' is not one of"),
                       ('heads=autoregressive,features=1',
                        r'draft_feature_layers=\(1,\) must be')):
    with pytest.raises(ValueError, match=message):
      config_checks.check(load_config('multi30k', f'init_from=/r,{arg}'))


def test_a_frozen_base_drafter_fine_tuned_with_its_base():
  config = load_config('multi30k', 'init_from=/runs/ar,with_heads,'
                       'base=finetuned,heads=autoregressive,source=base')
  config_checks.check(config)
  assert config.train.init_heads and not config.train.freeze_base
  assert not load_config('multi30k', 'init_from=/runs/ar').train.init_heads
