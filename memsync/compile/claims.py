"""The claim-key registry: which slots a subject has, and how many values each holds.

A *single-valued* key (``location.home_city``) holds one value at a time, so two
different values with overlapping validity contradict each other. A *multi-valued* key
(``tools.used``) holds a set, so different values coexist. Aliases let compilers and
configuration use older or friendlier names (``location.city``) for a canonical key.

The runtime configuration extends the defaults with a plain mapping::

    {"keys": {"health.allergy": "multi", "contract.tier": "single"},
     "aliases": {"allergy": "health.allergy"}}
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = [
    "DEFAULT_ALIASES",
    "DEFAULT_CLAIM_KEYS",
    "Cardinality",
    "ClaimKey",
    "ClaimRegistry",
    "ClaimRegistryError",
]


class Cardinality(enum.StrEnum):
    """How many values a claim key holds at once."""

    SINGLE = "single"
    MULTI = "multi"


class ClaimRegistryError(ValueError):
    """A claim-key definition is malformed, unknown or clashes with another."""


@dataclass(frozen=True, slots=True)
class ClaimKey:
    """One registered claim key."""

    name: str
    cardinality: Cardinality

    @property
    def single_valued(self) -> bool:
        return self.cardinality is Cardinality.SINGLE


DEFAULT_CLAIM_KEYS: Mapping[str, Cardinality] = MappingProxyType(
    {
        "identity.name": Cardinality.SINGLE,
        "employment.current_employer": Cardinality.SINGLE,
        "employment.role": Cardinality.SINGLE,
        "employment.team": Cardinality.SINGLE,
        "employment.previous_employer": Cardinality.MULTI,
        "location.home_city": Cardinality.SINGLE,
        "location.current": Cardinality.SINGLE,
        "location.previous_city": Cardinality.MULTI,
        "account.plan": Cardinality.SINGLE,
        "account.role": Cardinality.MULTI,
        "work.current_project": Cardinality.SINGLE,
        "work.availability": Cardinality.SINGLE,
        "tools.used": Cardinality.MULTI,
        "preferences.likes": Cardinality.MULTI,
        "preferences.dislikes": Cardinality.MULTI,
        "preferences.prefers": Cardinality.MULTI,
        "preferences.favourite": Cardinality.MULTI,
        "decisions.deprecated": Cardinality.MULTI,
    }
)

DEFAULT_ALIASES: Mapping[str, str] = MappingProxyType(
    {
        "location.city": "location.home_city",
        "location.home": "location.home_city",
        "employment.employer": "employment.current_employer",
        "employment.title": "employment.role",
        "identity.full_name": "identity.name",
        "preferences.favorite": "preferences.favourite",
        "account.tier": "account.plan",
        "account.subscription": "account.plan",
    }
)

# Lowercase dotted names: "namespace.slot", each part a word. Keeps keys greppable.
_KEY_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")


def _check_name(name: object, where: str) -> str:
    if not isinstance(name, str) or not _KEY_NAME.match(name):
        raise ClaimRegistryError(
            f"{where}: claim key {name!r} is not a dotted lowercase name "
            "(e.g. 'location.home_city')"
        )
    return name


def _cardinality(value: object, name: str) -> Cardinality:
    try:
        return Cardinality(str(value))
    except ValueError:
        raise ClaimRegistryError(
            f"claim key {name!r}: cardinality {value!r} is neither 'single' nor 'multi'"
        ) from None


class ClaimRegistry:
    """An immutable set of claim keys and aliases. Build new ones with ``extended``."""

    __slots__ = ("_aliases", "_keys")

    def __init__(
        self,
        keys: Mapping[str, Cardinality | str],
        aliases: Mapping[str, str] | None = None,
    ) -> None:
        """Validate and store ``keys`` and ``aliases``.

        Raises ``ClaimRegistryError`` for a malformed name, an unknown cardinality, an
        alias that names no key, or an alias that is also a key (which would make the
        name mean two things).
        """
        checked_keys = {
            _check_name(name, "keys"): ClaimKey(name, _cardinality(cardinality, name))
            for name, cardinality in keys.items()
        }
        checked_aliases: dict[str, str] = {}
        for alias, target in (aliases or {}).items():
            _check_name(alias, "aliases")
            if alias in checked_keys:
                raise ClaimRegistryError(f"alias {alias!r} is also a claim key; remove one of them")
            if target not in checked_keys:
                raise ClaimRegistryError(
                    f"alias {alias!r} points at {target!r}, which is not a claim key; "
                    f"known keys: {', '.join(sorted(checked_keys))}"
                )
            checked_aliases[alias] = target
        self._keys: Mapping[str, ClaimKey] = MappingProxyType(checked_keys)
        self._aliases: Mapping[str, str] = MappingProxyType(checked_aliases)

    @classmethod
    def default(cls) -> ClaimRegistry:
        """The built-in keys and aliases documented in docs/compile.md."""
        return cls(DEFAULT_CLAIM_KEYS, DEFAULT_ALIASES)

    def extended(self, config: Mapping[str, Mapping[str, str]]) -> ClaimRegistry:
        """Return a registry with ``config["keys"]`` and ``config["aliases"]`` added.

        Re-declaring an existing key with the same cardinality is a no-op (so a config
        file may list defaults); with a different cardinality it is an error, because
        memories already stored under that key were resolved by the old rule.
        """
        unknown_sections = set(config) - {"keys", "aliases"}
        if unknown_sections:
            raise ClaimRegistryError(
                f"claim registry config: unknown section(s) {sorted(unknown_sections)}; "
                "expected 'keys' and/or 'aliases'"
            )
        keys: dict[str, Cardinality | str] = {
            name: key.cardinality for name, key in self._keys.items()
        }
        for name, cardinality in config.get("keys", {}).items():
            wanted = _cardinality(cardinality, name)
            existing = self._keys.get(name)
            if existing is not None and existing.cardinality is not wanted:
                raise ClaimRegistryError(
                    f"claim key {name!r} is already {existing.cardinality.value}-valued; "
                    f"it cannot be redeclared as {wanted.value}-valued"
                )
            keys[name] = wanted
        aliases = dict(self._aliases)
        for alias, target in config.get("aliases", {}).items():
            if aliases.get(alias, target) != target:
                raise ClaimRegistryError(
                    f"alias {alias!r} already points at {aliases[alias]!r}, not {target!r}"
                )
            aliases[alias] = target
        return ClaimRegistry(keys, aliases)

    def canonical(self, name: str) -> str:
        """Return the canonical key for ``name`` (itself or the key it aliases)."""
        return self.get(name).name

    def get(self, name: str) -> ClaimKey:
        """Return the key named ``name`` or aliased by it; raise if it is unknown."""
        key = self._keys.get(self._aliases.get(name, name))
        if key is None:
            raise ClaimRegistryError(
                f"unknown claim key {name!r}; register it under 'keys' in the claim "
                f"registry config (known: {', '.join(sorted(self._keys))})"
            )
        return key

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._aliases.get(name, name) in self._keys

    def __iter__(self) -> Iterator[ClaimKey]:
        return iter(sorted(self._keys.values(), key=lambda key: key.name))

    @property
    def aliases(self) -> Mapping[str, str]:
        return self._aliases
