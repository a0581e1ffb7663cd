"""The course kernel: IPython's, with a language_info that is the same on every machine."""
import json
import os
import sys

from ipykernel.ipkernel import IPythonKernel
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import start_new_kernel

from ddlab.course import kernel


def test_language_info_is_ipythons_without_the_interpreter_version():
    assert "version" in IPythonKernel.language_info
    assert kernel.LANGUAGE_INFO == {k: v for k, v in IPythonKernel.language_info.items() if k != "version"}
    assert kernel.CourseKernel.language_info == kernel.LANGUAGE_INFO
    assert kernel.NOTEBOOK_METADATA["language_info"] == kernel.LANGUAGE_INFO
    assert kernel.NOTEBOOK_METADATA["kernelspec"] == {"name": "ddlab", "display_name": "Python (ddlab)", "language": "python"}


def test_install_writes_a_spec_that_starts_the_course_kernel(tmp_path, monkeypatch):
    path = kernel.install(prefix=str(tmp_path))
    assert path == str(tmp_path / "share" / "jupyter" / "kernels" / "ddlab")
    spec = json.load(open(os.path.join(path, "kernel.json")))
    assert spec["display_name"] == "Python (ddlab)" and spec["language"] == "python"
    assert spec["argv"][0] == sys.executable and spec["argv"][-1] == kernel.KERNEL_CLASS_OPTION
    # Start it, as Jupyter would, and ask what JupyterLab will copy into the notebook.
    source_code = os.path.dirname(os.path.dirname(kernel.__file__))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [source_code, os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "share" / "jupyter"))
    assert KernelSpecManager().get_kernel_spec("ddlab").resource_dir == path
    km, kc = start_new_kernel(kernel_name="ddlab", startup_timeout=120)
    try:
        reply = kc.kernel_info(reply=True, timeout=60)
        assert reply["content"]["language_info"] == kernel.LANGUAGE_INFO
        assert reply["content"]["implementation"] == "ipython"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_main_installs_into_a_prefix(tmp_path, capsys):
    assert kernel.main(["--prefix", str(tmp_path)]) == 0
    assert "installed kernel spec 'ddlab'" in capsys.readouterr().out
    assert (tmp_path / "share" / "jupyter" / "kernels" / "ddlab" / "kernel.json").exists()
