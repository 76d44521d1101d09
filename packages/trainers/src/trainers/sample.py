"""TrainSample: one trajectory with its reward, group and provenance, as the trainer consumes it."""

from __future__ import annotations

from dataclasses import dataclass

from rollout_core import Trajectory, TrajectoryStatus
from rollout_core.teacher_scores import TeacherScores
from routing_state import RoutingTrace

__all__ = ["TrainSample"]


@dataclass
class TrainSample:
    """Prompt + response token ids and per-response-token provenance, aligned index by index.

    `loss_mask`, `rollout_log_probs` and `token_versions` have one entry per response token (tool tokens:
    mask 0, log-prob 0.0, version NOT_SAMPLED). `group_id` groups the samples of one prompt for GRPO/RLOO;
    `uid` names this sample. `teacher` (distillation only) has one row per response token: the teacher's scores
    of that token and, optionally, its top-k (tool tokens are scored too, never in the loss). `routing` has rows for
    positions `0 .. len(prompt)+len(response)-2` (or fewer: rows it lacks route natively). A padding sample
    (`is_padding`) is inert: zero loss mask, zero reward, its own group (see `trainers.padding`).
    """

    uid: str
    group_id: str
    data_source: str
    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[int]
    rollout_log_probs: list[float]
    token_versions: list[int]
    reward: float
    acc: float | None = None
    is_padding: bool = False
    routing: RoutingTrace | None = None
    status: TrajectoryStatus = TrajectoryStatus.OK
    num_turns: int = 0
    teacher: TeacherScores | None = None  # distillation: a teacher's scores, one row per response token

    def __post_init__(self) -> None:
        self.status = TrajectoryStatus(self.status)
        n = len(self.response_ids)
        for name in ("loss_mask", "rollout_log_probs", "token_versions"):
            got = len(getattr(self, name))
            if got != n:
                raise ValueError(f"TrainSample.{name}: expected {n} entries (one per response token), got {got}")
        if self.teacher is not None and self.teacher.num_rows != n:
            raise ValueError(
                f"TrainSample.teacher: expected {n} rows (one per response token), got {self.teacher.num_rows}"
            )
        if not self.prompt_ids:
            raise ValueError("TrainSample.prompt_ids: expected at least one prompt token, got none")
        if any(v not in (0, 1) for v in self.loss_mask):
            raise ValueError(f"TrainSample.loss_mask: expected entries in {{0, 1}}, got {sorted(set(self.loss_mask))}")
        if self.routing is not None and len(self.routing) > self.num_tokens - 1:
            raise ValueError(
                f"TrainSample.routing: a sequence of {self.num_tokens} tokens has at most {self.num_tokens - 1} "
                f"rows, got {len(self.routing)}"
            )

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)

    @property
    def num_loss_tokens(self) -> int:
        return sum(self.loss_mask)

    @classmethod
    def from_trajectory(
        cls,
        traj: Trajectory,
        *,
        uid: str,
        group_id: str,
        reward: float,
        acc: float | None = None,
        data_source: str,
    ) -> TrainSample:
        """Copies the trajectory's lists (and routing trace), so later edits to either never alias."""
        traj.check_aligned()
        return cls(
            uid=uid,
            group_id=group_id,
            data_source=data_source,
            prompt_ids=list(traj.prompt_ids),
            response_ids=list(traj.response_ids),
            loss_mask=[int(v) for v in traj.loss_mask],
            rollout_log_probs=[float(v) for v in traj.response_log_probs],
            token_versions=[int(v) for v in traj.token_versions],
            reward=float(reward),
            acc=None if acc is None else float(acc),
            routing=None if traj.routing is None else traj.routing.copy(),
            status=traj.status,
            num_turns=traj.num_turns,
        )
