"""Every command the docs show still runs as written.

The commands of README.md, docs/**/*.md (fenced blocks, indented blocks and
inline code) and the configs' docstrings: for each `python -m bpd_jax.JOB`,
its flags are flags of that job (its --helpfull), its --config=FILE[:OPTIONS]
builds a config, each --config.SECTION.FIELD override names a field of it,
and it has no stray arguments; the scripts' (launch/, scripts/) flags are
theirs, a `launch/sweep.py` grid's options and fields are the config's, and
every script a command runs exists. Relative links resolve. Nothing is
trained or decoded: seconds, most of them the programs' help. The guide's
Python examples run too, in the slow suite.
"""

import ast
import functools
import glob
import os
import re
import shlex
import subprocess
import sys

import pytest

from bpd_jax import jobs

from train_configs import ROOT

# Config options that name a folder or file read when the config is built:
# committed files stand in for the docs' placeholders (a tiny checkpoint;
# a folder of text for any data).
READ_AT_BUILD = {'configs/hf_heads.py': (('model', 'tests/data/tiny_llama3'),
                                         ('data', 'tests/data/tiny_llama3'))}
SEPARATORS = ('&&', '||', ';', '|')
SWEEP = 'launch/sweep.py'  # Its config options and fields are checked too.
# A line that is a command (not a file tree or prose that names one): it
# starts with a program or an environment variable's value.
COMMAND = re.compile(r'\s*(python3? |pip |sbatch |\.?/?(launch|scripts)/|'
                     r'[A-Z_]+=\S* )')


def doc_texts() -> dict[str, str]:
  """{path: the text of its code}: a Markdown file's fenced blocks (but
  Python), indented blocks and inline code, one to a line; a config's
  docstring's indented lines."""
  texts = {}
  for path in ['README.md', *sorted(glob.glob('docs/**/*.md', root_dir=ROOT,
                                              recursive=True))]:
    with open(os.path.join(ROOT, path)) as f:
      markdown = f.read()
    fence = r'^```(\w*)\n(.*?)^```'
    blocks = [code for language, code in re.findall(fence, markdown,
                                                      re.S | re.M)
              if language != 'python']
    prose = re.sub(fence, '', markdown, flags=re.S | re.M)
    indented = re.findall(r'^ {4}.*(?:\\\n.*)*', prose, re.M)
    spans = [span.replace('\n', ' ')
             for span in re.findall(r'`([^`]+)`', prose)]
    texts[path] = '\n'.join(blocks + indented + spans)
  for path in sorted(glob.glob('configs/*.py', root_dir=ROOT)):
    with open(os.path.join(ROOT, path)) as f:
      docstring = ast.get_docstring(ast.parse(f.read())) or ''
    texts[path] = '\n'.join(re.findall(r'^ {4}.*', docstring, re.M))
  return texts


def commands(text: str) -> list[list[str]]:
  """The shell commands of a text, as argument lists (continued lines
  joined, comments and the parts of a pipeline apart)."""
  found = []
  for line in re.sub(r'\\\n\s*', ' ', text).splitlines():
    if not (COMMAND.match(line)
            and re.search(r'python -m bpd_jax\.|launch/|scripts/', line)):
      continue
    try:
      words = shlex.split(line, comments=True)
    except ValueError:  # Not shell: prose in a docstring.
      continue
    command = []
    for word in words + [SEPARATORS[0]]:
      if word not in SEPARATORS:
        command.append(word)
      elif command:
        found.append(command)
        command = []
  return found


def python_examples() -> list[tuple[str, str]]:
  """(PATH#N, code) of docs/**/*.md's Python blocks (the README's are
  tests/test_readme.py's, in the default suite)."""
  examples = []
  for path in sorted(glob.glob('docs/**/*.md', root_dir=ROOT,
                               recursive=True)):
    with open(os.path.join(ROOT, path)) as f:
      blocks = re.findall(r'^```python\n(.*?)^```', f.read(), re.S | re.M)
    examples += [(f'{path}#{i}', code) for i, code in enumerate(blocks)]
  return examples


def documented() -> list[tuple[str, list[str]]]:
  return [(path, command) for path, text in doc_texts().items()
          for command in commands(text)]


def program_of(command: list[str]) -> tuple[str, list[str]] | None:
  """(PROGRAM, its arguments) of a command that runs a job (`python -m
  bpd_jax.JOB`: 'bpd_jax.JOB') or a script of the repository ('launch/X.py',
  'scripts/X.py'), after a launcher or not; None for any other command."""
  for i, word in enumerate(command):
    if (re.fullmatch(r'python3?', word) and command[i + 1:i + 2] == ['-m']
        and command[i + 2:i + 3] and command[i + 2].startswith('bpd_jax.')):
      return command[i + 2], command[i + 3:]
    if re.fullmatch(r'(\./)?(launch|scripts)/\w+\.py', word):
      return word.removeprefix('./'), command[i + 1:]
  return None


@functools.cache
def program_flags() -> dict[str, dict[str, bool]]:
  """{program: {flag name: whether it takes a value}}, from each job's
  --helpfull (absl's flags too: --verbosity) and each script's --help,
  all run at once."""
  programs = sorted({program for program, arguments in filter(
      None, map(program_of, (c for _, c in documented()))) if arguments})
  helps = {program: subprocess.Popen(
      [sys.executable, *(['-m', program, '--helpfull']
                         if program.startswith('bpd_jax.') else
                         [program, '--help'])],
      cwd=ROOT, env={**os.environ, 'PYTHONPATH': ROOT},
      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
           for program in programs}
  flags = {}
  for program, process in helps.items():
    stdout, _ = process.communicate(timeout=300)  # absl exits with 1.
    names = {}
    # absl: '  -v,--verbosity: ...', '  --[no]quick: ...'; argparse:
    # '  --grid GRID  ...', '  --run  ...'.
    for short, negatable, name, value in re.findall(
        r'^\s+(?:-(\S),\s?)?--(\[no\])?(\w+)(:| [A-Z])?', stdout, re.M):
      takes_value = bool(value) and not negatable
      for spelling in {name, short, negatable and f'no{name}'} - {''}:
        names[spelling] = takes_value
    flags[program] = names
  return flags


@functools.cache
def config_of(value: str):
  """(the config of FILE[:OPTIONS], None), or (None, the one line a job
  prints for it: `jobs._load_config_file`'s)."""
  path, colon, options = value.partition(':')
  for option, stand_in in READ_AT_BUILD.get(path, ()):
    options = re.sub(rf'(^|,){option}=[^,]*',
                     rf'\g<1>{option}={os.path.join(ROOT, stand_in)}',
                     options)
  try:  # pylint: disable-next=protected-access
    return jobs._load_config_file(os.path.join(ROOT, path) + colon
                                  + options), None
  except ValueError as error:
    return None, str(error)


def field_error(config, field: str) -> str | None:
  """Why --config.FIELD names no field of `config`, or None."""
  node = config
  for part in field.split('.'):
    if not hasattr(node, 'keys') or part not in node:
      return f'no field {field!r}'
    node = node[part]
  return None


def flag_errors(program: str, arguments: list[str]) -> tuple[list, dict]:
  """(what PROGRAM would refuse among its ARGUMENTS: an unknown flag, a
  stray argument; {flag: value} of the others)."""
  if not arguments:  # A program named, not run.
    return [], {}
  if program not in program_flags():
    return [f'no program {program}'], {}
  flags = program_flags()[program]
  errors, given = [], {}
  words = iter(arguments)
  for word in words:
    if word == '...':  # Prose: "the other flags".
      continue
    if not word.startswith('-'):
      errors.append(f'stray argument {word!r}')
      continue
    name, has_value, value = word.lstrip('-').partition('=')
    if name.startswith('config.'):  # ml_collections' overrides.
      given[name] = value
    elif name not in flags:
      errors.append(f'no flag --{name}')
    else:
      if not has_value and flags[name]:
        value = next(words, '')  # --flag VALUE
      given[name] = value
  return errors, given


def job_errors(given: dict) -> list[str]:
  """What a job would refuse in its --config and --config.FIELD flags."""
  fields = [name[len('config.'):] for name in given
            if name.startswith('config.')]
  if 'config' not in given:
    return ['--config.FIELD without --config'] if fields else []
  config, error = config_of(given['config'])
  if error:
    return [error]
  return [e for e in (field_error(config, f) for f in fields) if e]


def sweep_errors(given: dict) -> list[str]:
  """What launch/sweep.py would refuse in its --config, --fixed options
  and --grid options (each value) and fields."""
  if 'config' not in given:  # A fragment: `sweep.py --launcher=...`.
    return []
  fields, runs = [], [[o for o in given.get('fixed', '').split(',') if o]]
  for item in given.get('grid', '').split():
    name, _, values = item.partition('=')
    if '.' in name:
      fields.append(name)
    else:
      runs = [run + [f'{name}={v}'] for run in runs
              for v in values.split(',')]
  errors = []
  for run in runs:
    config, error = config_of(f"{given['config']}:{','.join(run)}")
    if error:
      return [error]
    errors += [e for e in (field_error(config, f) for f in fields) if e]
  return errors


def command_errors(command: list[str]) -> list[str]:
  """What the programs of a documented command would refuse in it."""
  found = program_of(command)
  if not found:
    return []
  program, arguments = found
  errors, given = flag_errors(program, arguments)
  if program.startswith('bpd_jax.'):
    errors += job_errors(given)
  elif program == SWEEP:
    errors += sweep_errors(given)
  return errors


def test_the_docs_show_commands():
  shown = documented()
  assert len({path for path, _ in shown}) >= 10
  programs = {program_of(c)[0] for _, c in shown if program_of(c)}
  assert {'bpd_jax.main', 'bpd_jax.evaluate', 'bpd_jax.distill',
          'bpd_jax.bench', 'bpd_jax.drafts', SWEEP} <= programs


def test_every_documented_command_takes_its_flags_config_and_fields():
  wrong = [f'{path}: {shlex.join(command)}: {error}'
           for path, command in documented()
           for error in command_errors(command)]
  assert not wrong, '\n'.join(wrong)


# The flags each job's --help must list (its own, then jobs.py's shared
# --config and --workdir); checked on the helps read above, so no job
# starts twice for it.
JOB_FLAGS = {
    'main': ['config', 'workdir'],
    'evaluate': ['config', 'workdir'],
    'distill': ['config', 'workdir', 'output_dir'],
    'bench': ['config', 'workdir', 'init', 'output_dir', 'quick'],
    'drafts': ['config', 'workdir', 'init', 'output_dir'],
}


def test_every_jobs_help_lists_its_flags():
  flags = program_flags()
  for job, names in JOB_FLAGS.items():
    missing = set(names) - flags[f'bpd_jax.{job}'].keys()
    assert not missing, (job, missing)


def test_every_script_a_command_runs_exists():
  missing = [f'{path}: {word}' for path, command in documented()
             for word in command
             if re.fullmatch(r'(\./)?(launch|scripts)/[\w.]+\.(sh|py)', word)
             and not os.path.isfile(os.path.join(ROOT, word))]
  assert not missing, '\n'.join(missing)


def test_every_relative_link_resolves():
  broken = []
  for path in ['README.md', *glob.glob('docs/**/*.md', root_dir=ROOT,
                                       recursive=True)]:
    with open(os.path.join(ROOT, path)) as f:
      targets = re.findall(r'\]\(([^)#\s]+)[^)]*\)', f.read())
    broken += [f'{path}: {target}' for target in targets
               if '://' not in target and not os.path.exists(os.path.join(
                   ROOT, os.path.dirname(path), target))]
  assert not broken, '\n'.join(broken)


@pytest.mark.parametrize('command, wrong', [
    ('python -m bpd_jax.main --config=configs/demo.py --workdir=D --quick',
     'no flag --quick'),
    ('python -m bpd_jax.bench --config=configs/demo.py:quik --workdir=D',
     "unknown config option 'quik'"),
    ('python -m bpd_jax.main --config=configs/demo.py --workdir=D '
     '--config.train.base_step=5', "no field 'train.base_step'"),
    ('python -m bpd_jax.main --config=configs/demo.py --workdir D extra',
     "stray argument 'extra'"),
    ('python -m bpd_jax.mian --config=configs/demo.py', 'no program'),
    ("python launch/sweep.py --config=configs/wmt14_base.py --workdir=R "
     "--grid='k=2,4 base=frozen,tuned'", "base='tuned'"),
    ("python launch/sweep.py --config=configs/wmt14_base.py --workdir=R "
     "--grid='train.head_step=5'", "no field 'train.head_step'"),
    ("launch/sweep.py --config=configs/wmt14_base.py --workdir R --runs",
     'no flag --runs'),
])
def test_a_stale_command_is_named(command, wrong):
  errors = command_errors(shlex.split(command))
  assert any(wrong in error for error in errors), errors


def test_a_good_command_passes():
  assert not command_errors(shlex.split(
      "DEVICES=8 launch/local_mesh.sh python -m bpd_jax.main "
      "--config=configs/multi30k.py:init_from=$RUNS/base,heads=sequential "
      "--workdir $RUNS/s --config.eval.ks='(8,)' -v 1"))
  assert not command_errors(shlex.split(
      "launch/sweep.py --config=configs/wmt14_base.py --workdir=R "
      "--grid='k=2,4 train.head_steps=5' --fixed=data_dir=$DATA --run"))


# The workdirs the guide's Python examples open (bpd_jax.load_run), each
# the --workdir of a documented training command, and that command's
# config: the run is trained for them, shortened to 2 steps.
RUNS = {'/tmp/bpd_tiny_llama3': 'configs/hf_heads.py:model=tests/data/'
                                'tiny_llama3,data=bpd_jax,ext=.py,steps=2'}


@pytest.fixture(scope='module')
def trained_run(tmp_path_factory):
  """workdir -> a run trained as RUNS says, in a temporary folder."""
  made = {}

  def run_for(workdir: str) -> str:
    documented_workdirs = {arg.split('=', 1)[1] for _, command in
                           documented() for arg in command
                           if arg.startswith('--workdir=')}
    assert workdir in documented_workdirs, workdir
    if workdir not in made:
      made[workdir] = str(tmp_path_factory.mktemp('run'))
      done = subprocess.run(
          [sys.executable, '-m', 'bpd_jax.main', f'--config={RUNS[workdir]}',
           f'--workdir={made[workdir]}', '--config.eval.after_training=False'],
          cwd=ROOT, capture_output=True, text=True, timeout=600)
      assert done.returncode == 0, done.stderr[-3000:]
    return made[workdir]

  return run_for


@pytest.mark.slow  # Each compiles decoders: seconds to tens of seconds.
@pytest.mark.parametrize('name, code', python_examples(),
                         ids=[name for name, _ in python_examples()])
def test_every_python_example_of_the_guide_runs(name, code, monkeypatch,
                                                trained_run):
  monkeypatch.chdir(ROOT)  # Paths in the examples are the repository's.
  for workdir in RUNS:
    if workdir in code:
      code = code.replace(workdir, trained_run(workdir))
  exec(compile(code, name, 'exec'), {})  # pylint: disable=exec-used
