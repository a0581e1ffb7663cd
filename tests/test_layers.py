"""The package's shape: every sub-package a layer of import-linter's contracts in pyproject.toml
(`make test` runs lint-imports itself, before the tests), no module over 800 lines and no function over 80
(in the package, the training scripts and the tools), a training script a reader can hold in mind."""
import ast
import os
import subprocess
import sys
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PKG = os.path.join(REPO, "source_code", "ddlab")
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 80
MAX_SCRIPT_LINES = 440


def _contracts() -> list:
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["tool"]["importlinter"]["contracts"]


def test_every_sub_package_is_a_layer_of_the_contract():
    layers = next(c for c in _contracts() if c["type"] == "layers")["layers"]
    subpackages = sorted(d for d in os.listdir(PKG) if os.path.isfile(os.path.join(PKG, d, "__init__.py")))
    assert sorted(name.split(".")[1] for name in layers) == subpackages
    # the bottom layer is the base; the top is the recording layer (only tools/recording/ imports it), then
    # the report; every module of the package lives in a layer
    assert layers[-1] == "ddlab.base" and layers[:2] == ["ddlab.recording", "ddlab.report"]
    loose = sorted(f for f in os.listdir(PKG) if f.endswith(".py"))
    assert loose == ["__init__.py", "__main__.py", "cli.py"], "a module outside the layers: put it in one"


def test_circles_are_forbidden_everywhere_in_the_package():
    acyclic = [c for c in _contracts() if c["type"] == "acyclic_siblings"]
    assert acyclic and acyclic[0]["ancestors"] == ["ddlab"]


def _python_files():
    """Every Python file of the package, the training scripts and the tools."""
    for top in (os.path.join(REPO, "source_code"), os.path.join(REPO, "tools")):
        for root, dirs, files in os.walk(top):
            dirs[:] = [d for d in dirs if d not in ("__pycache__", "reference", ".ipynb_checkpoints")]
            yield from (os.path.join(root, f) for f in files if f.endswith(".py"))


def test_no_module_over_800_lines_and_no_function_over_80():
    long_modules, long_functions = {}, {}
    for path in _python_files():
        with open(path, encoding="utf-8") as f:
            text = f.read()
        rel = os.path.relpath(path, REPO)
        if (n := text.count("\n")) > MAX_MODULE_LINES:
            long_modules[rel] = n
        for node in ast.walk(ast.parse(text, path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if (n := node.end_lineno - node.lineno + 1) > MAX_FUNCTION_LINES:
                    long_functions[f"{rel}:{node.name}"] = n
    assert not long_modules, f"split these modules by concept: {long_modules}"
    assert not long_functions, f"split these functions into named parts: {long_functions}"


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
