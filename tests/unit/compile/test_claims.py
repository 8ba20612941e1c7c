from __future__ import annotations

import pytest

from memsync.compile.claims import Cardinality, ClaimRegistry, ClaimRegistryError

DEFAULT = ClaimRegistry.default()


def test_default_registry_knows_single_and_multi_valued_keys() -> None:
    assert DEFAULT.get("location.home_city").single_valued
    assert DEFAULT.get("employment.current_employer").single_valued
    assert not DEFAULT.get("tools.used").single_valued
    assert not DEFAULT.get("preferences.likes").single_valued
    # A subject is on one plan at a time, and may hold several roles on its account.
    assert DEFAULT.get("account.plan").single_valued
    assert not DEFAULT.get("account.role").single_valued


def test_an_alias_resolves_to_its_canonical_key() -> None:
    assert DEFAULT.canonical("location.city") == "location.home_city"
    assert DEFAULT.canonical("account.tier") == "account.plan"
    assert "location.city" in DEFAULT


def test_config_mapping_adds_keys_and_aliases() -> None:
    registry = DEFAULT.extended(
        {"keys": {"health.allergy": "multi", "contract.tier": "single"},
         "aliases": {"health.allergies": "health.allergy"}}
    )  # fmt: skip

    assert registry.get("health.allergies").cardinality is Cardinality.MULTI
    assert registry.get("contract.tier").single_valued
    assert "health.allergy" not in DEFAULT


def test_redeclaring_a_key_with_the_same_cardinality_is_allowed() -> None:
    registry = DEFAULT.extended({"keys": {"tools.used": "multi"}})

    assert not registry.get("tools.used").single_valued


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"keys": {"tools.used": "single"}}, "already multi-valued"),
        ({"keys": {"Bad Key": "single"}}, "not a dotted lowercase name"),
        ({"keys": {"pets.count": "several"}}, "neither 'single' nor 'multi'"),
        ({"aliases": {"location.town": "location.village"}}, "not a claim key"),
        ({"aliases": {"location.city": "location.current"}}, "already points at"),
        ({"keys": {"x.y": "single"}, "aliases": {"x.y": "tools.used"}}, "is also a claim key"),
        ({"claims": {}}, "unknown section"),
    ],
)
def test_bad_or_clashing_definitions_are_clear_errors(
    config: dict[str, dict[str, str]], message: str
) -> None:
    with pytest.raises(ClaimRegistryError, match=message):
        DEFAULT.extended(config)


def test_an_unknown_key_error_lists_the_known_keys() -> None:
    with pytest.raises(ClaimRegistryError, match=r"unknown claim key 'pets\.count'.*tools\.used"):
        DEFAULT.get("pets.count")
