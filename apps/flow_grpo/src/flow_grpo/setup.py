"""FlowSetup: what a run prepares before it trains: its directory (claimed, locked), the cached base model and
reward classifier, the backend, the rewards, and where the rollouter runs (this process or a Ray actor)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from flow_models.base_cache import ensure_base, ensure_classifier
from flow_models.classifier import ClassifierConfig, DigitClassifier
from flow_models.digits import IMAGE_SIZE, NUM_CLASSES, load_digit_splits
from flow_models.reward_config import ClassifierRewardConfig
from flow_models.rewards import RewardFn
from flow_models.velocity_config import VelocityConfig
from recipes.setup import claim_run_dir
from rl_pipeline.transport import LocalRollouts, RayRollouts, Rollouts
from run_logging import MetricsLog, RunDir, RunLock
from trainers.flow.backend import FlowBackend

from flow_grpo.cli import DEFAULT_RUNS_ROOT
from flow_grpo.config import FlowConfig
from flow_grpo.rewards import RewardSpec
from flow_grpo.rollouter import RollouterSpec


@dataclass
class FlowSetup:
    cfg: FlowConfig
    run: RunDir
    lock: RunLock  # held until `close`
    log: MetricsLog
    backend: FlowBackend
    rollouts: Rollouts
    reward: RewardFn
    classifier: DigitClassifier
    classifier_val_acc: float
    model_cfg: VelocityConfig
    session: object | None  # ray_session.session.RaySession when pipeline.ray

    def close(self) -> None:
        try:
            self.rollouts.close()
        finally:
            if self.session is not None:
                self.session.close()  # type: ignore[attr-defined]
            self.lock.release()


def classifier_config(cfg: FlowConfig) -> ClassifierConfig:
    """The reward's classifier settings, or the default classifier's when the reward is another kind (validation
    always reports the classifier's judgement)."""
    r = cfg.reward if isinstance(cfg.reward, ClassifierRewardConfig) else ClassifierRewardConfig()
    return ClassifierConfig(hidden=r.hidden, steps=r.steps, seed=r.seed)


def fit_digits(model: VelocityConfig) -> VelocityConfig:
    """`model` when its image shape and classes are the digits' (else ValueError: the data fix them)."""
    shape = (model.image_size, model.channels, model.num_classes)
    if shape != (IMAGE_SIZE, 1, NUM_CLASSES):
        raise ValueError(
            f"model.image_size, channels, num_classes: expected {IMAGE_SIZE}, 1, {NUM_CLASSES} (the digits'), got "
            f"{', '.join(map(str, shape))}"
        )
    return model


def _rollouts(cfg: FlowConfig, spec: RollouterSpec) -> tuple[Rollouts, object | None]:
    if not cfg.pipeline.ray:
        return LocalRollouts(spec), None
    from ray_session.session import RaySession
    from recipes.cli import exit_on_sigterm

    session = RaySession.open(cfg.ray, app="flow_grpo")
    exit_on_sigterm()  # ray.init installs its own SIGTERM handler
    try:
        return RayRollouts(spec, session.rollouter_options(0), cfg.ray.call_timeout_s), session
    except BaseException:
        session.close()
        raise


def prepare(cfg: FlowConfig, *, resume: bool) -> FlowSetup:
    run, lock = claim_run_dir(cfg, resume=resume, runs_root=DEFAULT_RUNS_ROOT)  # type: ignore[arg-type]
    try:
        data = load_digit_splits()
        cache = Path(cfg.run.warmup_cache).resolve()
        clf_cfg = classifier_config(cfg)
        classifier, clf_acc = ensure_classifier(clf_cfg, data, cache)
        model_cfg, sampler = fit_digits(cfg.model), cfg.sampler
        base = ensure_base(model_cfg, cfg.warmup, data, cache)
        total = cfg.run.steps * cfg.train.mini_batches_per_step * cfg.train.epochs
        backend = FlowBackend(base, cfg.optim, sampler, with_reference=cfg.algorithm.beta > 0, total_steps=total)
        reward_spec = RewardSpec(cfg.reward, clf_cfg.hidden, {k: v.numpy() for k, v in classifier.state_dict().items()})
        threads = cfg.ray.rollouter_threads if cfg.pipeline.ray else cfg.run.torch_threads
        spec = RollouterSpec(
            model_cfg,
            {k: v.numpy() for k, v in base.state_dict().items()},
            sampler,
            cfg.rollout.prompts_per_step,
            cfg.rollout.samples_per_prompt,
            reward_spec,
            cfg.run.seed,
            threads,
        )
        rollouts, session = _rollouts(cfg, spec)
    except BaseException:
        lock.release()
        raise
    return FlowSetup(
        cfg,
        run,
        lock,
        MetricsLog(run.metrics),
        backend,
        rollouts,
        reward_spec.build(),
        classifier,
        clf_acc,
        model_cfg,
        session,
    )
