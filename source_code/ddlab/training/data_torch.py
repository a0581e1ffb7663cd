"""Fashion-MNIST on the device, for ``fmnist_torch.py``: nothing in the step waits for the host.

The training set lives on the device and every batch is a slice of a per-epoch shuffled copy
there (:class:`EpochBatches`); the test images a rank scores are normalised on the device
once (:func:`test_images`). The files, the shards and the fixed training subset are
:mod:`ddlab.training.data`'s; the normalisation constants :mod:`ddlab.training.train_common`'s.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import torch

from ddlab.training import data as ddata
from ddlab.training.train_common import FMNIST_MEAN, FMNIST_STD


def normalise(images_uint8: torch.Tensor, memory_format) -> torch.Tensor:
    """uint8 images (N, 28, 28) -> normalised float32 (N, 1, 28, 28), on their device."""
    x = images_uint8.float().div_(255).sub_(FMNIST_MEAN).div_(FMNIST_STD).unsqueeze(1)
    return x.contiguous(memory_format=memory_format)


def labels(y: np.ndarray, device: torch.device) -> torch.Tensor:
    """Class labels as int64 on ``device`` (what cross_entropy takes)."""
    return torch.from_numpy(y.astype(np.int64)).to(device)


class EpochBatches:
    """This rank's training batches, on the device: ``batches(step)`` is (images, labels) of
    ``step``, all its micro-batches (``step_batch`` images).

    One permutation per epoch, identical on all ranks, is cut into disjoint equal shards
    (:func:`ddlab.training.data.shard_indices`, ``epochs`` of them). The training images stay
    uint8 on the device (4x smaller than float32, one 47 MB copy); each epoch's shard is
    gathered and normalised once, when the epoch begins, and a step's batch is a view of it."""

    def __init__(self, x_train: np.ndarray, y_train: np.ndarray, *, rank: int, world: int, seed: int,
                 epochs: int, steps_per_epoch: int, step_batch: int, device: torch.device, memory_format):
        n = x_train.shape[0]
        order = np.stack([ddata.shard_indices(n, rank, world, seed, epoch=e) for e in range(epochs)])
        self.order = torch.from_numpy(order).to(device)
        self.x = torch.tensor(x_train).to(device)   # a copy: the loader's arrays are read-only
        self.y = labels(y_train, device)
        self.steps_per_epoch, self.step_batch, self.memory_format = steps_per_epoch, step_batch, memory_format
        self.epoch = -1
        self._x = self._y = None

    def __call__(self, step: int) -> Tuple[torch.Tensor, torch.Tensor]:
        epoch, pos = divmod(step, self.steps_per_epoch)
        if epoch != self.epoch:
            idx = self.order[epoch]
            self._x = normalise(self.x.index_select(0, idx), self.memory_format)
            self._y = self.y.index_select(0, idx)
            self.epoch = epoch
        s = pos * self.step_batch
        return self._x[s:s + self.step_batch], self._y[s:s + self.step_batch]


def test_images(x_test: np.ndarray, y_test: np.ndarray, lo: int, hi: int, device: torch.device,
                memory_format) -> Tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
    """Test images ``lo:hi`` normalised on ``device`` and their labels; (None, None) when
    this rank scores none."""
    if hi <= lo:
        return None, None
    return (normalise(torch.tensor(x_test[lo:hi]).to(device), memory_format),
            labels(y_test[lo:hi], device))
