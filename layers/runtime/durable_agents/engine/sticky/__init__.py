"""Sticky continuation: a warm process keeps an agent parked at its frontier (ADR 0017)."""
