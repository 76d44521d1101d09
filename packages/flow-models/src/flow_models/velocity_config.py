"""The `model` section: the shape of the class-conditional velocity model (`flow_models.velocity.VelocityMLP`).
Standard library only (`--help` imports it); the model is `VelocityMLP(config)`."""

from __future__ import annotations

from dataclasses import dataclass

from run_lifecycle.fields import help_field


@dataclass(frozen=True)
class VelocityConfig:
    """Images of `channels x image_size x image_size` pixels in `num_classes` classes (the defaults are the 8x8
    digits'), through `depth` residual blocks of width `hidden` modulated by a `time_dim`-wide sigma embedding."""

    image_size: int = help_field("side of the square images, in pixels (the digits: 8)", 8)
    channels: int = help_field("image channels (the digits: 1)", 1)
    num_classes: int = help_field("class labels the model is conditioned on (the digits: 10)", 10)
    hidden: int = help_field("width of the velocity MLP", 256)
    depth: int = help_field("residual blocks of the velocity MLP", 3)
    time_dim: int = help_field("sinusoidal sigma-embedding width (even)", 64)

    def __post_init__(self) -> None:
        for name in ("image_size", "channels", "num_classes", "hidden", "depth", "time_dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"model.{name}: expected >= 1, got {getattr(self, name)}")
        if self.time_dim % 2:
            raise ValueError(f"model.time_dim: expected an even number, got {self.time_dim}")

    @property
    def pixels(self) -> int:
        return self.channels * self.image_size * self.image_size
