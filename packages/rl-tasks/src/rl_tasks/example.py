"""TaskExample: one prompt with its verifiable ground truth."""

from __future__ import annotations

from dataclasses import dataclass

CHAT_ROLES = ("system", "user", "assistant", "tool")


@dataclass(frozen=True)
class ChatMessage:
    """One chat turn of a verl-style prompt (`{"role": ..., "content": ...}`)."""

    role: str
    content: str

    def __post_init__(self) -> None:
        if self.role not in CHAT_ROLES:
            raise ValueError(f"ChatMessage.role: expected one of {CHAT_ROLES}, got {self.role!r}")
        if not isinstance(self.content, str):
            raise ValueError(f"ChatMessage.content: expected a str, got {type(self.content).__name__}")


@dataclass(frozen=True)
class TaskExample:
    """A prompt and the answer its reward function checks against.

    Invariants: `uid` is unique within a split; `prompt` is the exact text fed to a plain (character or
    no-template) tokenizer. When the source gave a chat list, `messages` holds it verbatim (for a tokenizer
    chat template) and `prompt` is the contents joined by blank lines; for plain-string prompts `messages`
    is empty.
    """

    uid: str
    data_source: str
    prompt: str
    ground_truth: str
    messages: tuple[ChatMessage, ...] = ()

    def __post_init__(self) -> None:
        for name in ("uid", "data_source", "prompt", "ground_truth"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise ValueError(f"TaskExample.{name}: expected a str, got {type(value).__name__}")
        if not self.uid:
            raise ValueError("TaskExample.uid: expected a non-empty str, got ''")
        if not self.data_source:
            raise ValueError(f"TaskExample.data_source: expected a non-empty str for uid {self.uid!r}, got ''")
