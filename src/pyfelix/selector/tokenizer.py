"""Tokenizer for Calico's selector language.

It follows Calico's rules exactly, because the canonical form and the ids derived from it must
match what Felix computes: only space and tab are whitespace; label characters are ASCII letters,
digits and ``_ . / -``; string literals use ``"`` or ``'`` with no escapes; operators that are
words (``in``, ``not in``, ``contains``, ``starts with``, ``ends with``) are only recognised right
after a label, so a label may itself be called ``in`` or ``all``.
"""

from __future__ import annotations

import enum

import attrs

from pyfelix.errors import PyfelixError

MAX_LABEL_LENGTH = 512
_LABEL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./-")
_WHITESPACE = " \t"


class SelectorError(PyfelixError, ValueError):
    """A selector that does not parse; ``position`` is the 0-based character offset."""

    def __init__(self, text: str, position: int, reason: str) -> None:
        super().__init__(f"invalid selector {text!r}: {reason} at position {position}")
        self.text = text
        self.position = position
        self.reason = reason


class Kind(enum.Enum):
    LABEL = "label"
    STRING = "string"
    LBRACE = "{"
    RBRACE = "}"
    COMMA = ","
    EQ = "=="
    NE = "!="
    IN = "in"
    NOT = "!"
    NOT_IN = "not in"
    CONTAINS = "contains"
    STARTS_WITH = "starts with"
    ENDS_WITH = "ends with"
    ALL = "all()"
    HAS = "has()"
    LPAREN = "("
    RPAREN = ")"
    AND = "&&"
    OR = "||"
    GLOBAL = "global()"
    EOF = "end of selector"


@attrs.frozen
class Token:
    kind: Kind
    value: str
    position: int


_PUNCTUATION = {
    "(": Kind.LPAREN,
    ")": Kind.RPAREN,
    "{": Kind.LBRACE,
    "}": Kind.RBRACE,
    ",": Kind.COMMA,
}
_TWO_CHAR = {"==": Kind.EQ, "&&": Kind.AND, "||": Kind.OR}
# Word operators that may follow a label, longest alternatives first ("not in" before "in").
_WORD_OPERATORS: tuple[tuple[tuple[str, ...], Kind], ...] = (
    (("contains",), Kind.CONTAINS),
    (("starts", "with"), Kind.STARTS_WITH),
    (("ends", "with"), Kind.ENDS_WITH),
    (("not", "in"), Kind.NOT_IN),
    (("in",), Kind.IN),
)
_FUNCTIONS = {"all(": Kind.ALL, "global(": Kind.GLOBAL}


def _skip_whitespace(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _WHITESPACE:
        pos += 1
    return pos


def _at_word_boundary(text: str, pos: int) -> bool:
    return pos >= len(text) or text[pos] not in _LABEL_CHARS


def _cut_words(text: str, pos: int, words: tuple[str, ...]) -> int | None:
    """Match words separated by optional whitespace ("notin" is accepted, as in Calico)."""
    for word in words:
        if not text.startswith(word, pos):
            return None
        pos = _skip_whitespace(text, pos + len(word))
    return pos if _at_word_boundary(text, pos) else None


def _cut_label(text: str, pos: int) -> tuple[str, int]:
    end = pos
    while end < len(text) and text[end] in _LABEL_CHARS:
        end += 1
    label = text[pos:end]
    if not label:
        raise SelectorError(text, pos, "expected a label")
    if len(label) > MAX_LABEL_LENGTH:
        raise SelectorError(text, pos, f"label longer than {MAX_LABEL_LENGTH} characters")
    return label, end


def _cut_closing_paren(text: str, pos: int, function: str, start: int) -> int:
    pos = _skip_whitespace(text, pos)
    if not text.startswith(")", pos):
        raise SelectorError(text, start, f"no closing ')' after {function}(")
    return pos + 1


def tokenize(text: str) -> list[Token]:
    """Split ``text`` into tokens, ending with an EOF token."""
    tokens: list[Token] = []
    pos = 0
    while True:
        pos = _skip_whitespace(text, pos)
        if pos >= len(text):
            tokens.append(Token(Kind.EOF, "", pos))
            return tokens
        start = pos
        char = text[pos]
        after_label = bool(tokens) and tokens[-1].kind is Kind.LABEL
        if char in _PUNCTUATION:
            tokens.append(Token(_PUNCTUATION[char], char, start))
            pos += 1
        elif char in "\"'":
            end = text.find(char, pos + 1)
            if end == -1:
                raise SelectorError(text, start, "unterminated string")
            tokens.append(Token(Kind.STRING, text[pos + 1 : end], start))
            pos = end + 1
        elif char == "!":
            if text.startswith("!=", pos):
                tokens.append(Token(Kind.NE, "!=", start))
                pos += 2
            else:
                tokens.append(Token(Kind.NOT, "!", start))
                pos += 1
        elif char in "=&|":
            pair = text[pos : pos + 2]
            if pair not in _TWO_CHAR:
                raise SelectorError(text, start, f"expected {char * 2}")
            tokens.append(Token(_TWO_CHAR[pair], pair, start))
            pos += 2
        elif after_label:
            for words, kind in _WORD_OPERATORS:
                end_pos = _cut_words(text, pos, words)
                if end_pos is not None:
                    tokens.append(Token(kind, kind.value, start))
                    pos = end_pos
                    break
            else:
                raise SelectorError(
                    text, start, f"expected an operator after label {tokens[-1].value!r}"
                )
        elif text.startswith("has(", pos):
            label, pos = _cut_label(text, _skip_whitespace(text, pos + 4))
            pos = _cut_closing_paren(text, pos, "has", start)
            tokens.append(Token(Kind.HAS, label, start))
        else:
            for prefix, kind in _FUNCTIONS.items():
                if text.startswith(prefix, pos):
                    pos = _cut_closing_paren(text, pos + len(prefix), prefix[:-1], start)
                    tokens.append(Token(kind, kind.value, start))
                    break
            else:
                label, pos = _cut_label(text, pos)
                tokens.append(Token(Kind.LABEL, label, start))


def valid_label(label: str) -> bool:
    """True if ``label`` could appear as a label name in a selector."""
    return 0 < len(label) <= MAX_LABEL_LENGTH and all(c in _LABEL_CHARS for c in label)
