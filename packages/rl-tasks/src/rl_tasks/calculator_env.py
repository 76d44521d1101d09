"""The calculator tool of the calculator task: the model adds numbers by calling it, then states the sum.

Text format (prompt, then the model's turns and the tool's observations):

    prompt       12,34,56:          the numbers to add, comma-separated
    model turn   12+34              a tool call: two unsigned integers of at most `max_operand_digits` digits
    observation  =46;               the tool's result (written only by the tool)
    model turn   46+56
    observation  =102;
    model turn   #102               the final answer; the episode ends

so the whole response reads `12+34=46;46+56=102;#102`. Any turn that is not a well-formed call (the final answer
included) ends the episode: the tool never answers a malformed call.
"""

from __future__ import annotations

from dataclasses import dataclass

from rl_tasks.example import TaskExample
from rl_tasks.task import Piece

CALCULATOR_SOURCE = "calculator"
MAX_OPERAND_DIGITS = 6
TERM_SEPARATOR = ","
PROMPT_END = ":"
CALL_OPERATOR = "+"
RESULT_START = "="
RESULT_END = ";"
ANSWER_START = "#"
CALCULATOR_ALPHABET = "".join(
    sorted("0123456789" + TERM_SEPARATOR + PROMPT_END + CALL_OPERATOR + RESULT_START + RESULT_END + ANSWER_START)
)


def format_prompt(terms: tuple[int, ...]) -> str:
    return TERM_SEPARATOR.join(map(str, terms)) + PROMPT_END


def parse_prompt(prompt: str) -> tuple[int, ...]:
    """The numbers of a calculator prompt (`12,34,56:` -> (12, 34, 56))."""
    body = prompt.removesuffix(PROMPT_END)
    parts = body.split(TERM_SEPARATOR)
    if body == prompt or not all(p.isdigit() and p.isascii() for p in parts):
        raise ValueError(f"calculator prompt: expected comma-separated digits ending in ':', got {prompt!r}")
    return tuple(int(p) for p in parts)


def format_answer(value: int) -> str:
    return f"{ANSWER_START}{value}"


@dataclass(frozen=True)
class CalculatorEnv:
    """The deterministic adding tool. `max_turns` counts model turns (calls and the final answer); a call's
    operands have 1 to `max_operand_digits` ASCII digits each (leading zeros allowed)."""

    max_turns: int
    max_operand_digits: int = MAX_OPERAND_DIGITS

    def __post_init__(self) -> None:
        if self.max_turns < 1 or not 1 <= self.max_operand_digits <= MAX_OPERAND_DIGITS:
            raise ValueError(
                f"CalculatorEnv: expected max_turns >= 1 and 1 <= max_operand_digits <= {MAX_OPERAND_DIGITS}, got "
                f"{self.max_turns}, {self.max_operand_digits}"
            )

    @property
    def max_observation_chars(self) -> int:
        """The longest observation any turn can get: the sum of two operands has one digit more than them."""
        return len(RESULT_START) + self.max_operand_digits + 1 + len(RESULT_END)

    def _operands(self, turn_text: str) -> tuple[int, int] | None:
        parts = turn_text.split(CALL_OPERATOR)
        if len(parts) != 2 or not all(
            1 <= len(p) <= self.max_operand_digits and p.isascii() and p.isdigit() for p in parts
        ):
            return None
        return int(parts[0]), int(parts[1])

    def observation(self, example: TaskExample, turn_text: str) -> str | None:
        """`=<a+b>;` for the call `a+b`; None (the episode ends) for anything else."""
        operands = self._operands(turn_text)
        if operands is None:
            return None
        return f"{RESULT_START}{operands[0] + operands[1]}{RESULT_END}"

    def demonstration(self, example: TaskExample) -> tuple[Piece, ...]:
        """The expert episode: add the numbers left to right, one call per addition, then answer. Every
        observation is this tool's own output."""
        terms = parse_prompt(example.prompt)
        pieces: list[Piece] = []
        total = terms[0]
        for term in terms[1:]:
            call = f"{total}{CALL_OPERATOR}{term}"
            result = self.observation(example, call)
            if result is None:
                raise ValueError(f"calculator demonstration of {example.uid!r}: the call {call!r} is not well formed")
            pieces += [Piece(call, trainable=True), Piece(result, trainable=False)]
            total += term
        pieces.append(Piece(format_answer(total), trainable=True))
        return tuple(pieces)
