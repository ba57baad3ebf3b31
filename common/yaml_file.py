"""Reading a YAML document that must be a mapping (service configs, job specs), with errors
that say what is wrong in one line."""

from __future__ import annotations

from pathlib import Path

from trainmedic.common.errors import ConfigError


def load_mapping(path: Path, expected: str = "a mapping of settings") -> dict:
    """The mapping in `path` (empty file: {}); ConfigError when unreadable, not YAML or not a mapping."""
    import yaml

    try:
        document = yaml.safe_load(path.read_text())
    except OSError as err:
        raise ConfigError(f"cannot read {path}: {err.strerror or err}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not YAML: {' '.join(str(err).split())}") from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise ConfigError(f"{path}: expected {expected}")
    return document
