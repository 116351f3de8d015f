"""rayrl's one logger ("rayrl"): the library logs through it and never prints. configure() gives it a handler
and the level of metrics.log_level, in the driver and in every actor (Ray forwards actors' stderr to the
driver); a program that configures logging itself can leave it alone."""

from __future__ import annotations

import logging

LOGGER = "rayrl"


def configure(level: str = "INFO") -> logging.Logger:
    """Set the rayrl logger's level; add one stderr handler unless it or the root logger has one."""
    log = logging.getLogger(LOGGER)
    log.setLevel(level)
    if not log.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("rayrl %(levelname)s: %(message)s"))
        log.addHandler(handler)
    return log
