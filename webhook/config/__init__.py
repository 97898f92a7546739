"""The one place configuration is defined (defaults), checked (checks) and read (settings).

A config file is YAML with the keys in `DEFAULTS`. Unknown keys and bad values stop start-up with
every problem listed at once, each naming its key path: a typo that is silently ignored is a
policy that is silently off. Callers import from here: `from webhook.config import from_mapping`.
"""

from __future__ import annotations

from .defaults import COMMENTS, DEFAULTS
from .settings import (
    ChartView,
    ConfigError,
    ServerSettings,
    Settings,
    default_policy,
    from_bytes,
    from_chart_values,
    from_mapping,
    from_text,
    load,
    load_chart_values,
    parse_version,
    read_file,
    with_version,
)

__all__ = [
    "COMMENTS",
    "DEFAULTS",
    "ChartView",
    "ConfigError",
    "ServerSettings",
    "Settings",
    "default_policy",
    "from_bytes",
    "from_chart_values",
    "from_mapping",
    "from_text",
    "load",
    "load_chart_values",
    "parse_version",
    "read_file",
    "with_version",
]
