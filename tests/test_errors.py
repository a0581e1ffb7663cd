"""ddlab.base.errors: a course error ends a notebook cell with its one message, not a traceback."""
import pytest
from jupyter_client.manager import start_new_kernel

from ddlab.base.errors import TRACEBACK_HINT, CourseError
from ddlab.base.files import ResultFileError
from ddlab.base.reference import ReferenceMissing
from ddlab.course.handson import HandsOnError
from ddlab.measure.launch import LaunchError, LaunchTimeout
from ddlab.measure.p2p_run import P2PBuildError, P2PNoGPU, P2PRunError
from ddlab.system.topology import NoGPUError
from ddlab.training.data import DatasetError
from ddlab.training.runs import ExperimentError
from ddlab.training.runspec import RunSpecError


@pytest.mark.parametrize("cls", [DatasetError, NoGPUError, HandsOnError, ExperimentError, RunSpecError,
                                 ReferenceMissing, ResultFileError, LaunchError, LaunchTimeout,
                                 P2PBuildError, P2PNoGPU, P2PRunError])
def test_the_learner_facing_errors_render_as_their_message(cls):
    err = cls("no Fashion-MNIST here: run `make data`")
    assert isinstance(err, CourseError)
    lines = err._render_traceback_()
    assert lines[0].endswith(f"{cls.__name__}\x1b[0m: no Fashion-MNIST here: run `make data`")
    assert lines[1:] == [TRACEBACK_HINT]


@pytest.fixture(scope="module")
def kernel():
    km, kc = start_new_kernel(kernel_name="ddlab")
    yield kc
    kc.stop_channels()
    km.shutdown_kernel(now=True)


def _error_of(kc, code: str) -> dict:
    # stop_on_error=False: ipykernel otherwise aborts the requests that arrive just after an error
    msg_id = kc.execute(code, stop_on_error=False)
    reply = kc.get_shell_msg(timeout=60)
    while reply["parent_header"].get("msg_id") != msg_id:   # a late kernel_info reply from start-up comes first
        reply = kc.get_shell_msg(timeout=60)
    while True:
        m = kc.get_iopub_msg(timeout=60)
        if m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "error":
            return {"reply": reply["content"], "error": m["content"]}


def test_in_a_notebook_the_cell_fails_with_the_message_alone(kernel):
    got = _error_of(kernel, "from ddlab.training.data import DatasetError\n"
                            "raise DatasetError('Fashion-MNIST is missing: run `make data`')")
    assert got["reply"]["status"] == "error"                      # the cell still fails: nothing is swallowed
    assert got["error"]["ename"] == "DatasetError"
    assert got["error"]["traceback"] == ["\x1b[31mDatasetError\x1b[0m: Fashion-MNIST is missing: run `make data`",
                                         TRACEBACK_HINT]


def test_other_errors_keep_their_full_traceback(kernel):
    got = _error_of(kernel, "def f():\n    return 1 / 0\nf()")
    assert got["error"]["ename"] == "ZeroDivisionError"
    assert len(got["error"]["traceback"]) > 2 and any("f()" in line for line in got["error"]["traceback"])
