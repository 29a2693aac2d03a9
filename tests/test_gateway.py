"""The gateway route, for real (issue 27): the gate through a LiteLLM proxy (``litellm[proxy]`` from PyPI)
load-balancing two fake servers, one of them rate-limited. Skipped, saying why, where LiteLLM is not
installed (it is not in the dev extra: its dependency tree is larger than the project's). The proxy
configuration is the one the README shows."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from pytest_robustexplain import cli
from pytest_robustexplain.testing import FakeOllamaServer

LITELLM = shutil.which("litellm") or (os.environ.get("LITELLM_BIN") or None)
pytestmark = pytest.mark.skipif(LITELLM is None, reason="LiteLLM is not installed (pip install "
                                                        "'litellm[proxy]', or LITELLM_BIN=/path/to/litellm)")
KEY = "sk-robustexplain-test"

CONFIG = """\
model_list:
  - model_name: fake-model
    litellm_params:
      model: openai/fake-model:latest
      api_base: {first}/v1
      api_key: none
  - model_name: fake-model
    litellm_params:
      model: openai/fake-model:latest
      api_base: {second}/v1
      api_key: none
router_settings:
  routing_strategy: simple-shuffle
  num_retries: 2
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ready(url: str, deadline: float) -> bool:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {KEY}"})
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(request, timeout=2) as reply:
                return reply.status == 200
        except OSError:
            time.sleep(0.5)
    return False


def test_the_gate_runs_through_a_litellm_proxy_balancing_two_servers(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    assert LITELLM is not None
    with FakeOllamaServer() as first, FakeOllamaServer() as second:
        second.rate_limit(1, after=3)  # a gateway's backend that throttles: the proxy retries elsewhere
        (tmp_path / "config.yaml").write_text(CONFIG.format(first=first.url, second=second.url),
                                              encoding="utf-8")
        port = _free_port()
        env = {**os.environ, "LITELLM_MASTER_KEY": KEY}
        proxy = subprocess.Popen([LITELLM, "--config", str(tmp_path / "config.yaml"), "--port", str(port)],
                                 cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            up = _ready(f"http://127.0.0.1:{port}/v1/models", time.monotonic() + 120)
            assert up, "the proxy never came up"
            monkeypatch.setenv("OPENAI_API_KEY", KEY)
            code = cli.main(["run", "--backend", "openai", "--host", f"http://127.0.0.1:{port}/v1",
                             "--model", "fake-model", "--users", "4", "--perturbations", "noise",
                             "--severities", "1,5", "--cache", "off", "--progress", "off", "-q",
                             "--inconclusive", "warn", "--json", str(tmp_path / "r.json")])
        finally:
            proxy.terminate()
            proxy.wait(timeout=30)
        answered = (first.chat_calls, second.chat_calls)
    doc = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert code == cli.EXIT_OK
    assert doc["calls"]["failed"] == 0 and all(p["failure"] is None for p in doc["pairs"])
    assert all(n > 0 for n in answered), f"both servers answer behind the proxy: {answered}"
    assert doc["models"][0]["host"] == f"http://127.0.0.1:{port}/v1"
