"""The Responses API of a real server, through the official `openai` SDK: every answer and stream
event parses as the SDK's own types."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import openai
import pytest
from openai.types.responses import Response, ResponseCompletedEvent, ResponseIncompleteEvent

WEATHER_TOOL: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather of a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}, "days": {"type": "integer"}},
        "required": ["city", "days"],
        "additionalProperties": False,
    },
    "strict": True,
}
SHORT = 24  # output tokens: enough for a few words, quick on two cores


def test_answer(client: openai.OpenAI) -> None:
    response = client.responses.create(model="any-name", input="Say hi.", max_output_tokens=SHORT)
    assert response.status in ("completed", "incomplete") and response.output_text
    assert response.usage is not None and response.usage.input_tokens > 0 and response.usage.output_tokens > 0
    assert response.model.startswith("pooled/")


def test_stream_parses_and_ends_with_usage(client: openai.OpenAI) -> None:
    events = list(
        client.responses.create(input="Say hi.", instructions="Be brief.", max_output_tokens=SHORT, stream=True)
    )
    assert [event.sequence_number for event in events] == list(range(len(events)))
    kinds = [event.type for event in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    last = events[-1]
    assert isinstance(last, ResponseCompletedEvent | ResponseIncompleteEvent) and last.response.usage is not None
    text = "".join(getattr(event, "delta", "") for event in events if event.type == "response.output_text.delta")
    assert text and text == last.response.output_text


def test_stream_helper_accumulates_the_same_response(client: openai.OpenAI) -> None:
    # The helper rebuilds the response from the events, so it fails on any event out of order. (Its
    # get_final_response() wants response.completed; a budget that runs out ends with response.incomplete.)
    with client.responses.stream(model="any", input="Name a colour.", max_output_tokens=SHORT) as stream:
        events = list(stream)
    final = events[-1]
    assert isinstance(final, ResponseCompletedEvent | ResponseIncompleteEvent)
    deltas = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    assert deltas == final.response.output_text


def test_json_schema_output_validates(client: openai.OpenAI) -> None:
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}, "sure": {"type": "boolean"}},
        "required": ["answer", "sure"],
        "additionalProperties": False,
    }
    response = client.responses.create(
        input="Is the sky blue? Answer in JSON.",
        text={"format": {"type": "json_schema", "name": "verdict", "schema": schema, "strict": True}},
        max_output_tokens=32,
    )
    jsonschema.validate(json.loads(response.output_text), schema)


@pytest.mark.parametrize("stream", [False, True])
def test_required_tool_call_arguments_validate(client: openai.OpenAI, stream: bool) -> None:
    # One call, greedy: with parallel calls the grammar admits more, and a sampled 135M model may
    # go on calling or write an integer of any length.
    body: Any = {
        "input": "What is the weather in Rome?",
        "tools": [WEATHER_TOOL],
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "max_output_tokens": 64,
        "temperature": 0,
    }
    if stream:
        events = list(client.responses.create(**body, stream=True))
        assert "response.function_call_arguments.done" in [event.type for event in events]
        deltas = [event.delta for event in events if event.type == "response.function_call_arguments.delta"]
        response: Response = events[-1].response
        streamed = next(item for item in response.output if item.type == "function_call")
        assert len(deltas) > 1 and "".join(deltas) == streamed.arguments  # as the model writes them
    else:
        response = client.responses.create(**body)
    calls = [item for item in response.output if item.type == "function_call"]
    assert calls and calls[0].name == "get_weather"
    jsonschema.validate(json.loads(calls[0].arguments), WEATHER_TOOL["parameters"])


def test_previous_response_id_sees_the_earlier_turns(client: openai.OpenAI) -> None:
    first = client.responses.create(input="My name is Ada Lovelace.", max_output_tokens=8)
    alone = client.responses.input_tokens.count(input="What is my name?")
    continued = client.responses.input_tokens.count(input="What is my name?", previous_response_id=first.id)
    assert first.usage is not None
    # The continued prompt holds the first turn: its input and its answer.
    assert continued.input_tokens >= alone.input_tokens + first.usage.output_tokens
    second = client.responses.create(input="What is my name?", previous_response_id=first.id, max_output_tokens=8)
    assert second.usage is not None and second.usage.input_tokens == continued.input_tokens
    assert second.previous_response_id == first.id
    items = client.responses.input_items.list(second.id, order="asc")
    texts = [item.content[0].text for item in items.data if item.type == "message"]  # type: ignore[union-attr]
    assert texts[0] == "My name is Ada Lovelace." and texts[-1] == "What is my name?"
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(input="Hi", previous_response_id="resp_never_stored")
    assert refused.value.code == "previous_response_not_found"


def test_retrieve_list_items_delete(client: openai.OpenAI) -> None:
    items: Any = [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": "One"},
        {"role": "assistant", "content": "Two"},
        {"role": "user", "content": "Three"},
    ]
    created = client.responses.create(input=items, max_output_tokens=4, metadata={"run": "e2e"})
    retrieved = client.responses.retrieve(created.id)
    assert retrieved.id == created.id and retrieved.output_text == created.output_text
    assert retrieved.metadata == {"run": "e2e"}
    page = client.responses.input_items.list(created.id, limit=2)
    assert len(page.data) == 2 and page.has_more
    everything = list(client.responses.input_items.list(created.id, limit=2))  # the SDK follows `after`
    assert [item.type for item in everything] == ["message"] * 4
    client.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)


def test_store_false_is_not_kept(client: openai.OpenAI) -> None:
    response = client.responses.create(input="Hi", store=False, max_output_tokens=4)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)


def test_the_sdks_websocket_mode_streams_responses_and_chains_them(client: openai.OpenAI) -> None:
    """`client.responses.connect()`: two responses on one socket, the second continuing the first,
    each answered as its HTTP stream would be."""
    asked = {"model": "pooled", "input": "Name a fruit.", "max_output_tokens": 8, "temperature": 0}
    over_http = client.responses.create(**asked)
    with client.responses.connect() as connection:
        connection.response.create(**asked)
        first = _socket_response(connection)
        connection.response.create(**{**asked, "input": "Another one."}, previous_response_id=first.id)
        second = _socket_response(connection)
    assert first.output_text == over_http.output_text and first.status in ("completed", "incomplete")
    assert second.previous_response_id == first.id and second.id != first.id
    assert client.responses.retrieve(second.id).id == second.id  # stored, as over HTTP


def _socket_response(connection: Any) -> Response:
    for event in connection:
        assert event.type != "error", event
        if isinstance(event, (ResponseCompletedEvent, ResponseIncompleteEvent)):
            return event.response
    raise AssertionError("the socket closed before the response ended")
