"""The four Fashion-MNIST models: parameter counts from the layer arithmetic, and the same
counts in PyTorch and tf.keras."""
import pytest
import torch

from ddlab.training import models_torch


def dense(n_in, n_out):
    return n_in * n_out + n_out


def conv3x3(c_in, c_out):
    return 9 * c_in * c_out + c_out


# Independent arithmetic: 28x28 -> 26 -> 24 -> maxpool 12x12, 64 channels = 9216 features.
EXPECTED = {
    "cnn": conv3x3(1, 32) + conv3x3(32, 64) + dense(9216, 128) + dense(128, 10),
    "wide": conv3x3(1, 32) + conv3x3(32, 64) + dense(9216, 8192) + dense(8192, 10),
    "mlp-small": dense(784, 256) + dense(256, 128) + dense(128, 64) + dense(64, 10),
    "mlp-large": dense(784, 1024) + dense(1024, 1024) + dense(1024, 512) + dense(512, 512)
    + dense(512, 256) + dense(256, 10),
}


def test_expected_counts_are_the_documented_ones():
    # The numbers the course quotes (the table in ddlab.training.models' docstring).
    assert EXPECTED == {"cnn": 1_199_882, "wide": 75_606_410, "mlp-small": 242_762, "mlp-large": 2_774_794}
    # ... which are not the case-study reports' stated counts (see ddlab.training.models' docstring).
    assert EXPECTED["mlp-small"] != 258_432 and EXPECTED["mlp-large"] != 6_885_376


def test_one_list_of_models_for_both_frameworks():
    import ast
    import os

    from ddlab.training import models, models_keras
    assert models_torch.MODELS is models.MODELS and models_keras.MODELS is models.MODELS
    assert set(EXPECTED) == set(models.MODELS)
    with pytest.raises(ValueError, match="unknown model 'vgg'; choose one of cnn, wide, mlp-small, mlp-large"):
        models.check("vgg")
    # no second spelling of the list in the package (a tuple of the four names outside ddlab.training.models)
    pkg = os.path.dirname(models.__file__)
    for name in sorted(os.listdir(pkg)):
        if name.endswith(".py") and name != "models.py":
            for node in ast.walk(ast.parse(open(os.path.join(pkg, name)).read())):
                spelled = isinstance(node, ast.Tuple) and [getattr(e, "value", None) for e in node.elts] == list(models.MODELS)
                assert not spelled, f"{name} spells the model list again: import ddlab.training.models.MODELS"


@pytest.mark.parametrize("name", models_torch.MODELS)
def test_torch_models_count_and_shape(name):
    torch.manual_seed(0)
    model = models_torch.build(name)
    assert models_torch.count_parameters(model) == EXPECTED[name]
    assert models_torch.gradient_bytes(model) == 4 * EXPECTED[name]
    if name != "wide":  # the wide forward is slow on CPU and has the cnn's shape logic
        out = model(torch.zeros(3, 1, 28, 28))
        assert out.shape == (3, 10)


def test_same_seed_same_weights_and_unknown_model():
    torch.manual_seed(1)
    a = models_torch.build("mlp-small")
    torch.manual_seed(1)
    b = models_torch.build("mlp-small")
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    with pytest.raises(ValueError, match="unknown model 'resnet'"):
        models_torch.build("resnet")


@pytest.mark.slow
def test_keras_models_have_the_same_counts():
    from ddlab.training import models_keras
    for name in models_torch.MODELS:
        model = models_keras.build(name)
        assert models_keras.count_parameters(model) == EXPECTED[name], name
        assert model.output_shape == (None, 10)
    with pytest.raises(ValueError, match="unknown model"):
        models_keras.build("resnet")


def test_model_layers_give_the_documented_parameter_counts():
    from ddlab.training.models import model_layers
    counts = {m: sum(x.params for x in model_layers(m)) for m in EXPECTED}
    assert counts == EXPECTED
    with pytest.raises(ValueError, match="unknown model"):
        model_layers("resnet")


def test_weights_checksum_is_the_float64_sum_and_sum_of_squares():
    torch.manual_seed(2)
    model = models_torch.build("mlp-small")
    ck = models_torch.weights_checksum(model)
    flat = torch.cat([p.detach().double().flatten() for p in model.parameters()])
    assert ck["sum"] == pytest.approx(float(flat.sum()), rel=1e-12)
    assert ck["sumsq"] == pytest.approx(float((flat ** 2).sum()), rel=1e-12)
    with torch.no_grad():
        next(model.parameters())[0, 0] += 1.0   # one weight drifts: the checksum sees it
    assert models_torch.weights_checksum(model) != ck


def test_evaluate_counts_correct_predictions_and_sums_the_loss_in_eval_mode():
    import contextlib

    import torch.nn.functional as F
    torch.manual_seed(3)
    model = models_torch.build("mlp-large")   # has dropout: evaluate must switch it off
    x, y = torch.randn(25, 1, 28, 28), torch.randint(0, 10, (25,))
    with torch.no_grad():
        model.eval()
        logits = model(x)
        model.train()
    correct, loss = models_torch.evaluate(model, x, y, 10, contextlib.nullcontext)   # batches of 10, 10, 5
    assert correct == int((logits.argmax(1) == y).sum())
    assert loss == pytest.approx(float(F.cross_entropy(logits, y, reduction="sum")), rel=1e-5)
    assert model.training   # left in training mode


def test_the_probe_is_one_small_layer_run_by_pytorch_only_and_kept_out_of_the_course_models():
    from ddlab.training import models, models_torch
    from ddlab.training.runspec import RunSpec, RunSpecError
    assert models.PROBE not in models.MODELS and models.PROBE in models.TRAINABLE
    (layer,) = models.model_layers(models.PROBE)
    assert models_torch.count_parameters(models_torch.build(models.PROBE)) == layer.params
    assert layer.params < min(sum(x.params for x in models.model_layers(m)) for m in models.MODELS) / 20
    spec = RunSpec.for_device("cuda", models.PROBE, launcher="ddp", workers=2)
    assert spec.batch == models.PROBE_BATCH < RunSpec.for_device("cuda", "mlp-small").batch
    with pytest.raises(RunSpecError, match="PyTorch model"):
        RunSpec.for_device("cpu", models.PROBE, framework="keras", launcher="horovod", workers=2)
    with pytest.raises(ValueError, match="unknown model 'probe'"):
        models.check(models.PROBE)                 # not one of the course's models (lists, Keras, validation)
