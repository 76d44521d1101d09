"""A runnable tour of the resume loop: `uv run python -m rollout_core.demo`.

A scripted engine (a test double, no model) generates while the "trainer" pushes new weights: once by
aborting the call (partial rollout resumes it under the new weights) and once by freezing it (pause "keep":
the call goes on under the new weights). The printout shows, per position, the token, the version that sampled
it, and the version of the routing row that predicts it, for the per-position rule and for "latest call wins".
"""

from __future__ import annotations

import argparse
import asyncio

from rollout_core.params import SamplingParams
from rollout_core.resume import generate_with_resume
from rollout_core.testing.scripted_engine import ScriptedEngine
from rollout_core.trajectory import Trajectory


def _table(traj: Trajectory, title: str) -> str:
    prompt_len = len(traj.prompt_ids)
    rows = traj.routing.versions if traj.routing is not None else []
    lines = [title, "  pos  token  kind      token_v  row_v(predicts it)"]
    for pos, tok in enumerate(traj.all_ids):
        kind = "prompt" if pos < prompt_len else "response"
        tv = traj.token_versions[pos - prompt_len] if pos >= prompt_len else "-"
        rv = rows[pos - 1] if 0 < pos <= len(rows) else "-"
        lines.append(f"  {pos:>3}  {tok:>5}  {kind:<8}  {tv!s:>7}  {rv!s:>7}")
    lag = traj.routing_version_lag()
    lines.append(
        f"  status={traj.status.value} stop={traj.stop_reason.value} resumes={traj.num_resumes} "
        f"rows={len(rows)} (tokens-1={traj.num_tokens - 1}) rows newer than their token: {int((lag > 0).sum())}"
    )
    return "\n".join(lines)


async def _run(routing: str, routing_on_abort: bool, max_new_tokens: int) -> Trajectory:
    # step 4: weights v1 arrive and the call is aborted; step 8: weights v2 arrive, the call continues (keep)
    engine = ScriptedEngine(events={4: "bump_abort", 8: "bump"}, routing_on_abort=routing_on_abort)
    params = SamplingParams(max_new_tokens=max_new_tokens, seed=7)
    return await generate_with_resume(engine, "demo", [11, 12, 13, 14], params, routing=routing)  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-new-tokens", type=int, default=10, help="response budget (default 10)")
    parser.add_argument(
        "--no-routing-on-abort",
        action="store_true",
        help="engine returns no routing for aborted calls (vLLM)",
    )
    args = parser.parse_args(argv)
    on_abort = not args.no_routing_on_abort
    for routing in ("per_position", "latest"):
        traj = asyncio.run(_run(routing, on_abort, args.max_new_tokens))
        print(_table(traj, f"routing={routing}  routing_on_abort={on_abort}"))
        print()


if __name__ == "__main__":
    main()
