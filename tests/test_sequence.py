"""ddlab.course.sequence: the sentence each notebook opens with, per hardware mode."""
import pytest

from ddlab.course import sequence


class Inv:
    def __init__(self, n):
        self.gpu_count = n
        self.mode = "cpu" if n == 0 else "single-gpu" if n == 1 else "multi-gpu"


@pytest.mark.parametrize("notebook", sorted(sequence.NOTEBOOKS))
def test_every_notebook_says_what_runs_in_every_mode(notebook):
    texts = {n: sequence.live_here(notebook, Inv(n), usable=n) for n in (0, 1, 4)}
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


@pytest.mark.parametrize("visible, usable, start, runs_as", [
    ("1", 1, "This machine has 2 GPUs, but PyTorch can use one of them (CUDA_VISIBLE_DEVICES='1' hides the others)",
     "single-gpu"),
    ("GPU-8932aaaa", 1, "This machine has 2 GPUs, but PyTorch can use one of them (CUDA_VISIBLE_DEVICES="
     "'GPU-8932aaaa' hides the others)", "single-gpu"),
    (None, 0, "This machine has 2 GPUs, but PyTorch can use none of them (a CPU-only PyTorch", "cpu")])
def test_the_sentence_follows_the_gpus_pytorch_can_use_not_the_inventory(monkeypatch, visible, usable, start,
                                                                          runs_as):
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    text = sequence.live_here(5, Inv(2), usable=usable)
    assert text.startswith(start), text
    assert text.endswith(sequence.NOTEBOOKS[5][1][runs_as] + ".")
    assert "runs live" not in text


def test_pytorch_is_asked_only_where_the_inventory_lists_gpus(monkeypatch):
    from ddlab.system import frameworks
    asked = []
    monkeypatch.setattr(frameworks, "gpu_count", lambda framework="torch": asked.append(framework) or 1)
    assert sequence.live_here(2, Inv(0)).startswith("This machine has no GPU, so") and asked == []
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert sequence.live_here(2, Inv(2)).startswith("This machine has 2 GPUs, but PyTorch can use one of them")
    assert asked == ["torch"]


@pytest.mark.parametrize("gpus, usable, runs_as", [(0, None, "cpu"), (1, 1, "single-gpu"), (4, 4, "multi-gpu"),
                                                   (4, 1, "single-gpu"), (2, 0, "cpu")])
def test_start_heres_table_lists_every_notebook_in_the_mode_pytorch_runs_in(gpus, usable, runs_as):
    table = sequence.here_table(Inv(gpus), usable=usable)
    assert [r["notebook"].split(".")[0] for r in table.rows] == [str(n) for n in sequence.NOTEBOOKS]
    assert [r["live"] for r in table.rows] == [what[runs_as] for _, what in sequence.NOTEBOOKS.values()]
    for n in sequence.NOTEBOOKS:        # the table and each notebook's first line say the same
        assert sequence.live_here(n, Inv(gpus), usable=usable).endswith(sequence.NOTEBOOKS[n][1][runs_as] + ".")
