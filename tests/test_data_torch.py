"""ddlab.training.data_torch: Fashion-MNIST on the device, this rank's shard gathered once per
epoch, batches as slices of it."""
import numpy as np
import pytest
import torch

from ddlab.training import data, data_torch
from ddlab.training.train_common import FMNIST_MEAN, FMNIST_STD

CPU = torch.device("cpu")


def images(n):
    """n distinct uint8 images: image i is filled with i, so a batch says which images it holds."""
    return np.repeat(np.arange(n, dtype=np.uint8), 28 * 28).reshape(n, 28, 28), np.arange(n) % 10


def which(x):
    """The image numbers of normalised images made by images()."""
    return torch.round((x[:, 0, 0, 0] * FMNIST_STD + FMNIST_MEAN) * 255).long().tolist()


def test_normalise_scales_adds_the_channel_and_sets_the_memory_format():
    x = data_torch.normalise(torch.full((2, 28, 28), 255, dtype=torch.uint8), torch.channels_last)
    assert x.shape == (2, 1, 28, 28) and x.dtype == torch.float32
    assert x.is_contiguous(memory_format=torch.channels_last)
    assert torch.allclose(x, torch.full_like(x, (1.0 - FMNIST_MEAN) / FMNIST_STD))


def test_batches_are_this_ranks_shard_in_the_epochs_order():
    x, y = images(40)
    rank, world, seed = 1, 2, 5
    batches = data_torch.EpochBatches(x, y, rank=rank, world=world, seed=seed, epochs=2, steps_per_epoch=3,
                                      step_batch=6, device=CPU, memory_format=torch.contiguous_format)
    for epoch in range(2):
        shard = data.shard_indices(40, rank, world, seed, epoch=epoch)   # 20 images, 3 full batches of 6
        for pos in range(3):
            bx, by = batches(epoch * 3 + pos)
            assert bx.shape == (6, 1, 28, 28) and by.dtype == torch.int64
            assert which(bx) == list(shard[pos * 6:(pos + 1) * 6])
            assert by.tolist() == list(y[shard[pos * 6:(pos + 1) * 6]])
        assert batches.epoch == epoch   # gathered when the epoch began


def test_an_epochs_shard_is_gathered_once():
    x, y = images(12)
    batches = data_torch.EpochBatches(x, y, rank=0, world=1, seed=0, epochs=1, steps_per_epoch=3, step_batch=4,
                                      device=CPU, memory_format=torch.contiguous_format)
    first, _ = batches(0)
    second, _ = batches(1)
    assert first.untyped_storage().data_ptr() == second.untyped_storage().data_ptr()   # views of one copy


def test_test_images_on_the_device_or_none():
    x, y = images(10)
    xt, yt = data_torch.test_images(x, y, 2, 5, CPU, torch.contiguous_format)
    assert which(xt) == [2, 3, 4] and yt.tolist() == [2, 3, 4] and yt.dtype == torch.int64
    assert data_torch.test_images(x, y, 0, 0, CPU, torch.contiguous_format) == (None, None)


@pytest.mark.parametrize("fmt", [torch.contiguous_format, torch.channels_last])
def test_batches_keep_the_memory_format(fmt):
    x, y = images(8)
    batches = data_torch.EpochBatches(x, y, rank=0, world=1, seed=0, epochs=1, steps_per_epoch=2, step_batch=4,
                                      device=CPU, memory_format=fmt)
    assert batches(1)[0].is_contiguous(memory_format=fmt)
