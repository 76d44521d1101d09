"""The engine's step thread runs at its own torch thread count and leaves the process's alone."""

import asyncio
import threading
from collections.abc import Iterator

import pytest
import torch
from engine_adapters.native import EngineConfig, NativeEngine
from engine_adapters.native.runner import ModelRunner
from engine_adapters.native.step_thread import StepThread
from engine_adapters.native.testing import perturbed_state, tiny_model
from rollout_core import SamplingParams


@pytest.fixture
def process_at_two_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def _count_in_new_thread() -> int:
    seen: list[int] = []
    t = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
    t.start()
    t.join()
    return seen[0]


def test_a_step_thread_runs_at_its_own_count_and_new_threads_still_adopt_the_process_count(
    process_at_two_threads: None,
) -> None:
    step = StepThread(1)
    assert asyncio.run(step.run(torch.get_num_threads)) == 1
    assert torch.get_num_threads() == 2  # the caller's own count
    assert _count_in_new_thread() == 2  # what a thread started later adopts: the process's, not the step thread's
    assert asyncio.run(step.run(torch.get_num_threads)) == 1  # pinned for good, not for one call


def test_a_step_thread_without_a_count_keeps_the_process_count(process_at_two_threads: None) -> None:
    assert asyncio.run(StepThread(None).run(torch.get_num_threads)) == 2


def test_the_engine_steps_and_loads_weights_on_its_step_thread_at_step_threads(
    process_at_two_threads: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[str, str, int]] = []

    def spy(name: str):
        original = getattr(ModelRunner, name)

        def wrapped(self: ModelRunner, *args: object) -> object:
            seen.append((name, threading.current_thread().name, torch.get_num_threads()))
            return original(self, *args)

        return wrapped

    for name in ("execute", "load_weights"):
        monkeypatch.setattr(ModelRunner, name, spy(name))
    model = tiny_model(3)
    engine = NativeEngine(model, EngineConfig(slots=4), max_len=64, step_threads=1)

    async def main() -> None:
        await engine.generate("a", [2, 3, 4], SamplingParams(max_new_tokens=6, temperature=1.0, seed=1))
        await engine.update_weights(perturbed_state(model, 0), 1)
        await engine.generate("b", [2, 3, 4], SamplingParams(max_new_tokens=6, temperature=1.0, seed=1))

    asyncio.run(main())
    assert {name for name, _, _ in seen} == {"execute", "load_weights"}
    assert len({thread for _, thread, _ in seen}) == 1 and seen[0][1].startswith("native-engine-step")
    assert {count for _, _, count in seen} == {1}
    assert torch.get_num_threads() == 2


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_step_threads_must_be_none_or_a_positive_int(bad: object) -> None:
    with pytest.raises(ValueError, match="step_threads: expected None or an int >= 1"):
        NativeEngine(tiny_model(0), step_threads=bad)  # type: ignore[arg-type]
