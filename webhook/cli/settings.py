"""The settings every command reads: the config file, then command-line overrides."""

from __future__ import annotations

import argparse

from ..config import ChartView, ConfigError, Settings, load, load_chart_values, with_version


def chart_view(args: argparse.Namespace) -> ChartView | None:
    """`--values`: the chart's view, when the command judges as an installed chart would."""
    path = getattr(args, "values", None)
    if not path:
        return None
    if getattr(args, "config", None):
        raise ConfigError(["--values and --config: give one (the chart renders its config from values)"], "args")
    return load_chart_values(path, args.release_namespace)


def from_args(args: argparse.Namespace, chart: ChartView | None = None) -> Settings:
    """The config file (or the chart view's config), with --cluster-version applied."""
    settings = chart.settings if chart is not None else load(args.config)
    override = getattr(args, "cluster_version", None)
    return with_version(settings, override) if override else settings
