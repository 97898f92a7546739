"""The settings every command reads: the config file, then command-line overrides."""

from __future__ import annotations

import argparse

from ..config import ConfigError, Settings, load, parse_version


def from_args(args: argparse.Namespace) -> Settings:
    settings = load(args.config)
    override = getattr(args, "cluster_version", None)
    if not override:
        return settings
    if override == "unknown":
        return settings.with_cluster_version(None)
    version = parse_version(override)
    if version is None:
        raise ConfigError([f"--cluster-version: {override!r} is not a version such as 1.27"], "args")
    return settings.with_cluster_version(version)
