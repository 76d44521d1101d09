"""The async run's histograms read back what the run directory holds: the trained responses' staleness and
lengths from the rollout dumps (staleness only of responses that trained, status ok), and both plots written."""

from __future__ import annotations

from pathlib import Path

from async_pipeline.histograms import save_histograms, trained_staleness
from async_pipeline.lengths import trained_lengths
from rollout_core import TrajectoryStatus
from run_lifecycle import RunDir
from trainers.dumps import DumpRecord, write_dump


def _record(step: int, n: int, min_version: int, status: TrajectoryStatus) -> DumpRecord:
    return DumpRecord(
        step=step,
        uid=f"{step}-{n}",
        data_source="toy",
        prompt="p",
        response="r" * n,
        prompt_ids=[1],
        response_ids=[2] * n,
        reward=1.0,
        acc=1.0,
        ground_truth=None,
        log_probs=[-0.5] * n,
        token_versions=[min_version] * n,
        num_resumes=0,
        status=status,
        min_version=min_version,
        max_version=min_version,
    )


def test_staleness_counts_trained_responses_and_lengths_every_response(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    write_dump(run.root / "rollouts" / "1.jsonl", 1, [_record(1, 3, 0, TrajectoryStatus.OK)])
    records = [_record(3, 5, 0, TrajectoryStatus.OK), _record(3, 2, 2, TrajectoryStatus.TRUNCATED)]
    write_dump(run.root / "rollouts" / "3.jsonl", 3, records)
    assert trained_staleness(run) == [0, 2]
    assert trained_lengths(run) == [3, 5, 2]
    save_histograms(run)
    assert (run.plots / "staleness.png").is_file() and (run.plots / "lengths.png").is_file()
