"""The layers of docs/architecture.md: what each package may import.

Read from the source (`ast`), so that a rule is broken the moment an import
is written, whether or not a test runs that code.
"""

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / 'bpd_jax'

# The entry points: nothing in the package imports them.
ENTRY_POINTS = {'bpd_jax.main', 'bpd_jax.evaluate', 'bpd_jax.distill',
                'bpd_jax.bench.__main__', 'bpd_jax.drafts.__main__'}

# Package -> the project's top-level names it must not import.
FORBIDDEN = {
    'infra': {'auto_k', 'bench', 'config_checks', 'decoding', 'drafts',
              'evaluation', 'generate', 'jobs', 'models', 'predictions',
              'rescorers', 'tasks', 'timing', 'training'},
    'decoding': {'auto_k', 'evaluation', 'generate', 'jobs', 'models',
                 'predictions', 'tasks', 'timing', 'training'},
    'models': {'decoding', 'evaluation', 'jobs', 'tasks', 'training'},
    'tasks': {'decoding', 'evaluation', 'generate', 'jobs', 'models',
              'training'},
    'training': {'bench', 'drafts', 'evaluation', 'generate', 'jobs'},
}


def imports(path: pathlib.Path) -> set[str]:
  """The bpd_jax modules `path` imports, as dotted names ('bpd_jax.x.y')."""
  found = set()
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.ImportFrom) and (node.module or '').startswith(
        'bpd_jax'):
      found |= {f'{node.module}.{alias.name}' for alias in node.names}
      found.add(node.module)
    elif isinstance(node, ast.Import):
      found |= {a.name for a in node.names if a.name.startswith('bpd_jax')}
  return found


def module_name(path: pathlib.Path) -> str:
  parts = path.relative_to(PACKAGE.parent).with_suffix('').parts
  return '.'.join(parts).removesuffix('.__init__')


SOURCES = sorted(PACKAGE.rglob('*.py'))


# Module -> the project's modules it must not import: the decoding API
# decodes and never times (k='auto' is auto_k's, above it).
FORBIDDEN_MODULES = {
    'bpd_jax.generate': {'bpd_jax.auto_k', 'bpd_jax.timing'},
}

# decoding/'s ground floor: the values a decode is described by import no
# module that runs one.
DECODING_GROUND = {'types', 'criteria', 'tree', 'lattice', 'refine',
                   'lookup', 'sampler', 'rejection', 'options', 'specs'}
DECODING_LOOPS = {'steps', 'tree_growth', 'tree_sampling', 'blockwise',
                  'sampling'}


def test_the_package_has_the_layers_the_rules_name():
  for package in FORBIDDEN:
    assert (PACKAGE / package / '__init__.py').exists(), package


def broken_rules(name: str, imported: set[str]) -> list[str]:
  """What module `name` (dotted) breaks by importing `imported`."""
  package = name.split('.')[1] if name.count('.') else ''
  broken = []
  for module in sorted(imported):
    top = module.split('.')[1] if module.count('.') else ''
    if top in FORBIDDEN.get(package, ()):
      broken.append(f'{name} imports {module}: {package}/ sits below {top}')
    if module in ENTRY_POINTS:
      broken.append(f'{name} imports the entry point {module}')
    if module in FORBIDDEN_MODULES.get(name, ()):
      broken.append(f'{name} imports {module}')
    if (name.removeprefix('bpd_jax.decoding.') in DECODING_GROUND
        and module.removeprefix('bpd_jax.decoding.') in DECODING_LOOPS):
      broken.append(f'{name} imports {module}: the value types sit below '
                    f'the loops')
  return broken


@pytest.mark.parametrize('path', SOURCES, ids=module_name)
def test_imports_run_down_the_layers(path):
  assert broken_rules(module_name(path), imports(path)) == []


def test_the_decoding_floors_are_the_modules_there_are():
  modules = {path.stem for path in (PACKAGE / 'decoding').glob('*.py')}
  assert modules - {'__init__'} == DECODING_GROUND | DECODING_LOOPS


def test_the_rules_see_a_forbidden_import(tmp_path):
  # The check itself: a decoder that imports a model or a job is caught.
  source = tmp_path / 'blockwise.py'
  source.write_text('from bpd_jax.models import transformer\n'
                    'from bpd_jax import main\n')
  assert broken_rules('bpd_jax.decoding.blockwise', imports(source)) == [
      'bpd_jax.decoding.blockwise imports the entry point bpd_jax.main',
      'bpd_jax.decoding.blockwise imports bpd_jax.models: decoding/ sits '
      'below models',
      'bpd_jax.decoding.blockwise imports bpd_jax.models.transformer: '
      'decoding/ sits below models']
  source.write_text('from bpd_jax import auto_k\n'
                    'from bpd_jax.decoding import blockwise\n')
  assert broken_rules('bpd_jax.generate', imports(source)) == [
      'bpd_jax.generate imports bpd_jax.auto_k']
  assert broken_rules('bpd_jax.decoding.options', imports(source)) == [
      'bpd_jax.decoding.options imports bpd_jax.auto_k: decoding/ sits '
      'below auto_k',
      'bpd_jax.decoding.options imports bpd_jax.decoding.blockwise: the '
      'value types sit below the loops']
