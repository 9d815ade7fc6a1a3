"""Config-file options."""

import pytest

from bpd_jax.infra import config_options


def test_types_follow_defaults():
  options = config_options.parse('size=tiny,batch=4,shard=false,eps=0.5',
                                 size='small', batch=8, shard=True, eps=1.0)
  assert options == dict(size='tiny', batch=4, shard=False, eps=0.5)


def test_flag_without_value_and_empty_arg():
  assert config_options.parse('runlocal', runlocal=False) == {'runlocal': True}
  assert config_options.parse(None, k=4) == {'k': 4}


@pytest.mark.parametrize('arg,message', [
    ('depth=3', "unknown config option 'depth'; options: batch, eps, size"),
    ('batch=many', "config option batch='many' is not of type int"),
    ('batch', "config option 'batch' needs a value"),
    ('eps=nan', "config option eps='nan' is not a finite number"),
    ('eps=-inf', "config option eps='-inf' is not a finite number"),
])
def test_errors(arg, message):
  with pytest.raises(ValueError, match=message):
    config_options.parse(arg, size='small', batch=8, eps=0.5)


def test_sibling_loads_the_shared_base(tmp_path):
  (tmp_path / 'base.py').write_text('def get_config():\n  return 7\n')
  base = config_options.sibling(str(tmp_path / 'experiment.py'), 'base')
  assert base.get_config() == 7


def test_layers_option():
  assert config_options.layers('') == ()
  assert config_options.layers('0+2') == (0, 2)
  with pytest.raises(ValueError, match=r"'a\+1' is not layer numbers"):
    config_options.layers('a+1')
