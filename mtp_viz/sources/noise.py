"""Log lines that are nobody's to act on, dropped where they arise: loading a pair.

Once torchao is installed, transformers imports it to list its quantizers, and two notices
follow every load, neither about the load: torchao's GPU-only extensions that a CPU cannot
load ("Failed to load .../torchao/_C_mxfp8..."), and torch's deprecation of how torchao
registers two enums ("<enum 'KernelPreference'> is an Enum subclass and is now natively
supported by torch.compile ..."). Only those two are filtered, on the two loggers that
print them; every other warning of theirs still shows.
"""
from __future__ import annotations

import logging


class KnownNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        return not ((msg.startswith("Failed to load") and "torchao" in msg)
                    or "is an Enum subclass and is now natively supported" in msg)


def quiet_known_noise() -> None:
    """Idempotent: one filter per logger however often a pair loads."""
    for name in ("torchao", "torch.utils._pytree"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, KnownNoise) for f in logger.filters):
            logger.addFilter(KnownNoise())


__all__ = ["KnownNoise", "quiet_known_noise"]
