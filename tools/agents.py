"""`make agents`: the real coding agents, one turn each, against `pooled serve` as `make serve` runs it.

Installs pinned Claude Code, Codex and opencode from the npm registry into
~/.cache/pooled/agents (once), starts `pooled serve` on a free port with `--pooled-args` (none by
default: the default model's output cap comes from its catalog entry), and runs one turn of each:
`claude -p`, `codex exec`, and `opencode run` over Chat Completions, Responses and Anthropic
Messages. Every client runs with a throwaway HOME and its telemetry and update checks
off. Per turn it prints PASS or FAIL with the turn's time, the model requests it made, and their
prompt and cached tokens (from the server's /metrics). A PASS means the client exited 0 and
printed an answer, and the server answered each of its requests 2xx (a client retries after an
error status or a max_tokens stop, both FAILs); a FAIL that a small model explains (its answer ran to the output cap,
or it was still writing when the turn's time ran out) says "model".

python tools/agents.py [--only claude,codex,opencode-chat,...] [--pooled-args '...'] [--turn-timeout S]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.http.test_serve_process import free_port  # noqa: E402
from tools.bench import running  # noqa: E402

AGENTS_DIR = Path.home() / ".cache" / "pooled" / "agents"
PACKAGES = {"@anthropic-ai/claude-code": "2.1.332", "@openai/codex": "0.171.0", "opencode-ai": "1.18.33"}
QUESTION = "What is 2+2? Answer in one word."
MODEL_ROUTES = ("/v1/messages", "/v1/responses", "/v1/chat/completions")
TIMED_OUT = -1
ACCESS_LINE = re.compile(r'"(?P<method>[A-Z]+) (?P<path>\S+) HTTP/[\d.]+" (?P<status>\d{3})')


@dataclass(frozen=True)
class Turn:
    name: str
    command: list[str]
    env: dict[str, str]
    cwd: Path


@dataclass(frozen=True)
class Outcome:
    name: str
    verdict: str
    seconds: float
    requests: int
    prompt_tokens: int
    cached_tokens: int
    detail: str


def install() -> Path:
    """The pinned clients' folder, installing them first when any is missing or another version."""
    manifest = AGENTS_DIR / "package.json"
    wanted = {"dependencies": PACKAGES}
    if not manifest.exists() or json.loads(manifest.read_text()) != wanted:
        shutil.rmtree(AGENTS_DIR / "node_modules", ignore_errors=True)  # install scripts run on a fresh tree only
        AGENTS_DIR.mkdir(parents=True, exist_ok=True)
        manifest.write_text(json.dumps(wanted))
        # Each client's binary comes in a platform package (an optional dependency); Claude
        # Code's and opencode's install scripts put it in place of their launchers.
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(AGENTS_DIR)], check=True)
    return AGENTS_DIR / "node_modules" / ".bin"


def offline_env(home: Path) -> dict[str, str]:
    keep = {name: value for name, value in os.environ.items() if name in ("PATH", "LANG", "TERM", "SSL_CERT_FILE")}
    return {
        **keep,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "DISABLE_TELEMETRY": "1",
        "DO_NOT_TRACK": "1",
    }


def claude_turn(bin_dir: Path, base: str, model: str, home: Path) -> Turn:
    env = {
        **offline_env(home),
        "ANTHROPIC_BASE_URL": base,
        "ANTHROPIC_AUTH_TOKEN": "pooled",
        "ANTHROPIC_MODEL": model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    return Turn("claude", [str(bin_dir / "claude"), "-p", QUESTION], env, home)


def codex_turn(bin_dir: Path, base: str, model: str, home: Path) -> Turn:
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True)
    (codex_home / "config.toml").write_text(
        f'model = "{model}"\nmodel_provider = "pooled"\n\n[model_providers.pooled]\nname = "pooled"\n'
        f'base_url = "{base}/v1"\nwire_api = "responses"\n'
    )
    env = {**offline_env(home), "CODEX_HOME": str(codex_home)}
    return Turn("codex", [str(bin_dir / "codex"), "exec", "--skip-git-repo-check", QUESTION], env, home)


OPENCODE_PROVIDERS = {
    "opencode-chat": "@ai-sdk/openai-compatible",
    "opencode-responses": "@ai-sdk/openai",
    "opencode-anthropic": "@ai-sdk/anthropic",
}


def opencode_turn(name: str, bin_dir: Path, base: str, model: str, home: Path) -> Turn:
    provider = {
        "npm": OPENCODE_PROVIDERS[name],
        "name": "pooled",
        "options": {"baseURL": f"{base}/v1", "apiKey": "pooled"},
        "models": {model: {"name": model}},
    }
    config = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {"pooled": provider},
        "model": f"pooled/{model}",
        "small_model": f"pooled/{model}",
    }
    (home / "opencode.json").write_text(json.dumps(config, indent=2))
    env = {
        **offline_env(home),
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
    }
    return Turn(name, [str(bin_dir / "opencode"), "run", QUESTION], env, home)


TURNS: dict[str, Callable[[Path, str, str, Path], Turn]] = {
    "claude": claude_turn,
    "codex": codex_turn,
    **{name: functools.partial(opencode_turn, name) for name in OPENCODE_PROVIDERS},
}


def counters(base: str) -> dict[str, int]:
    metrics = httpx.get(f"{base}/metrics", timeout=10).json()
    keys = ("prompt_tokens_total", "prefix_cache_hits_total", "requests_running")
    return {key: int(metrics.get(key) or 0) for key in keys}


def model_requests(log: Path, start: int) -> list[tuple[str, int]]:
    """(path, status) of each model request in the server's access log past byte `start`."""
    text = log.read_bytes()[start:].decode(errors="replace")
    found = []
    for match in ACCESS_LINE.finditer(text):
        if match["method"] == "POST" and match["path"].split("?")[0] in MODEL_ROUTES:
            found.append((match["path"].split("?")[0], int(match["status"])))
    return found


def verdict(returncode: int, output: str, requests: list[tuple[str, int]], generating: bool) -> tuple[str, str]:
    failed = [status for _, status in requests if status >= 300]
    if "exceeded the 32000 output token maximum" in output or "max_tokens" in output.lower():
        return "FAIL (model)", "the answer ran to the output cap; the client treats that as an error"
    if returncode == TIMED_OUT and generating:
        return "FAIL (model)", "still writing its answer when the turn's time ran out (it never wrote an end token)"
    if returncode != 0:
        return "FAIL", f"exit {returncode}: {output.strip()[-300:]}"
    if failed:
        return "FAIL", f"server answered {failed}"
    if not output.strip():
        return "FAIL", "no answer printed"
    return "PASS", " ".join(output.split())[:120]


def run_turn(turn: Turn, base: str, log: Path, timeout_s: float) -> Outcome:
    before, start = counters(base), log.stat().st_size
    started = time.monotonic()
    try:
        done = subprocess.run(
            turn.command, cwd=turn.cwd, env=turn.env, capture_output=True, text=True, timeout=timeout_s, check=False
        )
        returncode, output = done.returncode, done.stdout + ("\n" + done.stderr if done.returncode else "")
    except subprocess.TimeoutExpired as expired:
        returncode, output = TIMED_OUT, f"timed out after {timeout_s:.0f} s: {(expired.stdout or b'')[-300:]!r}"
    seconds = time.monotonic() - started
    generating = counters(base)["requests_running"] > 0
    time.sleep(0.5)  # the access log line of the last request
    after, requests = counters(base), model_requests(log, start)
    verdict_text, detail = verdict(returncode, output, requests, generating)
    return Outcome(
        turn.name,
        verdict_text,
        seconds,
        len(requests),
        after["prompt_tokens_total"] - before["prompt_tokens_total"],
        after["prefix_cache_hits_total"] - before["prefix_cache_hits_total"],
        detail,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=",".join(TURNS), help="comma-separated turns: " + ", ".join(TURNS))
    parser.add_argument("--pooled-args", default="", help="extra flags for pooled serve (default: none)")
    parser.add_argument("--turn-timeout", type=float, default=600.0, help="seconds one turn may take")
    args = parser.parse_args()
    names = [name.strip() for name in args.only.split(",") if name.strip()]
    if unknown := [name for name in names if name not in TURNS]:
        parser.error(f"unknown turns {unknown}; known: {', '.join(TURNS)}")
    if shutil.which("npm") is None:
        print("make agents needs npm (Node.js) to install the clients", file=sys.stderr)
        return 2
    bin_dir = install()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    pooled = str(Path(sys.executable).parent / "pooled")
    command = [pooled, "serve", "--port", str(port), *shlex.split(args.pooled_args)]
    with tempfile.TemporaryDirectory(prefix="pooled-agents-") as scratch:
        log = Path(scratch) / "serve.log"
        outcomes = run_all(names, command, base, log, bin_dir, Path(scratch), args.turn_timeout)
    return 0 if all(o.verdict == "PASS" for o in outcomes) else 1


def run_all(
    names: list[str], command: list[str], base: str, log: Path, bin_dir: Path, scratch: Path, timeout_s: float
) -> list[Outcome]:
    outcomes = []
    with running(command, base, "/health", log):
        model = httpx.get(f"{base}/health", timeout=10).json()["model"]
        print(f"pooled serve: {model}, {shlex.join(command[2:])}", flush=True)
        for name in names:
            home = scratch / name
            home.mkdir()
            outcome = run_turn(TURNS[name](bin_dir, base, model, home), base, log, timeout_s)
            outcomes.append(outcome)
            print(
                f"{outcome.verdict:13} {outcome.name:19} {outcome.seconds:6.1f} s  {outcome.requests} requests  "
                f"prompt {outcome.prompt_tokens} tokens, cached {outcome.cached_tokens}  {outcome.detail}",
                flush=True,
            )
    return outcomes


if __name__ == "__main__":
    sys.exit(main())
