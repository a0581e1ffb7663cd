"""ddlab.course.sequence: the sentence each notebook opens with, per hardware mode."""
import pytest

from ddlab.course import sequence


class Inv:
    def __init__(self, n):
        self.gpu_count = n
        self.mode = "cpu" if n == 0 else "single-gpu" if n == 1 else "multi-gpu"


@pytest.mark.parametrize("notebook", sorted(sequence.NOTEBOOKS))
def test_every_notebook_says_what_runs_in_every_mode(notebook):
    texts = {n: sequence.live_here(notebook, Inv(n)) for n in (0, 1, 4)}
    assert texts[0].startswith("This machine has no GPU")
    assert texts[1].startswith("This machine has one GPU")
    assert texts[4].startswith("This machine has 4 GPUs")
    assert len(set(texts.values())) == 3          # each mode gets its own sentence


def test_unknown_notebook_or_mode_is_one_clear_message():
    with pytest.raises(ValueError, match="the course's notebooks are"):
        sequence.live_here(11, Inv(0))
    bad = Inv(0)
    bad.mode = "tpu"
    with pytest.raises(ValueError, match="unknown hardware mode"):
        sequence.live_here(2, bad)
