"""The four Fashion-MNIST models of the course in tf.keras, layer for layer the twins of
:mod:`ddlab.training.models_torch`, built from the same widths in :mod:`ddlab.training.models` (see that module
for the table and for why the case-study reports' MLP counts differ from ours).

tf.keras here means the ``tf-keras`` package selected by ``TF_USE_LEGACY_KERAS=1``, which
must be set before TensorFlow is first imported: Horovod's Keras API does not work with
Keras 3 (its DistributedOptimizer silently stops averaging gradients). :func:`keras` sets
:data:`ddlab.system.frameworks.TF_ENVIRONMENT` (unless the caller set those variables) just before it imports
TensorFlow, never at import time: importing ddlab changes no environment variable. It
refuses to build a model if Keras 3 got loaded anyway. A launch of Keras workers passes
:data:`ddlab.system.frameworks.TF_ENVIRONMENT` in the workers' environment too, so they choose tf-keras before any
TensorFlow import of theirs.
"""
from __future__ import annotations

from ddlab.system.frameworks import use_tf_keras
from ddlab.training.models import CNN_DENSE, MLP_DROPOUT, MLP_WIDTHS, MODELS, NUM_CLASSES, check  # noqa: F401


def keras():
    """The tf.keras module (tf-keras), imported on first use because TensorFlow is slow to load."""
    use_tf_keras()
    import tensorflow as tf
    k = tf.keras
    version = getattr(k, "__version__", "") or ""
    if version.startswith("3.") or not getattr(k, "__name__", "").startswith("tf_keras"):
        raise RuntimeError(
            f"tf.keras is Keras {version or '3'} ({getattr(k, '__name__', '?')}), not tf-keras: set "
            "TF_USE_LEGACY_KERAS=1 before TensorFlow is imported and install the tf-keras package "
            "(Horovod's Keras API needs it).")
    return k


def build(name: str):
    """A freshly initialised, uncompiled tf.keras model taking (28, 28, 1) images and
    returning logits (seed with ``tf.keras.utils.set_random_seed`` first)."""
    check(name)
    k = keras()
    L = k.layers
    layers = [k.Input(shape=(28, 28, 1))]
    if name in CNN_DENSE:
        layers += [L.Conv2D(32, 3, activation="relu"), L.Conv2D(64, 3, activation="relu"),
                   L.MaxPooling2D(2), L.Dropout(0.25), L.Flatten(),
                   L.Dense(CNN_DENSE[name], activation="relu"), L.Dropout(0.5)]
    else:
        layers.append(L.Flatten())
        for width in MLP_WIDTHS[name]:
            layers.append(L.Dense(width, activation="relu"))
            if MLP_DROPOUT[name]:
                layers.append(L.Dropout(MLP_DROPOUT[name]))
    # float32 logits even under a mixed-precision policy, so the loss is computed in float32.
    layers.append(L.Dense(NUM_CLASSES, dtype="float32"))
    return k.Sequential(layers, name=name.replace("-", "_"))


def count_parameters(model) -> int:
    """Trainable parameters (the values whose gradients Horovod all-reduces)."""
    import numpy as np
    return int(sum(np.prod(w.shape) for w in model.trainable_weights))
