"""The engine's HTTP servers (the Kubernetes API, the exporters): a client that leaves is routine, not a traceback.

Why: socketserver prints a traceback to stderr for any error in a request's thread. When the demo stops
(Ctrl-C, SIGTERM) its clients and servers close in any order, and a request in flight printed "Exception
occurred during processing of request" under the demo's one-line answer. Connection errors, and any error
once the server is shutting down, are logged at debug; anything else with its traceback (the `logging`
configuration decides where it goes).
"""

from __future__ import annotations

import logging
import sys
from http.server import ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)


class QuietHTTPServer(ThreadingHTTPServer):
    """ThreadingHTTPServer whose request errors go to logging, a client that went away at debug."""

    daemon_threads = True
    closing = False
    """Set once shutdown() is called: a request that fails after that met a server being taken down."""

    def shutdown(self) -> None:
        self.closing = True
        super().shutdown()

    def handle_error(self, request: object, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if self.closing or isinstance(error, (ConnectionError, TimeoutError)):
            log.debug("%s: client %s went away: %s", type(self).__name__, client_address, error)
        else:
            log.exception("%s: request from %s failed", type(self).__name__, client_address)
