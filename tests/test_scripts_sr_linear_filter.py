"""scripts/sr_linear_filter.py: the filter's PSNR beside bicubic's, on a
few hundred crops."""

import sys

import pytest

from train_configs import load_script

sr_linear_filter = load_script('sr_linear_filter')


def test_it_prints_bicubic_and_each_window_on_both_photos(monkeypatch,
                                                           capsys):
  monkeypatch.setattr(sr_linear_filter, 'TRAIN_CROPS', 300)
  monkeypatch.setattr(sys, 'argv', ['sr_linear_filter.py', '--windows=1,3',
                                    '--examples=4'])
  sr_linear_filter.main()
  lines = capsys.readouterr().out.splitlines()
  assert lines[0].startswith('4 validation images: bicubic PSNR')
  assert lines[1].startswith('  linear filter, window 1: PSNR')
  assert lines[3].startswith('4 test images: bicubic PSNR')
  assert len(lines) == 6 and all(line.endswith(' dB') for line in lines)


def test_a_bad_window_is_refused(monkeypatch):
  monkeypatch.setattr(sys, 'argv', ['sr_linear_filter.py', '--windows=2'])
  with pytest.raises(SystemExit):
    sr_linear_filter.main()
