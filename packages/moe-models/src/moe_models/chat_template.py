"""Chat templates: the ChatML template this package's tokenizers carry, and rendering any Jinja chat template the
way `transformers` does (`apply_chat_template` with `tokenize=False`).

Rendering matches transformers' environment for the features a template may use: a sandboxed Jinja environment
with `trim_blocks` and `lstrip_blocks`, the `loopcontrols` extension and a `raise_exception(message)` global. The
context holds `messages` (a list of `{"role", "content"}` mappings), `add_generation_prompt` and the special tokens
(`bos_token`, `eos_token`, `pad_token`), as transformers passes them.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
END_OF_TEXT = "<|endoftext|>"

# One message renders as `<|im_start|>{role}\n{content}<|im_end|>\n`, the generation prompt as
# `<|im_start|>assistant\n`; nothing depends on other messages (no default system message, no rewriting of earlier
# turns), so the text of the first k messages is a prefix of the text of the first k + 1.
CHATML_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['content'] is not string -%}"
    "{{- raise_exception('chat template: message content must be a string') -}}"
    "{%- endif -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- endif -%}"
)


# A Qwen3-style template: ChatML messages, a tool result as a user message wrapped in `<tool_response>`, and the
# `enable_thinking` option (false: every assistant turn, the generation prompt included, opens with an empty think
# block). Like CHATML_TEMPLATE it renders each message on its own, so renderings are prefix-stable.
QWEN3_STYLE_TEMPLATE = (
    "{%- set no_think = enable_thinking is defined and enable_thinking is false -%}"
    "{%- for message in messages -%}"
    "{%- if message['content'] is not string -%}"
    "{{- raise_exception('chat template: message content must be a string') -}}"
    "{%- endif -%}"
    "{%- if message['role'] == 'tool' -%}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + message['content'] + '\\n</tool_response><|im_end|>\\n' -}}"
    "{%- elif message['role'] == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if no_think -%}{{- '<think>\\n\\n</think>\\n\\n' -}}{%- endif -%}"
    "{{- message['content'] + '<|im_end|>\\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if no_think -%}{{- '<think>\\n\\n</think>\\n\\n' -}}{%- endif -%}"
    "{%- endif -%}"
)


class TemplateError(ValueError):
    """A chat template called `raise_exception`, or failed to render."""


def _raise(message: str) -> None:
    raise TemplateError(message)


@functools.lru_cache(maxsize=16)
def _compiled(template: str):
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.globals["raise_exception"] = _raise
    return env.from_string(template)


def render_chat(
    template: str,
    messages: Sequence[Mapping[str, str]],
    *,
    add_generation_prompt: bool,
    special_tokens: Mapping[str, str | None] | None = None,
    options: Mapping[str, object] | None = None,
) -> str:
    """The text `template` renders for `messages` (transformers' `apply_chat_template(..., tokenize=False)`).
    `special_tokens`: e.g. `{"eos_token": "<|im_end|>"}`, passed to the template as variables; `options`: the
    template's own variables (transformers' extra keyword arguments, e.g. `{"enable_thinking": False}`)."""
    context = {**(special_tokens or {}), **(options or {}), "messages": [dict(m) for m in messages]}
    try:
        return _compiled(template).render(**context, add_generation_prompt=add_generation_prompt)
    except TemplateError:
        raise
    except Exception as exc:  # jinja2's own errors (undefined variables, syntax): a template that cannot render
        raise TemplateError(f"chat template: expected it to render {len(messages)} messages, got {exc!r}") from exc
