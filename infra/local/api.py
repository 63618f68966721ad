"""The local stack's API: the Chalice app served on 127.0.0.1 (what API Gateway and Lambda are in AWS),
each request counted as an API Gateway request (`infra.local.moto_compat.COUNTS`)."""

from __future__ import annotations

import socket
import threading
import warnings
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_api(port: int) -> Any:
    """Serve the Chalice app on 127.0.0.1:``port`` in a background thread; returns the server (its
    ``shutdown()`` stops it). Chalice's local server handles each connection in a thread of its own."""
    import functools

    from chalice.config import Config
    from chalice.local import ChaliceRequestHandler, LocalChalice, LocalDevServer, create_local_server

    warnings.filterwarnings("ignore", message=".*is not a supported in local mode.*")
    import app as chalice_app
    from infra.local.moto_compat import COUNTS

    class RequestHandler(ChaliceRequestHandler):
        # Chalice writes an answer's headers and its body in two sends. On a kept-alive connection (the
        # compute side's session keeps them) the body would then wait for the client's delayed ACK of
        # the headers, 40 ms on Linux, on every call.
        disable_nagle_algorithm = True

        def parse_request(self) -> bool:
            parsed: bool = super().parse_request()
            if parsed:
                COUNTS.add_api(self.command, self.path)  # each request an API Gateway request on AWS
            return parsed

    config = Config.create(chalice_stage="local", app_name="stratus", function_name="api_handler")
    # create_local_server makes `current_request` thread-local; an app made local already (an earlier
    # server in this process) is served as it is.
    if isinstance(chalice_app.app, LocalChalice):
        server = LocalDevServer(chalice_app.app, config, "127.0.0.1", port)
    else:
        server = create_local_server(chalice_app.app, config, host="127.0.0.1", port=port)
    server.server.RequestHandlerClass = functools.partial(
        RequestHandler, app_object=chalice_app.app, config=config
    )
    threading.Thread(target=server.serve_forever, name="api", daemon=True).start()
    return server
