"""Generation and scoring of a batch of responses: every response becomes one typed ScoredSample.

All requests go to the engine at once (it batches them). A single-turn task resumes aborted engine calls with
prompt + tokens so far (`generate_with_resume`); a task with a tool runs `run_agent_loop`: each finished turn's
text goes to the tool, whose observation is appended (as the task's renderer encodes it: by default a tool message
of the chat template, then the next generation prompt) with loss mask 0 and routing rows from the next turn's
prefill. An engine call that raises gives a trajectory with status `error`; a reward function that raises, or does
not return within `rollout.reward_timeout_s` seconds, gives a sample with status `reward_error` and the reason.
Both are counted and excluded from training, never scored 0.

Reward functions run one at a time in a daemon worker thread (so a hung one cannot block the step: its thread is
abandoned; `score_all` says what happens to it). A reward function therefore must not rely on running in the
main thread (e.g. `signal.alarm` timeouts of its own).
"""

from __future__ import annotations

import asyncio
import ctypes
import dataclasses
import queue
import threading
from collections.abc import Awaitable, Callable, Sequence

from rl_tasks.episode import Episode
from rl_tasks.example import TaskExample
from rl_tasks.renderer import Renderer
from rl_tasks.reward import RewardFn, ScoredResponse, ScoreStatus, score_safely
from rl_tasks.task import ToolEnv
from rollout_core import Engine, SamplingParams, Trajectory, TrajectoryStatus, generate_with_resume, run_agent_loop
from rollout_core.agent import ToolFn

from trainers.rollout.samples import GenRequest, SampleStatus, ScoredSample


def tool_fn(tool: ToolEnv, renderer: Renderer, example: TaskExample, episode: Episode) -> ToolFn:
    """The agent loop's callback for one episode: decodes the turn that just ended (the context after the last
    observation, special tokens dropped, as the warm-up's evaluation does) and returns the episode's ids for the
    tool's answer (and the next turn's opening)."""
    seen = len(episode.prompt_ids)
    tok = renderer.tokenizer

    def call(context: list[int]) -> list[int] | None:
        nonlocal seen
        turn = context[seen:]
        text = tok.decode(turn, skip_special_tokens=True)
        observation = tool.observation(example, text)
        if observation is None:
            return None
        ids = episode.next_turn(text, closed=bool(turn) and turn[-1] == tok.eos_id, observation=observation)
        seen = len(context) + len(ids)
        return ids

    return call


async def _generate_one(
    engine: Engine,
    renderer: Renderer,
    request: GenRequest,
    tool: ToolEnv | None,
    *,
    partial_rollout: bool,
    max_resumes: int,
) -> Trajectory:
    episode = renderer.episode(request.example)
    prompt_ids = list(episode.prompt_ids)
    params = stopping_at(request.params, renderer.tokenizer.stop_ids)
    try:
        if tool is None:
            return await generate_with_resume(
                engine,
                request.request_id,
                prompt_ids,
                params,
                partial_rollout=partial_rollout,
                max_resumes=max_resumes,
            )
        return await run_agent_loop(
            engine,
            request.request_id,
            prompt_ids,
            params,
            tool_fn(tool, renderer, request.example, episode),
            max_turns=tool.max_turns,
            partial_rollout=partial_rollout,
            max_resumes=max_resumes,
        )
    except Exception as exc:  # the engine's error marks this one sample `error`; it is counted, never trained on
        return Trajectory(prompt_ids=prompt_ids, status=TrajectoryStatus.ERROR, error=f"{type(exc).__name__}: {exc}")


def stopping_at(params: SamplingParams, stop_ids: Sequence[int]) -> SamplingParams:
    """`params` whose responses also end at `stop_ids` (the tokenizer's: its EOS and every eos id the checkpoint
    declares), whatever engine serves them."""
    missing = [i for i in stop_ids if i not in params.stop_token_ids]
    return dataclasses.replace(params, stop_token_ids=(*params.stop_token_ids, *missing)) if missing else params


AfterGroup = Callable[[Sequence[GenRequest], Sequence[Trajectory]], Awaitable[None]]


async def generate_all(
    engine: Engine,
    renderer: Renderer,
    requests: Sequence[GenRequest],
    *,
    tool: ToolEnv | None = None,
    partial_rollout: bool = True,
    max_resumes: int = 16,
    after_group: AfterGroup | None = None,
) -> list[Trajectory]:
    """Every request submitted at once; results in request order. An aborted engine call resumes with prompt +
    tokens so far (`partial_rollout`) up to `max_resumes` times. `after_group(requests, trajectories)` runs for each
    group (requests sharing a `group_id`) as soon as that group has finished, while the others still generate (e.g.
    a teacher scoring it); the call returns once every group and its `after_group` are done."""

    async def one(r: GenRequest) -> Trajectory:
        return await _generate_one(engine, renderer, r, tool, partial_rollout=partial_rollout, max_resumes=max_resumes)

    if after_group is None:
        return list(await asyncio.gather(*(one(r) for r in requests)))
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(requests):
        groups.setdefault(r.group_id, []).append(i)
    out: list[Trajectory | None] = [None] * len(requests)

    async def group(rows: list[int]) -> None:
        trajectories = await asyncio.gather(*(one(requests[i]) for i in rows))
        for i, t in zip(rows, trajectories, strict=True):
            out[i] = t
        await after_group([requests[i] for i in rows], trajectories)

    await asyncio.gather(*(group(rows) for rows in groups.values()))
    return [t for t in out if t is not None]


def response_text(renderer: Renderer, traj: Trajectory) -> str:
    """The response's text as the reward reads it: every turn without special tokens, each observation's text
    between them (`Renderer.response_text`)."""
    return renderer.response_text(traj.response_ids, traj.loss_mask)


REWARD_TIMEOUT_S = 5.0  # the default of `rollout.reward_timeout_s`


class RewardAbandoned(BaseException):
    """Raised inside a reward call that ran past its timeout (a BaseException: `except Exception` does not stop
    it), so a pure-Python loop ends at its next bytecode instead of running on in the background."""


_Job = tuple[Callable[[], ScoredResponse], list[ScoredResponse | BaseException], threading.Event]


class _RewardWorker:
    """One daemon thread that runs reward calls in order (`call`). `abandon` leaves a hung call to itself: the
    thread gets `RewardAbandoned` raised in it asynchronously and exits once the call returns; being a daemon, it
    never blocks the process's exit."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()  # held around `busy` changes: the thread is alive while busy
        self._busy = False
        self._thread = threading.Thread(target=self._run, name="reward-fn", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while (job := self._jobs.get()) is not None:
                fn, box, done = job
                with self._lock:
                    self._busy = True
                try:
                    box.append(fn())
                except RewardAbandoned:
                    raise
                except BaseException as exc:  # e.g. SystemExit from the reward function: the caller re-raises it
                    box.append(exc)
                finally:
                    with self._lock:
                        self._busy = False
                    done.set()
        except RewardAbandoned:
            return

    def call(self, fn: Callable[[], ScoredResponse], timeout_s: float) -> ScoredResponse | None:
        """`fn()`, or None when it did not return within `timeout_s` seconds."""
        box: list[ScoredResponse | BaseException] = []
        done = threading.Event()
        self._jobs.put((fn, box, done))
        if not done.wait(timeout_s) or not box:
            return None
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]

    def abandon(self) -> None:
        self._jobs.put(None)  # the thread exits after the hung call, however that ends
        with self._lock:
            if self._busy and self._thread.ident is not None:  # alive: its id cannot belong to another thread
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(self._thread.ident), ctypes.py_object(RewardAbandoned)
                )

    def close(self) -> None:
        self._jobs.put(None)


def score_all(
    renderer: Renderer,
    reward_fn: RewardFn,
    requests: Sequence[GenRequest],
    trajectories: Sequence[Trajectory],
    *,
    timeout_s: float = REWARD_TIMEOUT_S,
) -> list[ScoredSample]:
    """One ScoredSample per request, in order. Each ok trajectory's reward call may take `timeout_s` seconds; one
    that does not return by then gives `reward_error` ("TimeoutError: ...") and scoring goes on with the next
    sample. The hung call is abandoned in its worker thread: `RewardAbandoned` is raised in it (which stops Python
    code at its next bytecode; a call blocked in C, e.g. `time.sleep` or a regex, runs until it returns), its
    result is discarded, and the thread exits when the call ends or with the process."""
    if not timeout_s > 0:
        raise ValueError(f"score_all: expected timeout_s > 0, got {timeout_s}")
    out = []
    worker = _RewardWorker()
    try:
        for request, traj in zip(requests, trajectories, strict=True):
            if traj.status is not TrajectoryStatus.OK:
                out.append(ScoredSample(request, traj, "", None, SampleStatus.NOT_OK))
                continue
            text = response_text(renderer, traj)
            example = request.example
            scored = worker.call(lambda text=text, example=example: score_safely(reward_fn, text, example), timeout_s)
            if scored is None:
                worker.abandon()
                worker = _RewardWorker()
                msg = f"TimeoutError: the reward function did not return within {timeout_s:g} s (call abandoned)"
                scored = ScoredResponse(example.uid, example.data_source, ScoreStatus.ERROR, error=msg)
            status = SampleStatus.OK if scored.status is ScoreStatus.OK else SampleStatus.REWARD_ERROR
            out.append(ScoredSample(request, traj, text, scored, status))
    finally:
        worker.close()
    return out
