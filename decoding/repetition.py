"""The decoding rule: deterministic changes to greedy's choice that look at the reply so far (and at the prompt
only for the numbers it states).

A small model decoding greedily falls into loops ("Click the reset button again. / You will be asked to enter
a new password." until the token limit), and states prices the help article never gave. A `RepetitionRule`
changes the engine's decoding rule, not LLMA: at each position the choice is the argmax of that position's
logits after the rule's bans and penalties, and both depend on the reply before the position and on the
prompt's numbers only -- repeats are looked for in the reply alone, so the help article and approved answers
stay free to copy. Greedy and LLMA choose through the same rule row by row (a draft's row j as if the reply
were the reply so far plus draft[:j]), so LLMA still equals this rule decoded one token at a time.

Cost per row: one scan of the reply for earlier occurrences of its last token (`list.index`, in C), then a
walk back of at most `MAX_MATCH` tokens from each; only tokens that followed such an occurrence are touched,
never the vocabulary.
"""

import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, fields, replace
from functools import cached_property

import torch

MAX_MATCH = 64  # repeats are measured up to this many tokens; a DRY penalty stops growing there
MAX_PENALTY = 1e30  # a DRY penalty past this is a ban anyway; capped so it stays finite in float32


@dataclass(frozen=True)
class RepetitionRule:
    """Which repetition controls decide each token; the defaults (all three off) are plain greedy, exactly.

    no_repeat_ngram n: a token that would complete an n-gram already in the reply is banned (logit -inf).
    dry_*: llama.cpp's "don't repeat yourself": if the longest suffix of the reply that, followed by a token,
    already occurred in the reply is at least `dry_allowed_length` long, that token's logit loses
    `dry_multiplier * dry_base ** (length - dry_allowed_length)`, in float32.
    stop_ngram n: the reply ends as soon as its last n tokens already occurred in it, and is cut back to
    before them (DecodeResult.drop_repeat): the reply keeps one copy of what it started repeating, not a
    half of the second. The cut falls where the identical tokens begin, which can be mid-line (a list's
    next number is not part of the repeat). Checked per accepted token, so it fires at the same token
    whether tokens land one or many at a time.
    """

    no_repeat_ngram: int = 0
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    stop_ngram: int = 0
    # Ending on time: past `end_after` reply tokens, the end-of-sequence token's logit gains `end_bonus` per further
    # token, so a rambling reply ends at its next natural stop (EOS is likely only there) instead of the limit.
    end_after: int = 0
    end_bonus: float = 0.0
    eos_token_id: int | None = None  # the tokenizer's; set with for_tokenizer, needed for the end bonus
    # Grounded numbers: a digit may only extend the reply's number so far into a prefix of a number in the
    # prompt (the help article, the approved answer, the conversation); a number that starts a line (a list's
    # "1.") is free. The tokens are the tokenizer's (for_tokenizer): digits and the "." and "," inside numbers,
    # each with its character, and the tokens that end a line.
    ground_numbers: bool = False
    number_chars: tuple[tuple[int, str], ...] = ()
    line_break_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.no_repeat_ngram != 0 and not 2 <= self.no_repeat_ngram <= MAX_MATCH + 1:
            raise ValueError(f"no_repeat_ngram must be 0 (off) or 2..{MAX_MATCH + 1}, not {self.no_repeat_ngram}")
        if self.dry_multiplier < 0 or self.dry_base <= 1 or not 1 <= self.dry_allowed_length <= MAX_MATCH:
            raise ValueError("DRY needs multiplier >= 0 (0: off), base > 1 and 1 <= allowed_length <= MAX_MATCH")
        if self.stop_ngram != 0 and not 1 <= self.stop_ngram <= MAX_MATCH:
            raise ValueError(f"stop_ngram must be 0 (off) or 1..{MAX_MATCH}, not {self.stop_ngram}")

        if self.end_bonus < 0 or self.end_after < 0:
            raise ValueError("end_after and end_bonus must not be negative")

    @property
    def changes_choice(self) -> bool:
        """Whether a ban, a penalty, the end bonus or number grounding is on (the stop rule alone leaves every
        choice greedy's)."""
        return self.no_repeat_ngram > 0 or self.dry_multiplier > 0 or self.ends_on_time or self.grounds_numbers

    @cached_property
    def grounds_numbers(self) -> bool:
        return self.ground_numbers and any(char.isdigit() for _, char in self.number_chars)

    @cached_property
    def _number_char(self) -> dict[int, str]:
        """number_chars as a lookup, built once per rule rather than once per row."""
        return dict(self.number_chars)

    @property
    def ends_on_time(self) -> bool:
        return self.end_bonus > 0 and self.eos_token_id is not None

    def for_tokenizer(self, eos_token_id: int | None, tokenizer=None) -> "RepetitionRule":
        """This rule knowing which token ends a reply (the end bonus needs it) and, to ground numbers, the
        tokenizer's digit and line-break tokens."""
        rule = replace(self, eos_token_id=eos_token_id) if self.end_bonus > 0 else self
        if self.ground_numbers and tokenizer is not None:
            chars, line_breaks = number_tokens(tokenizer)
            rule = replace(rule, number_chars=chars, line_break_ids=line_breaks)
        return rule

    def numbers_in(self, prompt_ids: Sequence[int]) -> frozenset[str]:
        """Every prefix of every number the prompt states: what a grounded reply's numbers may be."""
        if not self.grounds_numbers:
            return frozenset()
        prefixes = set()
        for number in _numbers(prompt_ids, self._number_char):
            prefixes.update(number[: i + 1] for i in range(len(number)))
        return frozenset(prefixes)

    def adjusted(
        self, logits: torch.Tensor, reply: Sequence[int], grounded: frozenset[str] = frozenset()
    ) -> torch.Tensor:
        """The logits (V,) of a position whose reply before it is `reply`, after the rule's bans and penalties:
        `logits` itself where nothing changes, else a float32 copy. `grounded` is numbers_in(the prompt). The token
        chosen there is the first index of the largest (decoding/verifier.py, first_argmax)."""
        penalties = self.penalties(reply, grounded) if self.changes_choice else {}
        if not penalties:
            return logits
        row = logits.to(torch.float32, copy=True)  # (V,) float32: exact for bf16 and fp32 logits alike
        ids = torch.tensor(list(penalties), device=row.device)
        row[ids] -= torch.tensor(list(penalties.values()), dtype=torch.float32, device=row.device)
        return row

    def choose(self, logits: torch.Tensor, reply: Sequence[int], grounded: frozenset[str] = frozenset()) -> int:
        """The token at that position: the first index of the largest adjusted logit (a NaN above any number), as
        torch's argmax picks it, and as the verifier's first_argmax does."""
        return int(self.adjusted(logits, reply, grounded).float().argmax())

    def penalties(self, reply: Sequence[int], grounded: frozenset[str] = frozenset()) -> dict[int, float]:
        """What each token's logit loses after `reply` (math.inf: banned); tokens not listed lose nothing."""
        reach = max(self.no_repeat_ngram - 1, MAX_MATCH if self.dry_multiplier > 0 else 0)
        penalties = {}
        for token, length in repeat_lengths(reply, reach).items():
            if self.no_repeat_ngram and length >= self.no_repeat_ngram - 1:
                penalties[token] = math.inf
            elif self.dry_multiplier > 0 and length >= self.dry_allowed_length:
                grown = self.dry_multiplier * self.dry_base ** (length - self.dry_allowed_length)
                penalties[token] = min(grown, MAX_PENALTY)
        if self.ends_on_time and len(reply) > self.end_after and penalties.get(self.eos_token_id) != math.inf:
            bonus = self.end_bonus * (len(reply) - self.end_after)
            penalties[self.eos_token_id] = penalties.get(self.eos_token_id, 0.0) - bonus
        if self.grounds_numbers:
            penalties.update(dict.fromkeys(self.ungrounded_digits(reply, grounded), math.inf))
        return penalties

    def ungrounded_digits(self, reply: Sequence[int], grounded: frozenset[str]) -> list[int]:
        """The digit tokens that would make the reply's number so far one the prompt does not state."""
        number, start = _trailing_number(reply, self._number_char)
        if start == 0 or reply[start - 1] in self.line_break_ids:
            return []  # a number that starts a line: a list's marker, or a line's first word
        return [token for token, char in self.number_chars if char.isdigit() and number + char not in grounded]

    def stops(self, reply: Sequence[int]) -> bool:
        """Whether the reply's last `stop_ngram` tokens already occurred earlier in it (overlaps count)."""
        return self.stop_ngram > 0 and longest_repeat(reply, self.stop_ngram) >= self.stop_ngram

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "RepetitionRule":
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"not repetition-rule settings: {sorted(unknown)}")
        data = dict(data)  # JSON keeps tuples as lists; the rule is frozen and compared by value
        if "number_chars" in data:
            data["number_chars"] = tuple((int(token), str(char)) for token, char in data["number_chars"])
        if "line_break_ids" in data:
            data["line_break_ids"] = tuple(data["line_break_ids"])
        return cls(**data)


REPETITION_OFF = RepetitionRule()  # plain greedy (CHATBOT_REPETITION=off)
# The rule to decode helpdesk replies with. Measured on the bundled SmolLM2-135M (bf16, 4-wide packed steps, the
# first wording of 12 shipped question groups with their help article, 256 new tokens): plain greedy looped on 11
# replies and ended by EOS on 1; DRY at llama.cpp's suggested settings looped on none, ended 7 by EOS, and read as
# well as greedy where greedy was fine. A 4-gram ban also ended the loops but garbled the wording it had to avoid
# ("a two part code that contains a two part number"). The stop rule alone ended every loop at n=12 (at n=16, 4 of 12
# still looped: list numbers cut the repeats short) but left replies ending mid-list ('Click "Sign Out" again.\n12'),
# so here it is a backstop: under DRY a 16-token repeat means penalties up to 0.8 * 1.75**13 were overridden in a row.
# The end bonus (issue 19, `python -m bench.quality`, 18 questions apart from those the prompt was chosen on): DRY alone
# left 6 of 18 replies rambling to 256 tokens; with EOS gaining 0.05 a token past 96 tokens all 18 ended by EOS, at
# a sentence's or list's end, mean length 156 -> 122 tokens (0.1 past 128: the same, 124).
# Grounded numbers (issue 19, the same 24 held-out questions, docs/quality): numbers, prices, URLs and e-mail
# addresses the prompt does not hold fell from 0.67 to 0.08 a reply (1.25 before the rule); "What plans do you
# offer" lists the article's prices instead of made-up ones; lengths, endings and speed unchanged.
RECOMMENDED_REPETITION_RULE = RepetitionRule(
    dry_multiplier=0.8, dry_base=1.75, dry_allowed_length=2, stop_ngram=16, end_after=96, end_bonus=0.05,
    ground_numbers=True,
)
NAMED_RULES = {"dry": RECOMMENDED_REPETITION_RULE, "off": REPETITION_OFF}  # the choices of CHATBOT_REPETITION


NUMBER_JOINERS = ".,"  # inside a number ("12.50", "10,000"), never its first or last character


def number_tokens(tokenizer) -> tuple[tuple[tuple[int, str], ...], tuple[int, ...]]:
    """(token, character) for every token that is one digit, "." or ","; and the tokens that end a line."""
    chars, line_breaks = [], []
    for token in range(len(tokenizer)):
        text = tokenizer.decode([token])
        if len(text) == 1 and (text.isdigit() and text.isascii() or text in NUMBER_JOINERS):
            chars.append((token, text))
        elif text.endswith("\n"):
            line_breaks.append(token)
    return tuple(chars), tuple(line_breaks)


def _trailing_number(reply: Sequence[int], chars: dict[int, str]) -> tuple[str, int]:
    """The number the reply ends with so far ("" when the next digit would start one) and where it starts."""
    start = len(reply)
    while start > 0 and reply[start - 1] in chars:
        start -= 1
    while start < len(reply) and not chars[reply[start]].isdigit():  # a number starts with a digit
        start += 1
    number = "".join(chars[token] for token in reply[start:])
    if number and not number[-1].isdigit() and not number[-2:-1].isdigit():
        return "", len(reply)  # "1.," or ". ": no number goes on from here
    return number, start


def _numbers(ids: Sequence[int], chars: dict[int, str]) -> list[str]:
    """The numbers in a token sequence: runs of digits with "." or "," inside."""
    numbers, run = [], ""
    for token in [*ids, None]:
        char = chars.get(token) if token is not None else None
        if char is not None and (char.isdigit() or run):
            run += char
            continue
        numbers.append(run.rstrip(NUMBER_JOINERS))
        run = ""
    return [number for number in numbers if number]


def repeat_lengths(reply: Sequence[int], cap: int = MAX_MATCH) -> dict[int, int]:
    """For each token that would extend a repeat: the longest suffix of `reply` that, followed by that
    token, already occurred in `reply` (at most `cap`). Tokens not listed extend no repeat."""
    lengths: dict[int, int] = {}
    last = len(reply) - 1
    if last < 1 or cap < 1:
        return lengths
    for p in _earlier_positions(reply, reply[last], last):
        length = _common_suffix(reply, p, last, cap)
        follower = reply[p + 1]
        lengths[follower] = max(length, lengths.get(follower, 0))
    return lengths


def longest_repeat(reply: Sequence[int], cap: int = MAX_MATCH) -> int:
    """The longest suffix of `reply` that also ends at an earlier position (at most `cap`)."""
    last = len(reply) - 1
    longest = 0
    for p in _earlier_positions(reply, reply[last], last) if last >= 1 else ():
        longest = max(longest, _common_suffix(reply, p, last, cap))
        if longest >= cap:
            break
    return longest


def _earlier_positions(seq: Sequence[int], token: int, end: int) -> Iterator[int]:
    """Positions before `end` that hold `token`."""
    position = -1
    while True:
        try:
            position = seq.index(token, position + 1, end)
        except ValueError:
            return
        yield position


def _common_suffix(seq: Sequence[int], a: int, b: int, cap: int) -> int:
    """How many tokens ending at `a` equal those ending at `b` (a < b), at most `cap`."""
    n = 0
    while n < cap and n <= a and seq[a - n] == seq[b - n]:
        n += 1
    return n
