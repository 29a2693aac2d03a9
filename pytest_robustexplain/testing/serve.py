"""Serve the fake Ollama for your own pipeline until Ctrl-C: ``robustexplain fake-server`` and
``python -m pytest_robustexplain.testing`` (one parser, one loop).

The first line printed is ``fake Ollama listening on http://127.0.0.1:PORT ...``, flushed at once, so a
script can start the server on port 0 and read the address from it instead of sleeping.
"""

from __future__ import annotations

import argparse
import errno
import signal
import sys
import threading
from collections.abc import Sequence

from .replies import MODES
from .server import FakeOllamaServer

LISTENING = "fake Ollama listening on"  # the start of the address line scripts wait for


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The server's options (shared by both entry points)."""
    parser.add_argument("--port", type=int, default=11434,
                        help="port on 127.0.0.1; default 11434 (Ollama's); 0 takes a free port")
    parser.add_argument("--mode", choices=MODES, default="stable",
                        help="reply model (default stable); see pytest_robustexplain.testing.replies")
    parser.add_argument("--model", dest="models", action="append", metavar="NAME", default=None,
                        help="model name to serve (repeatable); default fake-model:latest")
    parser.add_argument("--latency", type=float, default=0.0, metavar="SECONDS",
                        help="processing time of each chat request; default 0")
    parser.add_argument("--capacity", type=int, default=None, metavar="N",
                        help="chat requests processed at once (like OLLAMA_NUM_PARALLEL); default unlimited")


def serve(args: argparse.Namespace, *, stop: threading.Event | None = None) -> int:
    """Run the server until Ctrl-C (or ``stop`` is set); 0 on a clean stop, 2 when it cannot start."""
    try:
        server = FakeOllamaServer(models=args.models or ("fake-model:latest",), mode=args.mode,
                                  latency=args.latency, capacity=args.capacity, port=args.port)
        server.start()
    except ValueError as exc:  # a bad option
        print(f"fake-server: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the port is taken, or not ours to take
        taken = exc.errno == errno.EADDRINUSE
        why = "is already in use (Ollama itself, or another fake server?)" if taken else \
            f"cannot be opened ({exc.strerror or exc})"
        print(f"fake-server: error: port {args.port} on 127.0.0.1 {why}: pick another with --port, or "
              "--port 0 for a free one", file=sys.stderr)
        return 2
    stop = stop or threading.Event()
    _stop_on_signals(stop)
    try:  # from the address line on: a script may send Ctrl-C as soon as it has read it
        print(f"{LISTENING} {server.url} (mode {server.mode}, models {', '.join(server.models)}); "
              "Ctrl-C stops it", flush=True)
        stop.wait()
    except KeyboardInterrupt:
        pass  # the normal way to stop it
    finally:
        server.stop()
    print("fake Ollama stopped", flush=True)
    return 0


def _stop_on_signals(stop: threading.Event) -> None:
    """Ctrl-C stops the server even when it was started with SIGINT ignored (as a shell's background job,
    or under a CI runner); SIGTERM, what process managers send, stops it cleanly too."""
    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be set from the main thread; ``stop`` still works
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_robustexplain.testing",
                                     description="Serve the fake Ollama server on loopback until Ctrl-C.")
    add_arguments(parser)
    return serve(parser.parse_args(argv))
