"""The four Fashion-MNIST models of the course in PyTorch, built from the names and widths in
:mod:`ddlab.training.models` (which has the table of layers and parameter counts; the Keras twins are
in :mod:`ddlab.training.models_keras`).
"""
from __future__ import annotations

# The names and widths live in ddlab.training.models; MODELS is importable from here too.
from ddlab.training.models import CNN_DENSE, IMAGE_SHAPE, MLP_DROPOUT, MLP_WIDTHS, MODELS, NUM_CLASSES, check  # noqa: F401


def build(name: str):
    """A freshly initialised ``torch.nn.Sequential`` (uses torch's global RNG: seed it first)."""
    from torch import nn   # here, not at the top: importing this module does not load torch
    check(name)
    if name in CNN_DENSE:
        # 28x28 -> conv 3x3 -> 26x26 -> conv 3x3 -> 24x24 -> maxpool 2 -> 12x12, 64 channels
        return nn.Sequential(
            nn.Conv2d(1, 32, kernel_size=3), nn.ReLU(),
            nn.Conv2d(32, 64, kernel_size=3), nn.ReLU(),
            nn.MaxPool2d(2), nn.Dropout(0.25), nn.Flatten(),
            nn.Linear(64 * 12 * 12, CNN_DENSE[name]), nn.ReLU(), nn.Dropout(0.5),
            nn.Linear(CNN_DENSE[name], NUM_CLASSES),
        )
    layers: list = [nn.Flatten()]
    width_in = 28 * 28
    for width in MLP_WIDTHS[name]:
        layers += [nn.Linear(width_in, width), nn.ReLU()]
        if MLP_DROPOUT[name]:
            layers.append(nn.Dropout(MLP_DROPOUT[name]))
        width_in = width
    layers.append(nn.Linear(width_in, NUM_CLASSES))
    return nn.Sequential(*layers)


def count_parameters(model) -> int:
    """Trainable parameters: exactly the values whose gradients are all-reduced each step."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def gradient_bytes(model) -> int:
    """Bytes of gradient every worker contributes to the all-reduce of one step. Gradients
    have the parameters' dtype (float32 here, also under bf16 autocast, which only changes
    the arithmetic of the forward and backward passes)."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
