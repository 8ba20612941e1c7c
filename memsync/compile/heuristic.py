"""The default compiler: deterministic, rule-based extraction of memories from text.

Text comes from ``memsync.compile.text.passages``; only passages that speak for the
subject make first-person claims about it. Assistant and system messages can still
yield decisions and facts.

Text is cut into sentences, then into clauses at "and I…"/"but we…"; each clause yields
at most one claim (the first rule that matches), and rules are ordered so that a
negation or a past tense is recognised before the plain statement it contains. A clause
yields nothing when it is

- a question (ends with ``?`` or starts with an auxiliary: "do I…", "should we…");
- hypothetical ("if I moved to Rome", "maybe I'll", "I might", "I would");
- inside quotes ("he said 'I live in Paris'"): quoted spans are removed first.

Every episode also yields one ``episode_summary``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from memsync.compile.claims import ClaimRegistry
from memsync.compile.text import Passage, passages
from memsync.compile.types import CandidateMemory, EpisodeView, MemoryKind, in_episode_order

__all__ = ["SUMMARY_LENGTH", "HeuristicCompiler"]

SUMMARY_LENGTH = 160

_TERMINATORS = (
    r"and|but|because|since|as|where|which|who|when|while|with|for|from|over|instead|"
    r"now|anymore|any more|again|currently|these days|this week|this month|this weekend|"
    r"this year|today|tonight|tomorrow|at the moment|right now|until|till|next|last"
)
# A value runs to the end of the clause, punctuation, or a word that starts a new idea.
_VALUE = rf"(?P<value>[^,;:!?()\"]+?)(?=$|[,;:!?()\"]|\s+(?:{_TERMINATORS})\b)"
_I_AM = r"i(?:'m| am)"
_TEMPORARY = (
    r"this week|this month|this weekend|today|tonight|at the moment|right now|for now|"
    r"for (?:a|the|two|three|few) |until |till |currently"
)
_ROLE_NOUNS = (
    r"engineer|developer|programmer|manager|designer|scientist|lead|director|analyst|"
    r"architect|consultant|researcher|administrator|admin|officer|founder|cto|ceo|cfo|"
    r"intern|student|teacher|writer|editor|recruiter|marketer|salesperson|support agent"
)
# Plans and tiers the subject is on: "the Enterprise plan", "the Gold tier".
_I_OR_WE_ARE = rf"(?:{_I_AM}|we(?:'re| are))"
_PLAN_NOUN = r"(?P<thing>plan|tier|subscription)"
# One to three words, but not one that points elsewhere ("the same plan as Bob").
_PLAN_NAME = (
    r"(?!(?:the|an?|our|my|same|other|wrong|right|this|that|which|what)\b)"
    r"(?P<value>[\w+-]+(?: [\w+-]+){0,2}?)"
)
_PLAN = rf"(?:the |an? |our |my )?{_PLAN_NAME} {_PLAN_NOUN}\b"
# Roles on the account the subject uses, as opposed to jobs. A scope is required, so
# "I'm an admin" stays a job ("employment.role").
_ACCOUNT_SCOPE = r"account|workspace|organi[sz]ation|org|subscription|tenant|instance"
_ACCOUNT_ROLE = r"(?P<role>owner|admin|administrator|contact)s?"


@dataclass(frozen=True, slots=True)
class _Caseless:
    """A case-insensitive pattern, run on ASCII text as a case-sensitive pattern over the
    text lowercased: the same matches at the same places (ASCII text has no case folds
    but A-Z, which the pattern, written in lowercase, would meet as a-z), about twice as
    fast, as Python's ``re`` tries both cases of every literal under ``IGNORECASE``.
    A match's positions and group names are the text's; its strings may be lowercased
    (read them from the text: :meth:`groups`)."""

    source: str
    folding: re.Pattern[str]
    lowered: re.Pattern[str]

    @classmethod
    def compile(cls, source: str) -> _Caseless:
        # Escapes (\S, \W) and group names may be capitals; a literal capital, or a
        # letter outside ASCII (the Kelvin sign folds to k), would match differently.
        literal = re.sub(r"\\.|[(][?]P<\w+>|[(][?]P=\w+[)]", "", source)
        if any(char.isupper() or (char.isalpha() and not char.isascii()) for char in literal):
            raise ValueError(f"a caseless pattern is written in lowercase ASCII: {source!r}")
        return cls(source, re.compile(source, re.IGNORECASE), re.compile(source))

    def search(self, text: str) -> re.Match[str] | None:
        if text.isascii():
            return self.lowered.search(text.lower())
        return self.folding.search(text)

    def match(self, text: str) -> re.Match[str] | None:
        if text.isascii():
            return self.lowered.match(text.lower())
        return self.folding.match(text)

    @staticmethod
    def groups(found: re.Match[str], text: str) -> dict[str, str]:
        """The named groups of ``found`` (a match in ``text``) that matched something,
        as ``text`` spells them."""
        spans = {name: found.span(name) for name in found.re.groupindex}
        return {name: text[start:end] for name, (start, end) in spans.items() if end > start}


@dataclass(frozen=True, slots=True)
class _Rule:
    """One pattern and what a match means.

    ``claim_key`` ``None`` means the clause itself is the content (decisions, facts).
    ``proper_noun`` demands a capitalised value (cities, employers, names) so that
    "I'm in a meeting" is not a location. ``value_template`` builds the value from
    several groups, so that two wordings of one claim ("the account owner", "the owner
    of the account") give one value.

    ``opens`` are the words (lowercase) a clause the rule matches starts with, each
    followed by a character that is not a letter, digit or underscore, or the end;
    ``None`` when it may start with any. They let a clause skip the rules that cannot
    match it (tests/unit/compile/test_heuristic_shortcuts.py checks them against the
    pattern).
    """

    name: str
    pattern: _Caseless
    kind: MemoryKind
    claim_key: str | None
    template: str
    first_person: bool = True
    negated: bool = False
    explicit_change: bool = False
    proper_noun: bool = False
    confidence: float = 0.8
    value_template: str | None = None
    opens: tuple[str, ...] | None = ("i",)


def _rule(name: str, pattern: str, kind: MemoryKind, claim_key: str | None, template: str,
          **options: Any) -> _Rule:  # fmt: skip
    return _Rule(name, _Caseless.compile(pattern), kind, claim_key, template, **options)


_PROFILE = MemoryKind.PROFILE_FACT
_STATE = MemoryKind.CURRENT_STATE
_PREFERENCE = MemoryKind.PREFERENCE
_DECISION = MemoryKind.DECISION

# Order matters: the first rule that matches a clause wins.
_RULES: tuple[_Rule, ...] = (
    # identity
    _rule(
        "name",
        rf"^my name is {_VALUE}",
        _PROFILE,
        "identity.name",
        "Name is {value}",
        proper_noun=True,
        confidence=0.9,
        opens=("my",),
    ),
    _rule(
        "name_call_me",
        rf"^(?:please )?call me {_VALUE}",
        _PROFILE,
        "identity.name",
        "Name is {value}",
        proper_noun=True,
        opens=("please", "call"),
    ),
    # employment: negation and past before the plain statement
    _rule(
        "employer_no_longer",
        rf"^i (?:no longer|don't|do not) work (?:at|for) {_VALUE}",
        _PROFILE,
        "employment.current_employer",
        "No longer works at {value}",
        negated=True,
        proper_noun=True,
        confidence=0.9,
    ),
    _rule(
        "employer_left",
        rf"^i(?: have|'ve)? (?:left|quit) {_VALUE}",
        _PROFILE,
        "employment.current_employer",
        "No longer works at {value}",
        negated=True,
        proper_noun=True,
        confidence=0.9,
    ),
    _rule(
        "employer_past",
        rf"^i (?:used to work|worked) (?:at|for) {_VALUE}",
        _PROFILE,
        "employment.previous_employer",
        "Previously worked at {value}",
        proper_noun=True,
    ),
    _rule(
        "employer_change",
        rf"^i(?: have|'ve)? (?:now work (?:at|for)|just joined|joined|started (?:at|with)|"
        rf"switched jobs to) {_VALUE}",
        _PROFILE,
        "employment.current_employer",
        "Works at {value}",
        explicit_change=True,
        proper_noun=True,
        confidence=0.9,
    ),
    _rule(
        "employer",
        rf"^(?:i work (?:at|for)|{_I_AM} employed (?:at|by)) {_VALUE}",
        _PROFILE,
        "employment.current_employer",
        "Works at {value}",
        proper_noun=True,
    ),
    # team before location, so "I'm in the platform team" is not a place
    _rule(
        "team_change",
        r"^i(?: have|'ve)? (?:just )?joined the (?P<value>[\w&\- ]+?) team\b",
        _PROFILE,
        "employment.team",
        "On the {value} team",
        explicit_change=True,
    ),
    _rule(
        "team",
        rf"^{_I_AM} (?:on|in|part of) the (?P<value>[\w&\- ]+?) team\b",
        _PROFILE,
        "employment.team",
        "On the {value} team",
    ),
    # the account: the plan it is on and the subject's roles on it; before jobs, so that
    # "I'm the account admin" is not a job, and before home, so that "I moved to the Pro
    # plan" is not a move
    _rule(
        "plan_no_longer",
        rf"^{_I_OR_WE_ARE} no longer (?:on|in) {_PLAN}",
        _PROFILE,
        "account.plan",
        "No longer on the {value} {thing}",
        negated=True,
        opens=("i", "we"),
    ),
    _rule(
        "plan_change",
        rf"^(?:i|we)(?: have|'ve)? (?:just )?(?:upgraded|downgraded|switched|moved|changed)"
        rf"(?: (?:our|my) (?:plan|account|subscription))? to {_PLAN}",
        _PROFILE,
        "account.plan",
        "On the {value} {thing}",
        explicit_change=True,
        confidence=0.9,
        opens=("i", "we"),
    ),
    _rule(
        "plan_now",
        rf"^{_I_OR_WE_ARE} now (?:on|in) {_PLAN}",
        _PROFILE,
        "account.plan",
        "On the {value} {thing}",
        explicit_change=True,
        opens=("i", "we"),
    ),
    _rule(
        "plan",
        rf"^{_I_OR_WE_ARE} (?:currently |still )?(?:on|in) {_PLAN}",
        _PROFILE,
        "account.plan",
        "On the {value} {thing}",
        opens=("i", "we"),
    ),
    _rule(
        "plan_is",
        rf"^(?:my|our) (?:current )?{_PLAN_NOUN} is (?:the )?{_PLAN_NAME}"
        rf"(?: (?:plan|tier|subscription))?(?=$|[,;:!?()\"]|\s+(?:{_TERMINATORS})\b)",
        _PROFILE,
        "account.plan",
        "On the {value} {thing}",
        proper_noun=True,
        opens=("my", "our"),
    ),
    _rule(
        "account_role",
        rf"^{_I_AM} (?:the|an?|one of the) "
        rf"(?P<scope>{_ACCOUNT_SCOPE}|billing|primary|technical) {_ACCOUNT_ROLE}\b",
        _PROFILE,
        "account.role",
        "Has the {value} role",
        value_template="{scope} {role}",
    ),
    _rule(
        "account_role_of",
        rf"^{_I_AM} (?:the|an?|one of the) {_ACCOUNT_ROLE} (?:of|on|for|in) "
        rf"(?:the |our |my |this )?(?P<scope>{_ACCOUNT_SCOPE})\b",
        _PROFILE,
        "account.role",
        "Has the {value} role",
        value_template="{scope} {role}",
    ),
    # role
    _rule(
        "role_change",
        rf"^(?:{_I_AM} now (?:an?|the)|i (?:got|was|have been|'ve been) promoted to"
        rf"(?: an?| the)?) "
        rf"(?P<value>(?:[\w-]+ ){{0,3}}(?:{_ROLE_NOUNS}))\b",
        _PROFILE,
        "employment.role",
        "Works as {value}",
        explicit_change=True,
    ),
    _rule(
        "role",
        rf"^(?:{_I_AM} (?:an?|the)|i work as (?:an?|the)) (?P<value>(?:[\w-]+ ){{0,3}}"
        rf"(?:{_ROLE_NOUNS}))\b",
        _PROFILE,
        "employment.role",
        "Works as {value}",
    ),
    # home city: negation and past first; "moved to" is an explicit change
    _rule(
        "home_no_longer",
        rf"^i (?:no longer|don't|do not) live in {_VALUE}",
        _PROFILE,
        "location.home_city",
        "No longer lives in {value}",
        negated=True,
        proper_noun=True,
    ),
    _rule(
        "home_past",
        rf"^i (?:used to live|lived|grew up) in {_VALUE}",
        _PROFILE,
        "location.previous_city",
        "Previously lived in {value}",
        proper_noun=True,
    ),
    _rule(
        "home_change",
        rf"^i(?: have|'ve)? (?:just )?(?:moved|relocated) (?:back )?to {_VALUE}",
        _PROFILE,
        "location.home_city",
        "Lives in {value}",
        explicit_change=True,
        proper_noun=True,
        confidence=0.9,
    ),
    _rule(
        "home_now",
        rf"^i now live in {_VALUE}",
        _PROFILE,
        "location.home_city",
        "Lives in {value}",
        explicit_change=True,
        proper_noun=True,
        confidence=0.9,
    ),
    _rule(
        "home",
        rf"^(?:i live in|{_I_AM} based in|my home(?: city)? is) {_VALUE}"
        rf"(?!.*\b(?:{_TEMPORARY}))",
        _PROFILE,
        "location.home_city",
        "Lives in {value}",
        proper_noun=True,
        opens=("i", "my"),
    ),
    # current, temporary location: "I'm in Berlin this week"
    _rule(
        "location_now",
        rf"^{_I_AM} (?:currently |now |staying |travelling |traveling )?"
        rf"(?:in|at|visiting) {_VALUE}",
        _STATE,
        "location.current",
        "Currently in {value}",
        proper_noun=True,
    ),
    # status and project
    _rule(
        "availability",
        rf"^{_I_AM} (?:currently )?(?:on|out on) "
        rf"(?P<value>vacation|holiday|leave|parental leave|sick leave|sabbatical)\b",
        _STATE,
        "work.availability",
        "Currently on {value}",
    ),
    _rule(
        "project",
        rf"^{_I_AM} (?:currently |now )?working on {_VALUE}",
        _STATE,
        "work.current_project",
        "Currently working on {value}",
    ),
    # tools and preferences: negation and past first
    _rule(
        "tool_not_used",
        rf"^i (?:don't|do not|no longer|never) use {_VALUE}",
        _PREFERENCE,
        "tools.used",
        "Does not use {value}",
        negated=True,
    ),
    _rule(
        "tool_stopped",
        rf"^i(?: have|'ve)? stopped using {_VALUE}",
        _PREFERENCE,
        "tools.used",
        "Does not use {value}",
        negated=True,
    ),
    _rule("tool_past", rf"^i used to use {_VALUE}", _PREFERENCE, None, "", first_person=True),
    _rule(
        "tool_switched",
        rf"^i(?: have|'ve)? switched to {_VALUE}",
        _PREFERENCE,
        "tools.used",
        "Uses {value}",
        explicit_change=True,
    ),
    _rule(
        "tool", rf"^i(?:'m| am)? (?:use|using) {_VALUE}", _PREFERENCE, "tools.used", "Uses {value}"
    ),
    _rule(
        "dislike",
        rf"^i (?:don't|do not) (?:like|enjoy) {_VALUE}|^i (?:dislike|hate) "
        rf"{_VALUE.replace('value', 'value2')}",
        _PREFERENCE,
        "preferences.dislikes",
        "Dislikes {value}",
    ),
    _rule(
        "prefer",
        rf"^i (?:really )?prefer {_VALUE}",
        _PREFERENCE,
        "preferences.prefers",
        "Prefers {value}",
    ),
    _rule(
        "like",
        rf"^i (?:really )?(?:like|love|enjoy) {_VALUE}",
        _PREFERENCE,
        "preferences.likes",
        "Likes {value}",
    ),
    _rule(
        "favourite",
        rf"^my (?:favourite|favorite) (?P<thing>[\w ]+?) is {_VALUE}",
        _PREFERENCE,
        "preferences.favourite",
        "Favourite {thing} is {value}",
        opens=("my",),
    ),
    # decisions: not first-person claims about the subject, any author may state them
    _rule(
        "deprecated",
        r"^(?:the )?(?P<value>[\w.\-/ ]+?) (?:is|has been|was|are|have been) "
        r"(?:now )?deprecated\b",
        _DECISION,
        "decisions.deprecated",
        "{value} is deprecated",
        first_person=False,
        opens=None,
    ),
    _rule(
        "decision",
        r"^(?:we(?: have|'ve)? (?:decided|agreed) (?:to|that|on)|we(?: will|'ll) "
        r"(?:use|go with|adopt|switch to|move to|standardi[sz]e on)|we're going with|"
        r"decision:)\s*\S",
        _DECISION,
        None,
        "{clause}",
        first_person=False,
        opens=("we", "decision"),
    ),
)


def _opening_words(rules: Iterable[_Rule]) -> list[str]:
    """The words any of ``rules`` opens with (``_Rule.opens``)."""
    return sorted({word for rule in rules for word in rule.opens or ()})


@dataclass(frozen=True, slots=True)
class _RuleFinder:
    """One pattern that finds the first of some rules that matches a clause.

    Every rule is anchored at the start of the clause, so one pass of all their patterns
    as alternatives (their own groups made plain) finds the first rule that matches: a
    clause is tried against each rule's pattern once, in C, instead of by a Python call
    per rule. Each alternative is closed by an empty group, whose index names its rule
    (``rule_of_group``): a rule that opens with several words is an alternative under
    each of them, and a group name may not be given twice.

    The alternatives are grouped under the word the clause opens with (``_Rule.opens``),
    each group behind a look-ahead for its word, so a clause is tried only against the
    rules that can match it, not against every rule at its first character. Two opening
    words cannot both open one clause (each is followed by a non-word character), so
    the group the clause opens with holds every rule that can match it, in the rules'
    order: its first alternative that matches is the first rule that matches. A rule
    that may open with any word (``opens`` ``None``) is in every group, and alone after
    them for a clause that opens with none of the words.
    """

    pattern: _Caseless
    rule_of_group: tuple[int, ...]

    @classmethod
    def of(cls, numbered: Iterable[tuple[int, _Rule]]) -> _RuleFinder:
        rules = list(numbered)
        words = _opening_words(rule for _, rule in rules)
        # Group 0, the whole match, names no rule; were it read, all would be tried.
        rule_of_group = [0]

        def alternatives(number_and_rule: Iterable[tuple[int, _Rule]]) -> str:
            found = []
            for number, rule in number_and_rule:
                plain = re.sub(r"[(][?]P<[a-z0-9_]+>", "(?:", rule.pattern.source)
                found.append(f"(?:{plain})()")
                rule_of_group.append(number)
            return "|".join(found)

        opening = "|".join(words)
        groups = [
            f"(?={word}\\b)(?:"
            + alternatives((n, r) for n, r in rules if r.opens is None or word in r.opens)
            + ")"
            for word in words
        ]
        if any(rule.opens is None for _, rule in rules):
            anyhow = alternatives((n, r) for n, r in rules if r.opens is None)
            groups.append(f"(?!(?:{opening})\\b)(?:{anyhow})")
        return cls(_Caseless.compile("|".join(groups)), tuple(rule_of_group))

    def first(self, clause: str) -> int | None:
        """The number of the first rule that matches ``clause``, if any."""
        found = self.pattern.match(clause)
        return None if found is None else self.rule_of_group[found.lastindex or 0]


_FIRST_RULE = _RuleFinder.of(enumerate(_RULES))
# The same without the "deprecated" rule, for an ASCII clause without that word, which
# the rule cannot match: its value, lazy, is tried at every length of the clause before
# the rule fails, about three quarters of the time the whole pattern takes on the
# clauses of long texts. (The rules that follow a match are tried with their own
# patterns, which still include it.)
_DEPRECATED_WORD = "deprecated"
_FIRST_RULE_NOT_DEPRECATED = _RuleFinder.of(
    (number, rule) for number, rule in enumerate(_RULES) if rule.name != "deprecated"
)

# Facts: a clause with a figure and a word that makes it a rate, price, limit or size.
_FIGURE = _Caseless.compile(r"\d")
_FACT_WORDS = _Caseless.compile(
    r"%|¢|\$|€|£|\b(?:per|limit|limits|rate|rates|charges?|costs?|price|prices|priced|fee|"
    r"fees|quota|max|maximum|min|minimum|timeout|ms|seconds?|minutes?|hours?|days?|kb|mb|gb|"
    r"tb|requests?|users?|seats?)\b"
)

# Pseudo-rules for the two kinds not found by a pattern, so every candidate is built alike.
_FACT_RULE = _Rule("figure", _FIGURE, MemoryKind.FACT, None, "{clause}", confidence=0.7)
_SUMMARY_RULE = _Rule("summary", _FIGURE, MemoryKind.EPISODE_SUMMARY, None, "", confidence=1.0)

# A sentence ends after ".", "!" or "?" and spaces, or at newlines: the cuts of
# r"(?<=[.!?])\s+|\n+", found faster. A pattern that opens with a set of characters is
# searched for that set in C, one that opens with a look-behind is tried at every
# position of the text (about three times the time over long texts). It takes the
# terminator with the cut (the group), which :func:`_split_sentences` gives back to its
# sentence; a newline is not kept, as that plain pattern does not keep it.
_SENTENCE_BREAK = re.compile(r"([.!?\n])(?:(?<=\n)\n*|(?<=[.!?])\s+)")
_CLAUSE_SPLIT = re.compile(r",?\s+(?:and|but|so)\s+(?=(?:i|i'm|we|we're|my)\b)", re.IGNORECASE)
# Quoted spans: double quotes anywhere; single quotes only when they open
# after a space or the start, so the apostrophe in "I'm" is never taken for a quote.
_QUOTED = re.compile(r"\"[^\"]*\"|(?:(?<=\s)|^)'.*?'(?=\s|[.,!?;:]|$)")
# Typographic quotes and apostrophes are folded to ASCII before anything else.
_TYPOGRAPHIC = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})
_QUESTION_START = _Caseless.compile(
    r"^(?:do|does|did|is|are|am|was|were|should|shall|can|could|would|will|have|has|what|"
    r"where|when|why|how|who|which)\b"
)
_HYPOTHETICAL = _Caseless.compile(
    r"\b(?:if|maybe|perhaps|might|would|could|should|suppose|supposing|imagine|"
    r"hypothetically|unless|whether|wish|considering|thinking (?:about|of)|i'll|i will|"
    r"planning to|plan to|going to|want to|wanna|hope to)\b"
)
# Digits are digits in any case: whether a clause has a figure needs no case folding.
_DIGIT = re.compile(r"\d")


def _opening(rules: Iterable[_Rule]) -> re.Pattern[str]:
    return re.compile(rf"(?:{'|'.join(_opening_words(rules))})\b", re.IGNORECASE)


# A sentence that is one clause as written (see ``_one_clause_each``) can yield a memory
# only if it opens as a rule opens (``_Rule.opens``; the rule that may open with any
# word needs the word "deprecated") or has a figure (a fact). Most sentences of long
# texts do neither and are passed over before their quotes, clauses and rules are
# looked for. A passage that does not speak for the subject yields no first-person
# claims, so fewer of its sentences can yield.
_MAY_YIELD_FOR_SUBJECT = _opening(_RULES)
_MAY_YIELD = _opening(rule for rule in _RULES if not rule.first_person)
# Where a clause may be split (``_CLAUSE_SPLIT``, on lowercase ASCII): looked for in
# the passage as a whole, which is faster than the split itself.
_MAY_SPLIT = re.compile(r"\s(?:and|but|so)\s+(?:i|we|my)\b")


def _split_sentences(text: str) -> list[str]:
    """The sentences of ``text``, cut by ``_SENTENCE_BREAK``: what splitting on
    r"(?<=[.!?])\\s+|\n+" gives (tests/unit/compile/test_heuristic_shortcuts.py)."""
    parts = _SENTENCE_BREAK.split(text)
    pairs = iter(parts)
    sentences = [
        piece if terminator == "\n" else piece + terminator
        for piece, terminator in zip(pairs, pairs, strict=False)
    ]
    sentences.append(parts[-1])
    return sentences


def _sentences(
    text: str, may_yield: re.Pattern[str] | None = None
) -> Iterator[tuple[str, list[str]]]:
    """Each sentence of ``text`` that is not a question, its quotes taken out, with its
    clauses, before they are checked for what makes them assert nothing (a hypothetical
    sentence, a clause that starts as a question): :func:`_clauses` checks every clause,
    the compiler only those that would yield a memory, most yield none.

    With ``may_yield`` (``_MAY_YIELD`` or ``_MAY_YIELD_FOR_SUBJECT``, as the compiler
    passes it), a sentence that cannot yield a memory (it neither opens as the pattern
    says a rule opens nor has a figure) may be left out; :func:`_clauses`, which gives
    every clause, passes none."""
    if not text.isascii():
        text = text.translate(_TYPOGRAPHIC)  # (ASCII text has none of its quotes)
        may_yield = None
    elif may_yield is not None and not _one_clause_each(text):
        may_yield = None
    # Most long texts have no figure at all: their sentences need not be searched for one.
    figures = may_yield is not None and _DIGIT.search(text) is not None
    for sentence in _split_sentences(text):
        stripped = sentence.strip()
        if not stripped or stripped.endswith("?"):
            continue  # questions assert nothing
        # The patterns are skipped where they cannot match: no quote, or (in ASCII) none
        # of the words a clause is split at; most sentences have neither.
        if '"' in stripped or "'" in stripped:
            unquoted = _QUOTED.sub(" ", stripped)
        elif (
            may_yield is None or may_yield.match(stripped) or (figures and _DIGIT.search(stripped))
        ):
            unquoted = stripped
        else:
            # Its one clause is the sentence, its spaces folded and its final stops
            # dropped, which opens with the sentence's first word: no rule can match it,
            # and without a figure it states no fact.
            continue
        if _may_split(unquoted):
            cleaned = (
                " ".join(piece.split()).rstrip(".!") for piece in _CLAUSE_SPLIT.split(unquoted)
            )
            yield unquoted, [clause for clause in cleaned if clause]
        else:  # one clause, built without a generator and a list comprehension for it
            clause = " ".join(unquoted.split()).rstrip(".!")
            yield unquoted, [clause] if clause else []


def _clauses(text: str) -> Iterator[str]:
    """The clauses of ``text`` that may assert something."""
    for sentence, clauses in _sentences(text):
        if _HYPOTHETICAL.search(sentence):
            continue
        for clause in clauses:
            if not _QUESTION_START.match(clause):
                yield clause


def _one_clause_each(text: str) -> bool:
    """Whether every sentence of ``text`` (ASCII, where a letter has no case but its
    capital) without a quote is one clause, which no rule that may open with any word
    can match: without the word "deprecated" and without a place the clauses are split
    at. (Taking quotes out of a sentence may bring a split word next to "I".)"""
    lowered = text.lower()
    if _DEPRECATED_WORD in lowered:
        return False
    # The words looked for as strings first: half the long texts have none of them.
    return not _may_split_lowered(lowered) or _MAY_SPLIT.search(lowered) is None


def _may_split(sentence: str) -> bool:
    if not sentence.isascii():
        return True  # under IGNORECASE a letter outside ASCII may fold into a split word
    return _may_split_lowered(sentence.lower())


def _may_split_lowered(lowered: str) -> bool:
    return "and" in lowered or "but" in lowered or "so" in lowered


def _summary_text(texts: Sequence[Passage]) -> str:
    """The text a summary is cut from: the first three passages, their whitespace
    normalised, joined by spaces; or, when that is longer than ``SUMMARY_LENGTH``, only
    a prefix of it longer than ``SUMMARY_LENGTH``, which is all the cut reads.

    A long passage is mostly past the cut, so only a prefix of it is normalised: the
    normalised prefix of a text is a prefix of the normalised text (its last word may be
    cut short, which only the part past the cut sees). Normalising shrinks a run of
    spaces, so a prefix is taken again, longer, until it is long enough or the whole.
    """
    folded: list[str] = []
    length = -1  # no space before the first passage
    for passage in texts[:3]:
        text = passage.text
        end = 2 * SUMMARY_LENGTH
        while True:
            part = " ".join(text[:end].split())
            if end >= len(text) or length + 1 + len(part) > SUMMARY_LENGTH:
                break
            end *= 2
        folded.append(part)
        length += 1 + len(part)
        if length > SUMMARY_LENGTH:
            break  # the passages after it are past the cut
    return " ".join(folded)


def _summary_cut(text: str) -> str:
    """``text`` as a summary keeps it: whole up to ``SUMMARY_LENGTH`` characters, else cut
    at a word boundary before it, so that a summary never ends mid-word."""
    if len(text) > SUMMARY_LENGTH:
        return text[: SUMMARY_LENGTH - 1].rsplit(" ", 1)[0] + "…"
    return text


def _clean_value(value: str) -> str:
    return " ".join(value.split()).strip(" .'\"")


class HeuristicCompiler:
    """Rule-based ``Compiler``: the same episodes always give the same candidates.

    Repeats: deterministic, so a re-run derives equal ``memory_key``s and the resolver
    only adds provenance. Conflicts: none are decided here; contradicting candidates
    (even within one episode) are all returned for the resolver.
    """

    def __init__(self, registry: ClaimRegistry | None = None) -> None:
        self._registry = registry or ClaimRegistry.default()
        for rule in _RULES:
            if rule.claim_key is not None:
                self._registry.get(rule.claim_key)  # fail at construction, not mid-compile

    prepares_ahead = False

    def prepare(self, episodes: Sequence[EpisodeView]) -> None:
        """Nothing to do ahead: the rules are local and fast."""

    def compile(self, episodes: Sequence[EpisodeView]) -> list[CandidateMemory]:
        """Return candidates for ``episodes``, ordered by episode then position in text."""
        candidates: list[CandidateMemory] = []
        for episode in in_episode_order(episodes):
            candidates.extend(self._episode(episode))
        return candidates

    def _episode(self, episode: EpisodeView) -> Iterator[CandidateMemory]:
        texts = list(passages(episode.payload))
        for passage in texts:
            # What ``_clauses`` yields, but a clause is first tried against the rules and
            # only one that yields a memory is checked further (a search of the whole
            # sentence for a hypothetical, once a sentence): most clauses of long texts
            # yield none, and the checks only ever drop a memory, never add one.
            may_yield = _MAY_YIELD_FOR_SUBJECT if passage.speaks_for_subject else _MAY_YIELD
            for sentence, clauses in _sentences(passage.text, may_yield):
                hypothetical: bool | None = None
                for clause in clauses:
                    candidate = self._clause(episode, clause, passage.speaks_for_subject)
                    if candidate is None or _QUESTION_START.match(clause):
                        continue
                    if hypothetical is None:
                        hypothetical = _HYPOTHETICAL.search(sentence) is not None
                    if hypothetical:
                        break
                    yield candidate
        summary = self._summary(episode, texts)
        if summary is not None:
            yield summary

    def _clause(
        self, episode: EpisodeView, clause: str, first_person: bool
    ) -> CandidateMemory | None:
        # What ``_Caseless.match`` does, the clause lowercased once for both uses.
        if clause.isascii():
            lowered = clause.lower()
            finder = _FIRST_RULE if _DEPRECATED_WORD in lowered else _FIRST_RULE_NOT_DEPRECATED
            first = finder.pattern.lowered.match(lowered)
        else:
            finder = _FIRST_RULE
            first = finder.pattern.folding.match(clause)
        if first is None:
            # A fact needs a figure; most clauses have none, so ``_fact`` is not called.
            return self._fact(episode, clause) if _DIGIT.search(clause) else None
        # The rules before the first that matches cannot match: start there.
        for rule in _RULES[finder.rule_of_group[first.lastindex or 0] :]:
            if rule.first_person and not first_person:
                continue
            match = rule.pattern.search(clause)
            if match is None:
                continue
            groups = {
                name: _clean_value(text) for name, text in _Caseless.groups(match, clause).items()
            }
            value = groups.get("value") or groups.get("value2", "")
            if rule.value_template is not None:
                value = rule.value_template.format(**groups)
            if rule.proper_noun and not value[:1].isupper():
                continue
            if not rule.template:
                return None  # a rule that exists to swallow a clause ("I used to use X")
            content = rule.template.format(clause=clause, value=value, thing=groups.get("thing"))
            return self._candidate(episode, rule, content, value if rule.claim_key else None)
        return self._fact(episode, clause)

    def _candidate(
        self, episode: EpisodeView, rule: _Rule, content: str, value: str | None
    ) -> CandidateMemory:
        return CandidateMemory(
            subject_id=episode.subject_id,
            kind=rule.kind,
            content=content,
            claim_key=rule.claim_key,
            claim_value=value,
            confidence=rule.confidence,
            valid_from=episode.occurred_at,
            source_episode_ids=(episode.id,),
            metadata={"rule": rule.name, "compiler": "heuristic"},
            negated=rule.negated,
            explicit_change=rule.explicit_change,
        )

    def _fact(self, episode: EpisodeView, clause: str) -> CandidateMemory | None:
        if not (_DIGIT.search(clause) and _FACT_WORDS.search(clause)):
            return None
        return self._candidate(episode, _FACT_RULE, clause, None)

    def _summary(self, episode: EpisodeView, texts: list[Passage]) -> CandidateMemory | None:
        text = _summary_text(texts)
        if not text:
            return None
        content = f"{episode.source} {episode.type}: {_summary_cut(text)}"
        return self._candidate(episode, _SUMMARY_RULE, content, None)
