"""The package's shape: every sub-package a layer of import-linter's contracts in pyproject.toml
(`make test` runs lint-imports itself, before the tests), no module over 600 lines, a training
script a reader can hold in mind."""
import os
import subprocess
import sys
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PKG = os.path.join(REPO, "source_code", "ddlab")
MAX_MODULE_LINES = 600
MAX_SCRIPT_LINES = 400


def _contracts() -> list:
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["tool"]["importlinter"]["contracts"]


def _modules():
    for root, _dirs, files in os.walk(PKG):
        for name in files:
            if name.endswith(".py"):
                yield os.path.join(root, name)


def test_every_sub_package_is_a_layer_of_the_contract():
    layers = next(c for c in _contracts() if c["type"] == "layers")["layers"]
    subpackages = sorted(d for d in os.listdir(PKG) if os.path.isfile(os.path.join(PKG, d, "__init__.py")))
    assert sorted(name.split(".")[1] for name in layers) == subpackages
    # the bottom layer is the base, the top the report; every module of the package lives in a layer
    assert layers[-1] == "ddlab.base" and layers[0] == "ddlab.report"
    loose = sorted(f for f in os.listdir(PKG) if f.endswith(".py"))
    assert loose == ["__init__.py", "__main__.py", "cli.py"], "a module outside the layers: put it in one"


def test_circles_are_forbidden_everywhere_in_the_package():
    acyclic = [c for c in _contracts() if c["type"] == "acyclic_siblings"]
    assert acyclic and acyclic[0]["ancestors"] == ["ddlab"]


def test_no_module_is_over_600_lines():
    long = {os.path.relpath(p, PKG): n for p in _modules() if (n := sum(1 for _ in open(p))) > MAX_MODULE_LINES}
    assert not long, f"split these by concept: {long}"


def test_the_torch_training_script_stays_short():
    script = os.path.join(REPO, "source_code", "train", "fmnist_torch.py")
    n = sum(1 for _ in open(script))
    assert n <= MAX_SCRIPT_LINES, f"fmnist_torch.py has {n} lines: move what a reader of the loop needs not see"


def test_importing_the_package_imports_no_layer():
    # `import ddlab` is cheap and changes nothing: the sub-packages load only when asked for
    code = "import sys, ddlab; print(sorted(m for m in sys.modules if m.startswith('ddlab.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=os.path.join(REPO, "source_code")))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
