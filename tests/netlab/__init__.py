"""netlab: a namespace-built fake internet for network-policy tests (see README.md)."""
from .netlab import (DEFAULT_NAMES, METADATA_ACCESS_KEY, METADATA_ROLE, METADATA_SECRET,
                     METADATA_TOKEN, TLS_NAMES, NetLab, NetLabError, cleanup_stale,
                     default_names, dns_query)

__all__ = ["NetLab", "NetLabError", "dns_query", "cleanup_stale", "default_names",
           "DEFAULT_NAMES", "TLS_NAMES", "METADATA_ACCESS_KEY", "METADATA_ROLE",
           "METADATA_SECRET", "METADATA_TOKEN"]
