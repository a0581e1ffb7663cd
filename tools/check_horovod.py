"""Load every Horovod binding that was built, all in this one Python, and print what each was
built with. Exits 1 when a built binding does not load (a missing symbol, a framework of another
version) or when none was built.

    python tools/check_horovod.py        # make setup runs it after building or installing Horovod

`horovodrun --check-build` reports the same controllers and tensor operations, but loads the
frameworks again in a new process for each line it prints.
"""
import glob
import importlib
import os
import sys
import traceback

# Horovod's bindings (its module, the framework's name) and what each can report it was built with.
BINDINGS = (("torch", "PyTorch"), ("tensorflow", "TensorFlow"))
CONTROLLERS = (("mpi", "MPI"), ("gloo", "Gloo"))
OPERATIONS = (("nccl", "NCCL"), ("ddl", "DDL"), ("ccl", "CCL"), ("mpi", "MPI"), ("gloo", "Gloo"))


def built_library(horovod_dir: str, module: str) -> bool:
    """Whether the binding's compiled library is installed (Horovod names it mpi_lib*)."""
    return bool(glob.glob(os.path.join(horovod_dir, module, "mpi_lib*.so")))


def describe(binding) -> str:
    controllers = [name for key, name in CONTROLLERS if getattr(binding, f"{key}_built")()]
    operations = [name for key, name in OPERATIONS if getattr(binding, f"{key}_built")()]
    return f"controllers {', '.join(controllers) or 'none'}; tensor operations {', '.join(operations) or 'none'}"


def main() -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")     # TensorFlow's start-up INFO lines are not news here
    try:
        import horovod
    except ImportError as exc:
        print(f"check_horovod: Horovod is not installed in {sys.executable}: {exc}", file=sys.stderr)
        return 1
    here = os.path.dirname(horovod.__file__)
    print(f"Horovod v{horovod.__version__}, each built binding loaded in {sys.executable}:")
    loaded, failed = 0, 0
    for module, framework in BINDINGS:
        if not built_library(here, module):
            print(f"    [ ] {framework}: not built")
            continue
        try:
            binding = importlib.import_module(f"horovod.{module}")
            line = describe(binding)
        except Exception:
            failed += 1
            print(f"    [!] {framework}: built, but does not load:", file=sys.stderr)
            traceback.print_exc()
            continue
        loaded += 1
        print(f"    [X] {framework}: {line}")
    if failed or not loaded:
        print("check_horovod: " + ("a built binding does not load (above)" if failed else "no binding was built"),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
