"""`make serve` (tools/serve.py) on a port that is taken: one line that names the port and the
way out, not a traceback."""

import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_taken_port_is_one_line_suggesting_another(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = subprocess.run([sys.executable, str(ROOT / "tools" / "serve.py"), str(tmp_path),
                              "--port", str(port)], capture_output=True, text=True, timeout=30)
    assert run.returncode == 1
    assert run.stderr.strip() == (f"serve: port {port} is already in use (another server?); "
                                  f"choose another: make serve PORT={port + 1}")
