"""Helpers that several test files share; each module says what it holds."""
