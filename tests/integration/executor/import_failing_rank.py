"""A rank whose script fails at import, as a typo in a dependency makes it fail (issue 33)."""

print("loading the model", flush=True)
import no_such_module  # noqa: E402, F401
