"""Which vLLM servers the app may contact: the guard against server-side request forgery.

A visitor types a URL and the app's own server sends requests to it, so on a public
deployment a URL field is a way to make that server reach what the visitor cannot: its
loopback, a cloud metadata address, a private network. The rules:

- ``http://`` or ``https://`` only, with a host, a valid port, and no user name or
  password in it (``http://user:pw@host`` is also how a URL hides its real host);
- when the deployment is locked down (``MTP_VIZ_ALLOWED_MODELS`` is set, see
  :class:`.deploy.AllowList`) only the servers listed in ``MTP_VIZ_VLLM_URLS``
  (comma-separated), and none at all when that is empty.

URLs compare in a canonical form (scheme and host in lower case, the default port
written out, a trailing ``/`` or ``/v1`` left out), so ``http://Host/v1/`` is
``http://host:80``. A refusal is one sentence. What a server answers is never quoted
to the visitor (:mod:`mtp_viz.sources.vllm.client` sees to that).
"""
from __future__ import annotations

import os
import urllib.parse

from mtp_viz.errors import UserError

from .deploy import AllowList

MAX_URL = 512   # characters: a server address is short; a long one is refused, not shown back
_PORTS = {"http": 80, "https": 443}


def canonical(url: str) -> str:
    """``scheme://host:port[/path]`` for a server URL, or one sentence saying what is wrong."""
    text = (url or "").strip()
    if not text:
        raise UserError("Enter the vLLM server's URL, like http://127.0.0.1:8000.")
    if len(text) > MAX_URL:
        raise UserError(f"That URL is longer than {MAX_URL} characters; a server address is short.")
    if any(c.isspace() or ord(c) < 32 or c == "\\" for c in text):
        raise UserError("That is not a server address; give one like http://127.0.0.1:8000.")
    parts = urllib.parse.urlsplit(text)
    if parts.scheme.lower() not in _PORTS:
        raise UserError("Only http:// and https:// server URLs are allowed.")
    if "@" in parts.netloc:
        raise UserError("A server URL may not carry a user name or password.")
    try:
        port = parts.port or _PORTS[parts.scheme.lower()]
    except ValueError:
        port = None
    host = parts.hostname
    if not host or port is None:
        raise UserError("That is not a server address; give one like http://127.0.0.1:8000.")
    host = f"[{host}]" if ":" in host else host   # IPv6 literals keep their brackets
    path = parts.path.rstrip("/")
    path = path[:-3] if path.endswith("/v1") else path
    return f"{parts.scheme.lower()}://{host}:{port}{path}"


class ServerPolicy:
    """The servers this deployment may contact: any http(s) server, or, when locked down,
    only those in ``MTP_VIZ_VLLM_URLS`` (entries that are not server URLs match nothing)."""

    def __init__(self, allow: AllowList, spec: str | None = None):
        spec = os.environ.get("MTP_VIZ_VLLM_URLS", "") if spec is None else spec
        self.locked = allow.active
        self.listed: list[str] = []
        for entry in (s.strip() for s in spec.split(",")):
            try:
                self.listed.append(canonical(entry))
            except UserError:
                continue

    @property
    def offered(self) -> bool:
        """Whether the app offers the vLLM source at all (a locked-down deployment
        without listed servers does not)."""
        return not self.locked or bool(self.listed)

    def check(self, url: str) -> str:
        """The canonical URL to contact, or one sentence: the UI's only way to a server."""
        base = canonical(url)
        if self.locked and base not in self.listed:
            raise UserError("This deployment only connects to the vLLM servers it lists.")
        return base


__all__ = ["ServerPolicy", "canonical"]
