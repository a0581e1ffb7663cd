"""The Slurm jobs start a one-node Slurm cluster (root; apt-get installs it when missing):
they run through `make slurm-test` (DDLAB_SLURM_TESTS=1), not as part of `make test`, which
lists them as deselected."""
import os
from pathlib import Path

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    if os.environ.get("DDLAB_SLURM_TESTS") == "1":
        return
    mine = [it for it in items if HERE in Path(str(it.fspath)).resolve().parents]
    if mine:
        config.hook.pytest_deselected(items=mine)
        items[:] = [it for it in items if it not in mine]
