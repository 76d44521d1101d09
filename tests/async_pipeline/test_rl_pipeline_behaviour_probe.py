"""BehaviourProbe's memory: it keeps at most `keep` weight copies, and none (nor a scratch model) when it is off."""

from __future__ import annotations

from async_pipeline.behaviour_probe import BehaviourProbe
from moe_models import MoEConfig, MoEForCausalLM


def _model() -> MoEForCausalLM:
    return MoEForCausalLM(MoEConfig.preset("tiny", vocab_size=40, num_hidden_layers=1))


def test_the_probe_keeps_at_most_keep_versions() -> None:
    model = _model()
    probe = BehaviourProbe(model, keep=2, sample_seqs=4, temperature=1.0, seed=0)
    for version in range(5):
        probe.record(model, version)
    assert list(probe.versions) == [3, 4] and probe.scratch is not None


def test_a_probe_that_samples_nothing_keeps_no_weights_and_no_scratch_model() -> None:
    model = _model()
    probe = BehaviourProbe(model, keep=2, sample_seqs=0, temperature=1.0, seed=0)
    for version in range(3):
        probe.record(model, version)
    assert probe.scratch is None and not probe.versions
