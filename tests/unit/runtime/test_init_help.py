"""`help(init_from_env)` explains the call, and never prints the process's environment (a default
of `os.environ` would: every variable, secrets included, rendered into the signature)."""

from __future__ import annotations

import pydoc

import pytest


def test_help_shows_the_real_signature_and_not_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINMEDIC_TEST_SECRET", "s3cret-value")
    import trainmedic.runtime

    text = pydoc.render_doc(trainmedic.runtime.init_from_env, renderer=pydoc.plaintext)
    assert "s3cret-value" not in text
    assert "timeout_s" in text and "snapshot_every" in text and "collective" in text
