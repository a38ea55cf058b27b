"""Kubernetes object names, checked as the API server checks them (ASCII only).

    is_dns_subdomain(value)   # RFC 1123 subdomain: most object names (Workloads, pods), <= 253
    is_dns_label(value)       # RFC 1123 label: namespaces, <= 63

WHY a module of its own: names reach the steps from parameters, events and alert labels, and each
path must refuse the same things. Python's `str.islower()`/`isdigit()` accept non-ASCII letters and
digits ("ë", "٣"), which the API server rejects: these checks are explicit ASCII character classes.
"""

from __future__ import annotations

import re

_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_LABEL_ONLY = re.compile(_LABEL)


def is_dns_subdomain(value: str) -> bool:
    """A lower-case RFC 1123 subdomain of at most 253 ASCII characters."""
    return isinstance(value, str) and 0 < len(value) <= 253 and _SUBDOMAIN.fullmatch(value) is not None


def is_dns_label(value: str) -> bool:
    """A lower-case RFC 1123 label of at most 63 ASCII characters (a namespace name)."""
    return isinstance(value, str) and 0 < len(value) <= 63 and _LABEL_ONLY.fullmatch(value) is not None


def label_value(name: str) -> str:
    """A Workload name as the templates' `labelsFrom` writes it into label gpuaas.io/workload
    (workflows/reaction.py label_value: the first 63 characters, without a trailing '-' or '.')."""
    return name[:63].strip("-.")
