"""Run directory, crash-safe metrics lines, truncation on resume, and plots that contain the data."""

import json

import pytest
from run_lifecycle import (
    MetricsLog,
    Panel,
    Progress,
    RunDir,
    plot_histogram,
    plot_histograms,
    plot_metrics,
    read_metrics,
)


def test_run_dir_layout(tmp_path):
    run = RunDir.create(tmp_path / "run")
    for sub in ("rollouts", "validation", "checkpoints", "plots"):
        assert (run.root / sub).is_dir()
    assert run.rollouts(3).name == "3.jsonl" and run.validation(3).parent.name == "validation"
    assert run.latest_checkpoint() is None
    run.checkpoint(2).mkdir()
    (run.checkpoint(2) / "COMPLETE").touch()
    run.checkpoint(5).mkdir()  # incomplete: ignored
    assert run.latest_checkpoint() == run.checkpoint(2)


def test_commit_checkpoint_marks_complete_and_keeps_only_the_newest(tmp_path):
    run = RunDir.create(tmp_path / "run")
    for step in (1, 2, 10, 3):
        staged = run.checkpoints / f".tmp-{step}"
        staged.mkdir()
        (staged / "state").write_text(str(step))
        assert run.commit_checkpoint(staged, step, keep=2) == run.checkpoint(step)
        assert not staged.exists() and (run.checkpoint(step) / "COMPLETE").exists()
    assert run.complete_checkpoints() == [run.checkpoint(3), run.checkpoint(10)]  # by step, not by name or age
    assert (run.checkpoint(10) / "state").read_text() == "10"
    with pytest.raises(ValueError, match="keep >= 1"):
        run.commit_checkpoint(run.checkpoints / ".tmp-x", 4, keep=0)


def test_metrics_lines_round_trip_and_skip_a_torn_tail(tmp_path):
    log = MetricsLog(tmp_path / "metrics.jsonl")
    log.log(1, {"reward/mean": 0.5, "nan": float("nan")})
    log.log(2, {"reward/mean": 0.75})
    with log.path.open("a") as f:
        f.write('{"step": 3, "rew')  # a crash in the middle of a write
    rows = read_metrics(log.path)
    assert rows == [{"step": 1, "reward/mean": 0.5, "nan": None}, {"step": 2, "reward/mean": 0.75}]


def test_truncate_after_drops_later_steps(tmp_path):
    log = MetricsLog(tmp_path / "m.jsonl")
    for s in range(1, 6):
        log.log(s, {"x": s})
    assert log.truncate_after(3) == 2
    assert [r["step"] for r in read_metrics(log.path)] == [1, 2, 3]


def test_bad_metric_names_are_rejected(tmp_path):
    with pytest.raises(ValueError, match=r"expected string names other than 'step', got \['step'\]"):
        MetricsLog(tmp_path / "m.jsonl").log(1, {"step": 2})


def test_plot_has_one_line_per_matching_metric(tmp_path):
    log = MetricsLog(tmp_path / "m.jsonl")
    for s in range(1, 4):
        log.log(s, {"reward/mean": s / 10, "val-core/add/acc/mean@4": s / 5})
    png = plot_metrics(log.path, tmp_path / "p.png", [Panel("reward", ("reward/mean",)), Panel("val", ("val-core/*",))])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    hist = plot_histogram([0, 1, 1, 2], tmp_path / "h.png", title="staleness", xlabel="versions")
    assert hist.exists()


def test_overlaid_histograms_draw_every_non_empty_series_and_say_no_data_when_all_are_empty(tmp_path):
    import matplotlib.pyplot as plt

    drawn: list[str] = []
    real_hist = plt.Axes.hist

    def spy(self, x, *args, **kwargs):
        drawn.append(kwargs["label"])
        assert abs(sum(kwargs["weights"]) - 1.0) < 1e-9  # each series normalised to its share
        return real_hist(self, x, *args, **kwargs)

    plt.Axes.hist = spy
    try:
        series = {"trained": [5, 5, 40], "excluded": [40, 40], "none": []}
        png = plot_histograms(series, tmp_path / "l.png", title="lengths", xlabel="tokens")
        empty = plot_histograms({"trained": []}, tmp_path / "e.png", title="lengths", xlabel="tokens")
    finally:
        plt.Axes.hist = real_hist
    assert drawn == ["trained (n=3, mean 16.7)", "excluded (n=2, mean 40.0)"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and empty.exists()


def test_progress_shows_latest_values(tmp_path):
    bar = Progress(3, {"reward": "reward/mean"}, disable=True)
    bar.update(1, {"reward/mean": 0.25})
    bar.update(2, {"other": 1})
    assert bar._last == {"reward": "0.25"}
    bar.close()
    json.dumps(bar._last)
