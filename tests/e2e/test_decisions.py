"""System One decisions (`POST /v1/systemone`, `POST /v1/decide`) against a real `pooled serve`
with the default model: the bodies jebadiah-decide and callo send, the answer's shape and
numbers, and bad bodies."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from jebadiah_decide.client import Jeb

from handlers.decisions.questions import SYSTEM_PROMPT

# What the clients send (../shared/reference/system-one-decisions.md §5).
JEB_PROBE = {"state": {"ping": "ok"}, "questions": {"ok": {"type": "noul", "instructions": "The state says ok."}}}
CALLO_CLASSIFY = {
    "state": "The package arrived two weeks late.\n",
    "questions": {
        "q": {"type": "choice", "instructions": "", "criteria": {"positive": None, "negative": None, "neutral": None}}
    },
}
TICKET = {
    "model": "jebadiah-9b",
    "calibration": "raw",
    "state": {"ticket": "Customer says the invoice total does not match the quote."},
    "questions": {
        "route": {
            "type": "choice",
            "instructions": "Which team should take this ticket?",
            "criteria": {"billing": "an invoice, a charge or a refund", "support": "a product question", "sales": None},
        },
        "urgent": {
            "type": "noul",
            "instructions": "The customer is blocked from working.",
            "criteria": {"true": "work has stopped", "false": "it can wait"},
        },
        "urgency": {"type": "score", "instructions": "How urgent is it?", "criteria": ["can wait", "today", "now"]},
    },
}


def decide(server: str, body: dict[str, Any], path: str = "/v1/systemone") -> httpx.Response:
    return httpx.post(f"{server}{path}", json=body, timeout=120)


def test_jebadiah_decides_probe_is_answered(server: str) -> None:
    reply = decide(server, JEB_PROBE)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["answers"]["ok"]["type"] == "noul" and 0 <= body["answers"]["ok"]["noul"] <= 1
    assert body["usage"]["output_tokens"] == 0 and body["usage"]["input_tokens"] > 0
    assert body["latency_ms"] > 0 and body["model"].startswith("pooled/smollm2")


def test_callo_classify_gets_every_options_probability(server: str) -> None:
    answer = decide(server, CALLO_CLASSIFY).json()["answers"]["q"]
    probabilities = answer["probabilities"]
    assert set(probabilities) == {"positive", "negative", "neutral"}
    assert sum(probabilities.values()) == pytest.approx(1.0)
    assert answer["choice"] == max(probabilities, key=probabilities.__getitem__)
    assert answer["confidence"] == pytest.approx((max(probabilities.values()) - 1 / 3) / (1 - 1 / 3))


def test_the_probabilities_are_the_labels_next_token_logprobs_softmaxed(server: str) -> None:
    """The same prompt sent to /v1/completions as token ids: the labels' logprobs there, softmaxed
    over the labels, are the decision's probabilities (the labels A and B of a noul, true first)."""
    body = {"state": "The sky is blue.", "questions": {"q": {"type": "noul", "instructions": "The sky is blue."}}}
    noul = decide(server, body).json()["answers"]["q"]["noul"]
    user = "STATE:\nThe sky is blue.\n\nQUESTION: The sky is blue.\n\nOPTIONS:\nA. true\nB. false\n\n"
    user += "Answer with the label of one option and nothing else."
    messages = [
        {
            "role": "system",
            "content": SYSTEM_PROMPT,
        },
        {"role": "user", "content": user},
    ]
    tokens = httpx.post(
        f"{server}/v1/tokenize", json={"messages": messages, "chat_template_kwargs": {"enable_thinking": False}}
    ).json()["tokens"]
    completion = httpx.post(
        f"{server}/v1/completions",
        json={"prompt": tokens, "max_tokens": 1, "temperature": 0, "logprobs": 5},
        timeout=60,
    ).json()
    top = completion["choices"][0]["logprobs"]["top_logprobs"][0]
    assert {"A", "B"} <= set(top), top  # both labels are among this prompt's 5 likeliest tokens
    expected = 1 / (1 + math.exp(top["B"] - top["A"]))
    assert noul == pytest.approx(expected, abs=1e-4)


def test_every_question_type_answers_and_decide_is_the_same_handler(server: str) -> None:
    answers = decide(server, TICKET).json()["answers"]
    assert [answers[q]["type"] for q in ("route", "urgent", "urgency")] == ["choice", "noul", "score"]
    urgency = answers["urgency"]
    assert urgency["legend"] == {"0": "can wait", "1": "today", "2": "now"}
    expected_level = sum(int(level) * p for level, p in urgency["probabilities"].items())
    assert urgency["score"] == pytest.approx(expected_level) and 0 <= urgency["confidence"] <= 1
    again = decide(server, TICKET, "/v1/decide").json()["answers"]
    for question in ("route", "urgency"):  # answered again, its state now from the prefix cache
        for option, p in answers[question]["probabilities"].items():
            assert again[question]["probabilities"][option] == pytest.approx(p, abs=1e-5)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"state": {}, "questions": {}}, "questions"),
        ({"state": "x", "questions": {"q": {"type": "rank", "criteria": {"a": None}}}}, "questions.q.type"),
        ({"state": "x", "questions": {"q": {"type": "choice", "criteria": ["a", "b"]}}}, "questions.q.criteria"),
        ({"state": "x", "questions": {"q": {"type": "score", "criteria": ["only one"]}}}, "questions.q.criteria"),
        ({"state": "x", "questions": {"q": {"type": "noul", "criteria": {"maybe": "?"}}}}, "questions.q.criteria"),
        (
            {"state": "x", "questions": {"q": {"type": "choice", "criteria": {str(i): None for i in range(27)}}}},
            "questions.q.criteria",
        ),
    ],
)
def test_a_bad_question_is_a_400_in_openais_shape(server: str, body: dict[str, Any], param: str) -> None:
    reply = decide(server, body)
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param and error["message"]


def test_a_body_without_a_state_is_a_400(server: str) -> None:
    reply = decide(server, {"questions": JEB_PROBE["questions"]})
    assert reply.status_code == 400 and reply.json()["error"]["type"] == "invalid_request_error"


def test_callo_classify_runs_against_the_server(server: str) -> None:
    """`callo classify` as a user runs it: the state on stdin, the answer as JSON on stdout."""
    callo = Path(sys.executable).parent / "callo"
    options = ["--options", "positive,negative,neutral", "--json"]
    ran = subprocess.run(
        [str(callo), "classify", "--url", server, *options],
        input="The package arrived two weeks late.\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    answer = json.loads(ran.stdout)["answers"]["q"]
    assert answer["choice"] in ("positive", "negative", "neutral") and len(answer["probabilities"]) == 3


def test_jebadiah_decides_client_probes_and_decides(server: str) -> None:
    """jebadiah-decide's `systemone` backend: its readiness probe (a real decision) and a decision,
    raw (it sends `calibration: "raw"`)."""
    jeb = Jeb("systemone", url=f"{server}/v1", temperatures=False)
    jeb.prepare(progress=lambda *_: None)
    out = jeb.decide(TICKET["state"], TICKET["questions"])
    assert set(out["answers"]) == {"route", "urgent", "urgency"} and out["warnings"] == []
    assert out["answers"]["route"]["choice"] in ("billing", "support", "sales")
