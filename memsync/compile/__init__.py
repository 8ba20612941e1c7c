"""Compile: derive memories from episodes. Pure: no SQL, no HTTP (except the LLM
compiler, which talks to a model through an injected httpx client)."""

from __future__ import annotations
