"""Two `pooled serve` replicas behind Debian's nginx with docs/deploy/nginx.conf as shipped (only
its ports changed): a conversation's requests reach one replica (its session header hashed), other
conversations spread, and a replica that drains is skipped on its 503s."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_switching import servable
from tests.pooled_servers import free_port, running_process

REPO = Path(__file__).resolve().parents[2]
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"

Replicas = tuple[str, list[str], list[subprocess.Popen[bytes]]]  # the balancer's URL, the replicas' URLs, processes

pytestmark = pytest.mark.skipif(
    not Path(NGINX).exists(), reason="nginx is missing and could not be installed (run `make test-packages`)"
)


def balancer_config(ports: tuple[int, int], listen: int, root: Path) -> str:
    """The shipped http-level file with this test's ports, in a main file of its own (no root paths)."""
    site = (REPO / "docs" / "deploy" / "nginx.conf").read_text()
    for shipped, port in (("8081", ports[0]), ("8082", ports[1]), ("8080", listen)):
        site = site.replace(f":{shipped} ", f":{port} ").replace(f"listen {shipped};", f"listen 127.0.0.1:{port};")
    assert str(listen) in site and all(f":{port} " in site for port in ports), site
    (root / "site.conf").write_text(site)
    return (
        f"daemon off;\nworker_processes 1;\npid {root}/nginx.pid;\nerror_log {root}/error.log;\n"
        f"events {{}}\nhttp {{\n    access_log off;\n"
        + "".join(
            f"    {kind}_temp_path {root}/{kind};\n" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        + f"    include {root}/site.conf;\n}}\n"
    )


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicas]:
    model = servable("llama_tied", tmp_path_factory.mktemp("models") / "tiny-llama")
    listen = free_port()
    args = ["--model", str(model), "--ctx", "64", "--decode-lanes", "2", "--allow-host", f"127.0.0.1:{listen}"]
    with running_process(tmp_path_factory, args) as first, running_process(tmp_path_factory, args) as second:
        urls = [first[0], second[0]]
        ports = (int(urls[0].rsplit(":", 1)[1]), int(urls[1].rsplit(":", 1)[1]))
        root = tmp_path_factory.mktemp("nginx")
        (root / "nginx.conf").write_text(balancer_config(ports, listen, root))
        balancer = subprocess.Popen([NGINX, "-c", str(root / "nginx.conf"), "-p", str(root)], stderr=subprocess.PIPE)
        try:
            base = f"http://127.0.0.1:{listen}"
            deadline = time.monotonic() + 30
            while not _answers(base):
                assert balancer.poll() is None, balancer.stderr.read().decode() if balancer.stderr else ""
                assert time.monotonic() < deadline, "nginx did not start"
                time.sleep(0.2)
            yield base, urls, [first[1], second[1]]
        finally:
            balancer.terminate()
            balancer.wait(10)


def _answers(base: str) -> bool:
    try:
        return httpx.get(f"{base}/health", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def served(replica: str) -> int:
    return int(httpx.get(f"{replica}/health", timeout=5).json()["served"])


def complete(base: str, headers: dict[str, str]) -> httpx.Response:
    body = {"prompt": "hello world", "max_tokens": 2, "temperature": 0}
    return httpx.post(f"{base}/v1/completions", json=body, headers=headers, timeout=120)


def test_a_conversation_stays_on_one_replica_and_conversations_spread(
    replicas: Replicas,
) -> None:
    base, urls, _ = replicas
    for header in ("x-session-affinity", "x-claude-code-session-id", "session-id"):
        before = [served(url) for url in urls]
        for _ in range(4):
            assert complete(base, {header: f"conversation-{header}"}).status_code == 200
        grew = sorted(served(url) - was for url, was in zip(urls, before, strict=True))
        assert grew == [0, 4], (header, grew)  # every turn on one replica
    before = [served(url) for url in urls]
    for i in range(12):
        assert complete(base, {"x-session-affinity": f"conversation-{i}"}).status_code == 200
    assert all(served(url) > was for url, was in zip(urls, before, strict=True)), "one replica took every conversation"


def test_a_draining_replica_is_skipped(replicas: Replicas) -> None:
    base, urls, processes = replicas
    session = {"x-session-affinity": "conversation-drained"}
    before = [served(url) for url in urls]
    assert complete(base, session).status_code == 200
    home = next(i for i, url in enumerate(urls) if served(url) > before[i])
    processes[home].send_signal(signal.SIGTERM)  # it drains (503) and exits
    processes[home].wait(60)
    other = urls[1 - home]
    before_other = served(other)
    for _ in range(3):
        assert complete(base, session).status_code == 200
    assert served(other) == before_other + 3
