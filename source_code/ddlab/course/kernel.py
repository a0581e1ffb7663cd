"""The course's Jupyter kernel, "Python (ddlab)": IPython's kernel, with one difference.

When JupyterLab connects a notebook to a kernel it copies the kernel's ``language_info``
into the notebook's metadata; if that differs from what the file holds, the notebook is
marked as changed before the learner has done anything. IPython's ``language_info``
carries the exact Python version ("3.11.7"), which differs from machine to machine, so a
committed notebook could only ever open unchanged on one of them. This kernel reports
the same fields without the version, and the committed notebooks hold exactly
:data:`NOTEBOOK_METADATA` (``tests/test_repository.py`` checks it).

``python -m ddlab.course.kernel`` installs the kernel spec into the running Python's prefix
(``make kernel`` does this for ``.venv``).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys

from ipykernel.ipkernel import IPythonKernel

KERNEL_NAME = "ddlab"
DISPLAY_NAME = "Python (ddlab)"

#: IPython's language_info without the interpreter's version: the same on every machine.
LANGUAGE_INFO = {key: value for key, value in IPythonKernel.language_info.items() if key != "version"}

#: What a committed notebook's metadata holds: exactly what JupyterLab writes on opening it
#: with this kernel, so that opening it changes nothing.
NOTEBOOK_METADATA = {
    "kernelspec": {"name": KERNEL_NAME, "display_name": DISPLAY_NAME, "language": "python"},
    "language_info": LANGUAGE_INFO,
}


class CourseKernel(IPythonKernel):
    """IPython's kernel reporting :data:`LANGUAGE_INFO` (no interpreter version)."""

    language_info = LANGUAGE_INFO


#: The option that makes ipykernel's launcher start :class:`CourseKernel`.
KERNEL_CLASS_OPTION = "--IPKernelApp.kernel_class=ddlab.course.kernel.CourseKernel"


def install(prefix: str | None = None, user: bool = False) -> str:
    """Install the kernel spec ``ddlab`` into ``prefix`` (default: this Python's prefix).

    The spec is ipykernel's own (same launcher, same Python options) plus :data:`KERNEL_CLASS_OPTION`."""
    from ipykernel.kernelspec import write_kernel_spec
    from jupyter_client.kernelspec import KernelSpecManager
    spec_dir = write_kernel_spec(overrides={"display_name": DISPLAY_NAME}, extra_arguments=[KERNEL_CLASS_OPTION],
                                 python_arguments=["-Xfrozen_modules=off"])
    try:
        return KernelSpecManager().install_kernel_spec(spec_dir, kernel_name=KERNEL_NAME, user=user,
                                                       prefix=None if user else (prefix or sys.prefix))
    finally:
        shutil.rmtree(spec_dir, ignore_errors=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m ddlab.course.kernel",
                                description=f"Install the Jupyter kernel {DISPLAY_NAME!r} for this Python.")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--prefix", help="install under PREFIX/share/jupyter/kernels (default: this Python's prefix)")
    where.add_argument("--user", action="store_true", help="install for the current user instead")
    a = p.parse_args(argv)
    path = install(prefix=a.prefix, user=a.user)
    print(f"installed kernel spec {KERNEL_NAME!r} ({DISPLAY_NAME}) in {os.path.abspath(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
