"""ddlab.training.step_profile: where one training step's time goes (a real CPU run here; the GPU
profiles the cost model uses are recorded in reference/profiles/)."""
import json

import pytest

from ddlab.training import models, step_profile
from ddlab.training.models import model_layers


def test_measure_on_cpu_times_every_layer_in_backward_order():
    prof = step_profile.measure("mlp-small", batch=32, device="cpu", warmup=1, repeats=3)
    assert prof.device == "cpu" and prof.precision == "fp32" and prof.repeats == 3
    assert prof.forward_s > 0 and prof.backward_s > 0 and prof.optimizer_s > 0 and prof.sm_count is None
    names = [layer.name for layer in model_layers("mlp-small")]
    assert sorted(prof.ready) == sorted(names)
    # the gradients become ready from the last layer to the first
    shares = [prof.ready[n] for n in reversed(names)]
    assert shares == sorted(shares) and 0 < shares[0] < shares[-1] <= 1
    assert 0 < prof.backward_fraction < 1 and 0 < prof.optimizer_share < 1
    assert step_profile.StepProfile.from_dict(json.loads(json.dumps(prof.to_dict()))) == prof
    text = str(prof.table())
    assert "dense1" in text and "medians of 3" in text


def test_bad_input_is_refused_with_a_reason():
    with pytest.raises(ValueError, match="batch"):
        step_profile.measure("cnn", batch=0, device="cpu")
    with pytest.raises(ValueError, match="precision"):
        step_profile.measure("cnn", batch=4, device="cpu", precision="fp8")
    with pytest.raises(ValueError, match="unknown model|model"):
        step_profile.measure("huge", batch=4, device="cpu")
    with pytest.raises(ValueError, match="share between 0 and 1"):
        step_profile.StepProfile("cnn", 4, "cpu", "fp32", 1.0, 1.0, 0.0, {"conv1": 1.5}, 1)
    with pytest.raises(ValueError, match="needs the field 'ready'"):
        step_profile.StepProfile.from_dict({"model": "cnn"} | {k: 1 for k in ("batch", "device", "precision",
                                                                              "forward_s", "backward_s",
                                                                              "optimizer_s", "repeats")})


def test_every_model_has_a_recorded_gpu_profile_with_provenance():
    for m in models.MODELS:
        prof = step_profile.load_recorded(m)
        assert prof.device != "cpu" and prof.batch == 512 and prof.repeats >= 3 and prof.sm_count > 0
        assert set(prof.ready) == {layer.name for layer in model_layers(m)}
        for key in ("machine", "gpu_model", "driver", "command", "date"):
            assert prof.provenance.get(key), (m, key)
    # the measurement the cost model relies on: the wide model's big dense gradient is ready
    # well before the end of its backward pass, against 87% when counted by FLOPs
    assert step_profile.load_recorded("wide").ready["dense1"] < 0.6
