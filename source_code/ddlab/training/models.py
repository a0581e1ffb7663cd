"""The four Fashion-MNIST models of the course: their names and layer widths, in one place.

:mod:`ddlab.training.models_torch` builds them in PyTorch and :mod:`ddlab.training.models_keras` in tf.keras,
both from the widths here (so the two cannot drift apart; both give the counts below). This
module imports no framework, so a script or a command line can list the models cheaply.

=========  ==============================================================  ===========
name       layers (input: one 28x28 grey image)                            parameters
=========  ==============================================================  ===========
cnn        conv 3x3 32 - conv 3x3 64 - maxpool 2 - dropout 0.25 -          1,199,882
           dense 128 - dropout 0.5 - dense 10 (the classic Fashion-MNIST
           bootcamp CNN)
wide       the same CNN with a dense layer of 8192 instead of 128, so     75,606,410
           every step all-reduces ~302 MB of gradients: the model that
           makes the interconnect matter
mlp-small  dense 256 - 128 - 64 - 10 on the 784 pixels                       242,762
mlp-large  dense 1024 - 1024 - 512 - 512 - 256 - 10, dropout 0.2 after     2,774,794
           each hidden layer
=========  ==============================================================  ===========

The two MLPs have the layer widths of the case-study reports the course builds on. Those
reports state 258,432 and 6,885,376 parameters; the widths they give, on Fashion-MNIST's
784 inputs, cannot produce those numbers. A dense layer of ``n_in`` inputs and ``n_out``
units has ``n_in * n_out`` weights plus ``n_out`` biases, so 784-256-128-64-10 has
200,960 + 32,896 + 8,256 + 650 = 242,762 and 784-1024-1024-512-512-256-10 has 2,774,794
(without biases 242,304 and 2,771,456). We searched every stack of up to six dense layers
of power-of-two widths from 32 to 4096 on 784, 1024 or 3072 inputs: none with the reports'
widths gives either stated figure, so the stated counts belong to some other network than
the one the reports describe (or to a counting error). The course uses the counts that follow
from the layers, and ``models_torch.count_parameters`` checks them.

:func:`model_layers` gives each model's layers with parameters, their parameter counts and
forward FLOPs per sample: the shapes the step model (:mod:`ddlab.cost.step_model`) buckets and
the step profiles (:mod:`ddlab.training.step_profile`) name.
"""
from __future__ import annotations

from dataclasses import dataclass

MODELS = ("cnn", "wide", "mlp-small", "mlp-large")
# The probe: one small dense layer (784 -> 10, 7,850 parameters) run at a tiny batch, so that its compute
# and its all-reduce are close to nothing and a 2-GPU step of it is the fixed cost of a step: the wrapper,
# launching the collective, the host. A PyTorch training model only: not one of the course's MODELS (the
# notebooks' lists, Keras, the models the step model is checked on).
PROBE = "probe"
PROBE_BATCH = 4
TRAINABLE = MODELS + (PROBE,)          # every model the PyTorch training script can run
IMAGE_SHAPE = (1, 28, 28)
NUM_CLASSES = 10
# Hidden widths, read by both builders.
CNN_DENSE = {"cnn": 128, "wide": 8192}
MLP_WIDTHS = {"mlp-small": (256, 128, 64), "mlp-large": (1024, 1024, 512, 512, 256)}
MLP_DROPOUT = {"mlp-small": 0.0, "mlp-large": 0.2}


def check(name: str, probe: bool = False) -> None:
    """ValueError naming the models when ``name`` is not one of them (with ``probe``: or the probe)."""
    names = TRAINABLE if probe else MODELS
    if name not in names:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(names)}")


@dataclass(frozen=True)
class Layer:
    """One layer with parameters, as the step model sees it: its parameter count (its
    gradient is that many values) and its forward FLOPs per sample (its share of the
    backward pass is taken to be proportional to them)."""
    name: str
    params: int
    flops: float


def model_layers(name: str) -> tuple:
    """The layers of one of the course's models, in forward order, with their parameter
    counts and forward FLOPs per sample (a multiply-add counts 2). Layers without parameters
    (ReLU, pooling, dropout) are left out: they produce no gradient, and their time is in the
    measured step."""
    check(name, probe=True)
    if name == PROBE:
        return (Layer("dense1", 28 * 28 * NUM_CLASSES + NUM_CLASSES, 28 * 28 * NUM_CLASSES * 2),)
    if name in CNN_DENSE:
        # 28x28 -> conv 3x3 (32) -> 26x26 -> conv 3x3 (64) -> 24x24 -> maxpool -> 12x12x64 = 9216
        h = CNN_DENSE[name]
        return (Layer("conv1", 32 * 9 + 32, 26 * 26 * 32 * 9 * 2),
                Layer("conv2", 64 * 32 * 9 + 64, 24 * 24 * 64 * 32 * 9 * 2),
                Layer("dense1", 9216 * h + h, 9216 * h * 2),
                Layer("dense2", h * NUM_CLASSES + NUM_CLASSES, h * NUM_CLASSES * 2))
    out, width_in = [], 28 * 28
    for i, width in enumerate(MLP_WIDTHS[name] + (NUM_CLASSES,)):
        out.append(Layer(f"dense{i + 1}", width_in * width + width, width_in * width * 2))
        width_in = width
    return tuple(out)
