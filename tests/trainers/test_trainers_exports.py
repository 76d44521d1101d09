"""`trainers` exposes its three trainers (sync PPO, which runs on-policy distillation too, and FlowGRPO, with the
teacher side of distillation) and every name it exports resolves, lazily, to the object its module defines."""

from __future__ import annotations

import importlib

import trainers


def test_every_export_of_trainers_resolves_to_its_modules_object() -> None:
    from trainers import _EXPORTS

    for name, module in _EXPORTS.items():
        assert getattr(trainers, name) is getattr(importlib.import_module(module), name), name


def test_no_export_is_named_after_its_own_module() -> None:
    """Such a name is the function only until something imports the submodule, which rebinds the package's
    attribute to the module (so `from trainers import name` would depend on import order)."""
    from trainers import _EXPORTS

    assert [n for n, m in _EXPORTS.items() if m.rsplit(".", 1)[1] == n] == []


def test_the_three_trainers_and_the_teacher_side_are_exported() -> None:
    from trainers.distillation.stream import TeacherStream
    from trainers.flow.trainer import FlowGRPO
    from trainers.sync_ppo.trainer import SyncPPO

    assert (trainers.SyncPPO, trainers.FlowGRPO, trainers.TeacherStream) == (SyncPPO, FlowGRPO, TeacherStream)
