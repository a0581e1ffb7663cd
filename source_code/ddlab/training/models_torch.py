"""The four Fashion-MNIST models of the course in PyTorch, built from the names and widths in
:mod:`ddlab.training.models` (which has the table of layers and parameter counts; the Keras twins are
in :mod:`ddlab.training.models_keras`), with what a training run asks of a built model: its
parameters and gradient bytes, a checksum of its weights (do the ranks agree?) and its score
on test images.
"""
from __future__ import annotations

# The names and widths live in ddlab.training.models; MODELS is importable from here too.
from ddlab.training.models import (CNN_DENSE, IMAGE_SHAPE, MLP_DROPOUT, MLP_WIDTHS, MODELS, NUM_CLASSES,  # noqa: F401, E501
                                   PROBE, TRAINABLE, check)


def build(name: str):
    """A freshly initialised ``torch.nn.Sequential`` (uses torch's global RNG: seed it first)."""
    from torch import nn   # here, not at the top: importing this module does not load torch
    check(name, probe=True)
    if name == PROBE:      # one small layer: compute and all-reduce close to nothing
        return nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, NUM_CLASSES))
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


def weights_checksum(model) -> dict:
    """float64 sum and sum of squares of all parameters: equal on every rank when the ranks
    agree (they take identical steps), different as soon as one rank drifts."""
    import torch
    with torch.no_grad():
        s = sum(p.detach().sum(dtype=torch.float64) for p in model.parameters())
        q = sum(torch.linalg.vector_norm(p.detach(), dtype=torch.float64) ** 2 for p in model.parameters())
    return {"sum": float(s), "sumsq": float(q)}


def evaluate(model, x, y, batch: int, autocast) -> tuple:
    """(correct predictions, summed cross-entropy) of ``model`` over the images ``x`` with
    labels ``y`` (all of the test set, or this rank's part of it), ``batch`` images at a time
    under the context ``autocast()``; the model is left in training mode."""
    import torch
    import torch.nn.functional as F
    model.eval()
    with torch.no_grad():
        correct = torch.zeros((), dtype=torch.int64, device=x.device)
        loss = torch.zeros((), dtype=torch.float64, device=x.device)
        for i in range(0, x.shape[0], batch):
            with autocast():
                logits = model(x[i:i + batch]).float()
            correct += (logits.argmax(dim=1) == y[i:i + batch]).sum()
            loss += F.cross_entropy(logits, y[i:i + batch], reduction="sum").double()
    model.train()
    return int(correct.item()), float(loss.item())
