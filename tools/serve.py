"""Serve a built site on 127.0.0.1 with the MIME types browsers insist on (.mjs, .wasm).

    python tools/serve.py [DIR] [--port 8000]      (make serve PORT=8001)

GitHub Pages sends the same types; Python's http.server may not know `.mjs` on every system.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import http.server
import sys
import threading
from pathlib import Path
from typing import ClassVar

TYPES = {".mjs": "text/javascript", ".js": "text/javascript", ".wasm": "application/wasm",
         ".json": "application/json", ".py": "text/plain; charset=utf-8", ".whl": "application/zip",
         ".zip": "application/zip"}


class Handler(http.server.SimpleHTTPRequestHandler):
    extensions_map: ClassVar[dict[str, str]] = {**http.server.SimpleHTTPRequestHandler.extensions_map, **TYPES}

    def log_message(self, format: str, *args: object) -> None:  # quiet unless it failed
        if len(args) > 1 and str(args[1]).startswith(("4", "5")):
            super().log_message(format, *args)


def server(directory: Path, port: int = 0) -> http.server.ThreadingHTTPServer:
    """A server for `directory` on 127.0.0.1 (port 0: a free one); call serve_forever on it."""
    handler = functools.partial(Handler, directory=str(directory))
    return http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)


def serve_in_thread(directory: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    srv = server(directory)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}/"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", nargs="?", default="build/site", type=Path)
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    try:
        srv = server(args.directory, args.port)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        sys.exit(f"serve: port {args.port} is already in use (another server?); "
                 f"choose another: make serve PORT={args.port + 1}")
    print(f"serving {args.directory} on http://127.0.0.1:{args.port}/ (the calculator: "
          f"http://127.0.0.1:{args.port}/calculator/); Ctrl-C stops")
    with contextlib.suppress(KeyboardInterrupt):
        srv.serve_forever()


if __name__ == "__main__":
    main()
