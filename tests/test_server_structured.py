"""Constrained decoding through `zen serve` and the official openai client: response_format
(json_object, json_schema strict and not), the SDK's pydantic parse helper, vLLM's guided_* /
structured_outputs and llama.cpp's grammar / json_schema fields, forced tool calls, streaming,
reasoning before the constrained answer, n > 1, hostile schemas, and speculative decoding under
a grammar. Every test checks properties of the output (it validates, it matches, it is one of
the choices), never the model's exact words."""
import concurrent.futures
import copy
import json
import re
import time
import uuid
from typing import Literal, Optional

import jsonschema
import openai
import pydantic
import pytest

from conftest import DEFAULT_MODEL, ROOT, need
from zen_server import ZenServer

CODER_1_5B = ROOT / "models" / "coder-1.5b" / "model.gguf"


def rf(schema, name="answer", strict=True):
    """An OpenAI response_format asking for `schema`."""
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": strict}}


def validate(text, schema):
    """The parsed text; raises if it is not JSON or does not validate against the schema."""
    value = json.loads(text)
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(value)
    return value


def ask(server, content, max_tokens=128, **kw):
    kw.setdefault("temperature", 0)
    messages = content if isinstance(content, list) else [{"role": "user", "content": content}]
    return server.client().chat.completions.create(model=server.model, messages=messages,
                                                   max_tokens=max_tokens, **kw)


def error_of(excinfo):
    """The {"message", "param", ...} object of an API error response."""
    body = excinfo.value.response.json()
    return body["error"]


def stream_text(stream):
    """(content, reasoning, finish_reason) of a streamed chat completion (one choice)."""
    content, reasoning, finish = "", "", None
    for chunk in stream:
        for choice in chunk.choices:
            content += choice.delta.content or ""
            reasoning += getattr(choice.delta, "reasoning_content", None) or ""
            finish = choice.finish_reason or finish
    return content, reasoning, finish


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "address": {"type": "object",
                    "properties": {"street": {"type": "string"}, "city": {"type": "string"},
                                   "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                    "required": ["street", "city", "zip"], "additionalProperties": False},
    },
    "required": ["name", "age", "address"], "additionalProperties": False,
}

# (name, schema, prompt): each schema holds a constraint the model would not keep unaided.
SCHEMAS = [
    ("nested_object", PERSON, "Give the record of a fictional person as JSON, with a US address."),
    ("array_bounds", {"type": "object",
                      "properties": {"colors": {"type": "array", "items": {"type": "string"},
                                                "minItems": 2, "maxItems": 3}},
                      "required": ["colors"], "additionalProperties": False},
     "List the seven colors of the rainbow as JSON."),
    ("top_level_array", {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 9},
                         "minItems": 4, "maxItems": 4},
     "Give the first ten prime numbers as a JSON array."),
    ("enum_and_integer_bounds", {"type": "object",
                                 "properties": {"sentiment": {"enum": ["positive", "negative", "mixed"]},
                                                "stars": {"type": "integer", "minimum": 1, "maximum": 5},
                                                "year": {"type": "integer", "minimum": 1900, "maximum": 1999}},
                                 "required": ["sentiment", "stars", "year"], "additionalProperties": False},
     "Review the 2019 movie Parasite as JSON: sentiment, stars out of 10 and release year."),
    ("any_of_null", {"type": "object",
                     "properties": {"first": {"type": "string"},
                                    "middle": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                                    "nickname": {"anyOf": [{"type": "string", "maxLength": 12}, {"type": "null"}]},
                                    "score": {"anyOf": [{"type": "number", "minimum": 0, "maximum": 1},
                                                        {"type": "null"}]}},
                     "required": ["first", "middle", "nickname", "score"], "additionalProperties": False},
     "Describe the name of a fictional person as JSON, with a test score."),
    ("defs_ref", {"$defs": {"item": {"type": "object",
                                     "properties": {"product": {"type": "string"},
                                                    "quantity": {"type": "integer", "minimum": 1, "maximum": 99}},
                                     "required": ["product", "quantity"], "additionalProperties": False}},
                  "type": "object",
                  "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/item"},
                                           "minItems": 1, "maxItems": 3},
                                 "total_quantity": {"type": "integer"}},
                  "required": ["items", "total_quantity"], "additionalProperties": False},
     "A shopping list for a pancake breakfast, as JSON."),
    ("linked_list", {"$defs": {"node": {"type": "object",
                                        "properties": {"value": {"type": "integer"},
                                                       "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
                                        "required": ["value", "next"], "additionalProperties": False}},
                     "$ref": "#/$defs/node"},
     "Represent the list 1, 2, 3 as a linked list in JSON."),
]


# 1. response_format json_object

@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 1, "seed": 7}, {"temperature": 1, "seed": 8}],
                         ids=["greedy", "seed7", "seed8"])
def test_json_object_is_an_object(zen_server, sampling):
    r = ask(zen_server, "Return a JSON object describing a fictional person with the keys name and age.",
            response_format={"type": "json_object"}, **sampling)
    choice = r.choices[0]
    assert choice.finish_reason == "stop", choice
    assert isinstance(json.loads(choice.message.content), dict)


# 2. response_format json_schema, strict

@pytest.mark.parametrize("name,schema,prompt", SCHEMAS, ids=[s[0] for s in SCHEMAS])
def test_json_schema_strict_output_validates(zen_server, name, schema, prompt):
    r = ask(zen_server, prompt, max_tokens=160, response_format=rf(schema, name))
    choice = r.choices[0]
    assert choice.finish_reason == "stop", choice
    validate(choice.message.content, schema)


def test_recursive_schema_terminates_or_stays_a_prefix(zen_server):
    """A tree schema can nest forever: when the answer ends it validates; when max_tokens cuts it,
    what came is still the start of a JSON object of the tree."""
    tree = {"$defs": {"node": {"type": "object",
                               "properties": {"name": {"type": "string", "maxLength": 20},
                                              "children": {"type": "array", "items": {"$ref": "#/$defs/node"},
                                                           "maxItems": 3}},
                               "required": ["name", "children"], "additionalProperties": False}},
            "$ref": "#/$defs/node"}
    prompt = "Give a tiny company org chart as a tree: a CEO with two reports who have no reports."
    for max_tokens in (128, 12):
        r = ask(zen_server, prompt, max_tokens=max_tokens, response_format=rf(tree, "org_chart"))
        choice = r.choices[0]
        if choice.finish_reason == "stop":
            validate(choice.message.content, tree)
        else:
            assert choice.finish_reason == "length" and r.usage.completion_tokens == max_tokens
            assert choice.message.content.startswith('{"name": "'), choice.message.content


# 3. The SDK's parse helper with a pydantic model

class Event(pydantic.BaseModel):
    name: str
    day: Literal["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
    participants: list[str]
    location: Optional[str]


def test_pydantic_parse_returns_the_model(zen_server):
    client = zen_server.client()
    r = client.beta.chat.completions.parse(
        model=zen_server.model, temperature=0, max_tokens=128, response_format=Event,
        messages=[{"role": "system", "content": "Extract the event information."},
                  {"role": "user", "content": "Alice and Bob are going to a science fair on Friday."}])
    message = r.choices[0].message
    assert r.choices[0].finish_reason == "stop"
    assert isinstance(message.parsed, Event)
    assert message.parsed == Event.model_validate_json(message.content)
    assert message.refusal is None


def test_strict_one_of_is_enforced_or_refused(zen_server):
    schema = {"type": "object", "properties": {"value": {"oneOf": [{"type": "integer"}, {"type": "number"}]}},
              "required": ["value"], "additionalProperties": False}
    try:
        r = ask(zen_server, "What is 2 + 2? Answer as JSON.", max_tokens=32, response_format=rf(schema, "sum"))
    except openai.BadRequestError as e:
        assert "oneOf" in e.response.json()["error"]["message"]
        return
    assert r.choices[0].finish_reason == "stop"
    validate(r.choices[0].message.content, schema)


# 4. Unsupported keywords: ignored unless strict

def test_unsupported_keyword_is_ignored_unless_strict(zen_server):
    schema = {"type": "object",
              "properties": {"tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True,
                                      "minItems": 2, "maxItems": 4}},
              "required": ["tags"], "additionalProperties": False}
    prompt = "Give tags for a blog post about cooking pasta, as JSON."
    r = ask(zen_server, prompt, response_format=rf(schema, "tags", strict=False))
    assert r.choices[0].finish_reason == "stop"
    enforced = copy.deepcopy(schema)
    del enforced["properties"]["tags"]["uniqueItems"]
    validate(r.choices[0].message.content, enforced)
    # The same schema strict is refused, naming the schema and the keyword.
    with pytest.raises(openai.BadRequestError) as e:
        ask(zen_server, prompt, response_format=rf(schema, "tags", strict=True))
    err = error_of(e)
    assert err["message"].startswith("Invalid schema for response_format 'tags':"), err
    assert "uniqueItems" in err["message"] and err["param"] == "response_format"
    assert e.value.body["param"] == "response_format"
    # Other keywords strict cannot enforce.
    for keyword, value in [("patternProperties", {"^x": {"type": "string"}}), ("minProperties", 1),
                           ("not", {"type": "null"})]:
        with pytest.raises(openai.BadRequestError) as e:
            ask(zen_server, prompt, max_tokens=4,
                response_format=rf({"type": "object", keyword: value}, "strict_" + keyword))
        err = error_of(e)
        assert err["message"].startswith(f"Invalid schema for response_format 'strict_{keyword}':"), err
        assert keyword in err["message"] and err["param"] == "response_format"


def test_invalid_response_format_is_refused_by_parameter(zen_server):
    cases = [({"type": "json_schema"}, "response_format.json_schema"),
             ({"type": "json_schema", "json_schema": {"name": "x"}}, "response_format.json_schema.schema"),
             ({"type": "yaml"}, "response_format.type"),
             (rf({"type": 5}, "bad_type"), "response_format"),
             (rf({"$ref": "https://example.com/schema.json"}, "remote"), "response_format")]
    for response_format, param in cases:
        with pytest.raises(openai.BadRequestError) as e:
            ask(zen_server, "hi", max_tokens=4, response_format=response_format)
        assert error_of(e)["param"] == param, (response_format, error_of(e))
    # "text" is no constraint at all.
    r = ask(zen_server, "Say hi.", max_tokens=4, response_format={"type": "text"})
    assert r.choices[0].message.content


# 5. vLLM's and llama.cpp's request fields

SMALL_OBJECT = {"type": "object", "properties": {"city": {"type": "string"}, "population": {"type": "integer", "minimum": 0}},
                "required": ["city", "population"], "additionalProperties": False}
DATE = r"\d{4}-\d{2}-\d{2}"
ANSWER_GBNF = 'root ::= answer " " number\nanswer ::= "yes" | "no"\nnumber ::= [1-9] [0-9]?\n'
ANSWER_RE = r"(yes|no) [1-9][0-9]?"
COLORS = ["red", "green", "blue"]


def json_check(text):
    validate(text, SMALL_OBJECT)
    return True


@pytest.mark.parametrize("extra,prompt,check", [
    ({"guided_json": SMALL_OBJECT}, "The largest city in Norway and its population, as JSON.", json_check),
    ({"guided_json": json.dumps(SMALL_OBJECT)}, "The largest city in Norway and its population, as JSON.", json_check),
    ({"structured_outputs": {"json": SMALL_OBJECT}}, "The largest city in Norway and its population, as JSON.", json_check),
    ({"json_schema": SMALL_OBJECT}, "The largest city in Norway and its population, as JSON.", json_check),
    ({"guided_regex": DATE}, "When did the Apollo 11 landing happen?", lambda t: re.fullmatch(DATE, t)),
    ({"structured_outputs": {"regex": DATE}}, "When did the Apollo 11 landing happen?", lambda t: re.fullmatch(DATE, t)),
    ({"guided_choice": COLORS}, "What color is the sky on a clear day?", lambda t: t in COLORS),
    ({"structured_outputs": {"choice": COLORS}}, "What color is grass?", lambda t: t in COLORS),
    ({"guided_grammar": ANSWER_GBNF}, "Is Paris in France? Answer and rate your confidence from 1 to 99.",
     lambda t: re.fullmatch(ANSWER_RE, t)),
    ({"structured_outputs": {"grammar": ANSWER_GBNF}}, "Is Paris in Spain? Answer and rate your confidence.",
     lambda t: re.fullmatch(ANSWER_RE, t)),
    ({"grammar": ANSWER_GBNF}, "Is water wet? Answer and rate your confidence from 1 to 99.",
     lambda t: re.fullmatch(ANSWER_RE, t)),
    ({"structured_outputs": {"json_object": True}}, "Describe a cat as a JSON object.",
     lambda t: isinstance(json.loads(t), dict)),
], ids=["guided_json", "guided_json_text", "so_json", "json_schema", "guided_regex", "so_regex", "guided_choice",
        "so_choice", "guided_grammar", "so_grammar", "grammar", "so_json_object"])
def test_extra_body_constraints(zen_server, extra, prompt, check):
    r = ask(zen_server, prompt, max_tokens=64, extra_body=extra)
    choice = r.choices[0]
    assert choice.finish_reason == "stop", choice
    assert check(choice.message.content), choice.message.content


def test_constrained_requests_decoded_together(zen_server):
    """Each sequence of a batch follows its own grammar: greedy answers decoded together equal
    the ones decoded alone."""
    jobs = [(SCHEMAS[0][2], {"response_format": rf(SCHEMAS[0][1], "person")}),
            (SCHEMAS[3][2], {"response_format": rf(SCHEMAS[3][1], "review")}),
            ("The largest city in Norway and its population, as JSON.", {"extra_body": {"guided_json": SMALL_OBJECT}}),
            ("When did the Apollo 11 landing happen?", {"extra_body": {"guided_regex": DATE}}),
            ("What color is the sky on a clear day?", {"extra_body": {"guided_choice": COLORS}}),
            ("Is Paris in France? Answer and rate your confidence.", {"extra_body": {"guided_grammar": ANSWER_GBNF}}),
            ("Write a haiku about autumn.", {})]

    def run(job):
        r = ask(zen_server, job[0], max_tokens=96, **job[1])
        return r.choices[0].message.content, r.choices[0].finish_reason

    alone = [run(job) for job in jobs]
    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
        together = list(pool.map(run, jobs))
    assert together == alone
    validate(together[0][0], SCHEMAS[0][1])
    validate(together[1][0], SCHEMAS[3][1])
    json_check(together[2][0])
    assert re.fullmatch(DATE, together[3][0]) and together[4][0] in COLORS and re.fullmatch(ANSWER_RE, together[5][0])


def test_completions_endpoint_is_constrained_too(zen_server):
    client = zen_server.client()
    r = client.completions.create(model=zen_server.model, prompt="The first moon landing was on", max_tokens=24,
                                  temperature=0, extra_body={"guided_regex": " " + DATE})
    assert r.choices[0].finish_reason == "stop" and re.fullmatch(" " + DATE, r.choices[0].text), r.choices[0]
    r = client.completions.create(model=zen_server.model, prompt="Q: Is the sun a star?\nA:", max_tokens=8,
                                  temperature=0, extra_body={"guided_choice": [" yes", " no"]})
    assert r.choices[0].text in (" yes", " no")


def test_two_constraints_are_refused_naming_the_second(zen_server):
    # The server reads them in this order; the later one is the one named.
    order = [("response_format", {"type": "json_object"}), ("structured_outputs", {"regex": "a+"}),
             ("guided_json", SMALL_OBJECT), ("guided_regex", "a+"), ("guided_choice", ["a"]),
             ("guided_grammar", 'root ::= "a"'), ("grammar", 'root ::= "a"'), ("json_schema", SMALL_OBJECT)]
    for i, (first, first_value) in enumerate(order):
        for second, second_value in order[i + 1:]:
            body = {"model": zen_server.model, "messages": [{"role": "user", "content": "x"}], "max_tokens": 4,
                    first: first_value, second: second_value}
            status, r = zen_server.raw("POST", "/v1/chat/completions", body)
            assert status == 400, (first, second, r)
            assert r["error"]["param"] == second and first in r["error"]["message"], (first, second, r)
    # Two inside structured_outputs.
    with pytest.raises(openai.BadRequestError) as e:
        ask(zen_server, "x", max_tokens=4, extra_body={"structured_outputs": {"json": SMALL_OBJECT, "regex": "a+"}})
    assert error_of(e)["param"] == "structured_outputs"


def test_bad_constraints_are_refused_by_name(zen_server):
    cases = [({"guided_regex": "(unclosed"}, "guided_regex"),
             ({"guided_grammar": "root ::= undefined_rule"}, "guided_grammar"),
             ({"grammar": "this is not gbnf"}, "grammar"),
             ({"guided_choice": []}, "guided_choice"),
             ({"guided_choice": ["a", 1]}, "guided_choice"),
             ({"guided_json": "not json"}, "guided_json"),
             ({"structured_outputs": {"structural_tag": {}}}, "structured_outputs.structural_tag"),
             ({"guided_whitespace_pattern": " *"}, "guided_whitespace_pattern")]
    for extra, param in cases:
        with pytest.raises(openai.BadRequestError) as e:
            ask(zen_server, "x", max_tokens=4, extra_body=extra)
        assert error_of(e)["param"] == param, (extra, error_of(e))


# 6. Tools

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Get the current time in a time zone",
    "parameters": {"type": "object", "properties": {"timezone": {"type": "string"}},
                   "required": ["timezone"], "additionalProperties": False}}}
TOOLS = [WEATHER, TIME]
PARAMETERS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


def check_calls_json(calls):
    """(name, arguments) pairs."""
    assert calls
    for name, arguments in calls:
        assert name in PARAMETERS
        validate(arguments, PARAMETERS[name])


def check_calls(calls):
    assert calls
    for call in calls:
        assert call.type == "function" and call.id
        assert call.function.name in PARAMETERS
        validate(call.function.arguments, PARAMETERS[call.function.name])


def test_tool_choice_required_makes_valid_calls(zen_server):
    r = ask(zen_server, "What's the weather like in Paris right now?", tools=TOOLS, tool_choice="required")
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    check_calls(choice.message.tool_calls)
    assert not choice.message.content


def test_tool_choice_named_calls_that_function(zen_server):
    # The question is about the weather; the named tool wins anyway.
    r = ask(zen_server, "What's the weather like in Paris right now?", tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "get_time"}})
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert [c.function.name for c in choice.message.tool_calls] == ["get_time"]
    check_calls(choice.message.tool_calls)


def test_strict_tool_with_unsupported_keyword_is_refused(zen_server):
    params = {"type": "object", "patternProperties": {"^x_": {"type": "string"}}}
    strict = {"type": "function", "function": {"name": "lookup", "strict": True, "parameters": params}}
    for tool_choice in ("required", "auto"):
        with pytest.raises(openai.BadRequestError) as e:
            ask(zen_server, "Look something up.", max_tokens=8, tools=[strict], tool_choice=tool_choice)
        err = error_of(e)
        assert err["param"].startswith("tools[0].function.parameters"), err
        assert "patternProperties" in err["message"] and "lookup" in err["message"], err
    # Without strict the keyword is ignored and the call is made.
    lenient = {"type": "function", "function": {"name": "lookup", "parameters": params}}
    r = ask(zen_server, "Look something up.", max_tokens=48, tools=[lenient], tool_choice="required")
    assert r.choices[0].finish_reason == "tool_calls"
    assert [c.function.name for c in r.choices[0].message.tool_calls] == ["lookup"]
    assert isinstance(json.loads(r.choices[0].message.tool_calls[0].function.arguments), dict)


def test_streamed_required_tool_call_reassembles(zen_server):
    stream = ask(zen_server, "What's the weather like in Tokyo, in celsius?", tools=TOOLS, tool_choice="required",
                 stream=True)
    calls, finish, content = {}, None, ""
    for chunk in stream:
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            content += choice.delta.content or ""
            for d in choice.delta.tool_calls or []:
                call = calls.setdefault(d.index, {"id": None, "name": "", "arguments": ""})
                if d.id:
                    assert call["id"] is None, "a call's id comes once"
                    call["id"] = d.id
                if d.function and d.function.name:
                    call["name"] += d.function.name
                if d.function and d.function.arguments:
                    call["arguments"] += d.function.arguments
    assert finish == "tool_calls" and not content.strip()
    assert calls and sorted(calls) == list(range(len(calls)))
    for call in calls.values():
        assert call["id"] and call["name"] in PARAMETERS
        validate(call["arguments"], PARAMETERS[call["name"]])


def test_forced_call_cut_by_max_tokens_adds_nothing(zen_server):
    for tool_choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        r = ask(zen_server, "What's the weather like in Paris right now?", max_tokens=5, tools=TOOLS,
                tool_choice=tool_choice, logprobs=True)
        choice = r.choices[0]
        assert choice.finish_reason == "length"
        generated = "".join(t.token for t in choice.logprobs.content)
        assert "</tool_call>" not in generated  # cut long before the call closes
        assert "</tool_call>" not in (choice.message.content or ""), (generated, choice.message.content)


# 7. Streaming

def test_streamed_json_schema_validates_and_equals_non_streamed(zen_server):
    schema = SCHEMAS[0][1]
    prompt = SCHEMAS[0][2]
    content, _, finish = stream_text(ask(zen_server, prompt, max_tokens=160, response_format=rf(schema, "person"),
                                         stream=True))
    assert finish == "stop"
    validate(content, schema)
    whole = ask(zen_server, prompt, max_tokens=160, response_format=rf(schema, "person"))
    assert whole.choices[0].message.content == content


# 8. Reasoning before the constrained answer

ARITHMETIC = {"type": "object",
              "properties": {"answer": {"type": "integer"}, "explanation": {"type": "string", "maxLength": 80}},
              "required": ["answer", "explanation"], "additionalProperties": False}


@pytest.fixture(scope="module")
def reasoning_server():
    need(DEFAULT_MODEL, "the default model")
    server = ZenServer("--reasoning-parser", "qwen3")
    yield server
    server.stop()


@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 1, "seed": 2}], ids=["greedy", "seed2"])
def test_reasoning_then_schema(reasoning_server, sampling):
    """The default model's template does not open <think>: the model may think or not, and the
    content after the reasoning validates either way."""
    prompt = "What is 17 + 25? Think first."
    r = ask(reasoning_server, prompt, max_tokens=128, response_format=rf(ARITHMETIC, "sum"), **sampling)
    message = r.choices[0].message
    reasoning = getattr(message, "reasoning_content", None)
    assert reasoning is None or isinstance(reasoning, str)
    assert "<think>" not in message.content and "</think>" not in message.content
    if sampling["temperature"] == 0:
        assert r.choices[0].finish_reason == "stop"
    if r.choices[0].finish_reason == "stop":
        validate(message.content, ARITHMETIC)
    content, streamed_reasoning, finish = stream_text(
        ask(reasoning_server, prompt, max_tokens=128, response_format=rf(ARITHMETIC, "sum"), stream=True, **sampling))
    assert content == message.content and streamed_reasoning == (reasoning or "") and finish == r.choices[0].finish_reason


# 9. Several choices

def test_n_choices_each_validate(zen_server):
    schema = SCHEMAS[1][1]
    prompt = "List some colors of the rainbow as JSON."
    r = ask(zen_server, prompt, max_tokens=64, n=3, temperature=1, seed=11, response_format=rf(schema, "colors"))
    assert [c.index for c in r.choices] == [0, 1, 2]
    for choice in r.choices:
        assert choice.finish_reason == "stop", choice
        validate(choice.message.content, schema)
    _, tokens = zen_server.raw("POST", "/tokenize", {"messages": [{"role": "user", "content": prompt}]})
    assert r.usage.prompt_tokens == tokens["count"]  # the prompt counts once
    assert r.usage.completion_tokens >= 3 * 6  # each choice is at least {"colors": ["a", "b"]}
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    # Streamed: each index's deltas concatenate to a valid answer, and the usage is the same.
    stream = ask(zen_server, prompt, max_tokens=64, n=3, temperature=1, seed=11, response_format=rf(schema, "colors"),
                 stream=True, stream_options={"include_usage": True})
    texts, finishes, usage = {}, {}, None
    for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
            finishes[choice.index] = choice.finish_reason or finishes.get(choice.index)
    assert sorted(texts) == [0, 1, 2] and set(finishes.values()) == {"stop"}
    for i in range(3):
        validate(texts[i], schema)
        assert texts[i] == r.choices[i].message.content  # same seeds, same samples
    assert usage.prompt_tokens == r.usage.prompt_tokens and usage.completion_tokens == r.usage.completion_tokens


def test_n_choices_prefill_the_prompt_once(zen_server):
    # A prompt no earlier request sent: only the sibling choices can have cached it.
    prompt = f"Request {uuid.uuid4()}: " + "List some colors of the rainbow as JSON, with their hex codes. " * 4
    r = ask(zen_server, prompt, max_tokens=8, n=3, temperature=1, seed=5)
    _, tokens = zen_server.raw("POST", "/tokenize", {"messages": [{"role": "user", "content": prompt}]})
    assert r.usage.prompt_tokens == tokens["count"] > 64
    # The first choice prefills; the others wait for its full blocks and take them from the cache.
    assert r.usage.prompt_tokens_details.cached_tokens >= r.usage.prompt_tokens - 32


# 10. Hostile schemas

def nested_schema_body(model, depth):
    """A request whose schema nests {"type": "object", "properties": {"a": ...}} `depth` times,
    written as text (json.dumps would recurse too deep)."""
    schema = '{"type": "string"}'
    for _ in range(depth):
        schema = '{"type": "object", "properties": {"a": ' + schema + "}}"
    return ('{"model": "' + model + '", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}], '
            '"response_format": {"type": "json_schema", "json_schema": {"name": "deep", "schema": ' + schema + "}}}")


HOSTILE = [
    ("deep_nesting", None, (400,)),
    ("huge_enum", {"response_format": rf({"enum": [f"value-{i}" for i in range(100000)]}, "huge_enum", strict=False)},
     (200, 400)),
    ("self_ref", {"response_format": rf({"$ref": "#"}, "self_ref", strict=False)}, (400,)),
    ("ref_cycle", {"response_format": rf({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                                          "$ref": "#/$defs/a"}, "ref_cycle", strict=False)}, (400,)),
    ("huge_repeat", {"guided_regex": "a{1000000}"}, (400,)),
    ("huge_repeat_in_pattern", {"response_format": rf({"type": "string", "pattern": "^a{1000000}$"}, "pat")}, (400,)),
    ("nested_repeats", {"guided_regex": "(a{1000}){1000}"}, (200, 400)),
    ("dfa_blowup", {"guided_regex": "(a|b)*a(a|b){25}"}, (200, 400)),
    ("deep_groups", {"guided_regex": "(" * 50000 + "a" + ")" * 50000}, (400,)),
    ("deep_gbnf", {"guided_grammar": "root ::= " + "(" * 50000 + '"a"' + ")" * 50000}, (400,)),
    ("left_recursion", {"guided_grammar": "root ::= root \"a\" | \"a\""}, (200, 400)),
    ("empty_loop", {"guided_grammar": "root ::= a\na ::= b\nb ::= a"}, (400,)),
    ("huge_min_items", {"response_format": rf({"type": "array", "items": {"type": "integer"}, "minItems": 1000000},
                                              "min_items", strict=False)}, (400,)),
    ("long_strings", {"response_format": rf({"type": "string", "minLength": 5000, "maxLength": 9000}, "long")},
     (200, 400)),
]


@pytest.mark.parametrize("name,body,statuses", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_constraints_are_answered_quickly(zen_server, name, body, statuses):
    if body is None:
        text = nested_schema_body(zen_server.model, 500)
    else:
        text = json.dumps({"model": zen_server.model, "max_tokens": 4,
                           "messages": [{"role": "user", "content": "x"}], **body})
    start = time.monotonic()
    status, r = zen_server.raw("POST", "/v1/chat/completions", text, timeout=60)
    elapsed = time.monotonic() - start
    assert status in statuses, (status, r)
    assert elapsed < 10, f"{name} took {elapsed:.1f} s"
    if status == 400:
        assert r["error"]["type"] == "invalid_request_error" and r["error"]["message"]
    # The server still answers.
    ok = ask(zen_server, "Say hello.", max_tokens=4)
    assert ok.choices[0].message.content


def test_hostile_compile_does_not_stall_other_requests(zen_server):
    """Schemas that compile for seconds (up to the time bound) do not hold up a request already
    streaming: its tokens keep coming while they compile."""
    slow = {"model": zen_server.model, "max_tokens": 4, "messages": [{"role": "user", "content": "x"}],
            "response_format": rf({"enum": [f"value-{i}" for i in range(100000)]}, "huge_enum", strict=False)}
    stream = ask(zen_server, "Count from 1 to 60, comma separated.", max_tokens=100, stream=True)
    chunks = iter(stream)
    next(chunks)
    next(chunks)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        start = time.monotonic()
        futures = [pool.submit(zen_server.raw, "POST", "/v1/chat/completions", slow, None, 60) for _ in range(2)]
        last, gaps, text = start, [], ""
        for chunk in chunks:
            now = time.monotonic()
            gaps.append(now - last)
            last = now
            text += "".join(c.delta.content or "" for c in chunk.choices)
        statuses = [f.result()[0] for f in futures]
        compiled = time.monotonic() - start
    assert text and all(status in (200, 400) for status in statuses)
    assert max(gaps) < 1.5, f"the stream stalled {max(gaps):.2f} s while schemas compiled ({compiled:.2f} s)"


# 11. Speculative decoding under a grammar

SPEC_SCHEMA = {"type": "object",
               "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 40},
                              "city": {"enum": ["Bergen", "Oslo", "Paris"]},
                              "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2}},
               "required": ["name", "age", "city", "tags"], "additionalProperties": False}
# The model copies the record, so drafts from the prompt are mostly right, except where the
# schema forbids what the record says (age 41, a third tag): the drafts are cut there.
SPEC_PROMPT = ('Here is a JSON record:\n{"name": "Ann Lee", "age": 41, "city": "Oslo", "tags": ["admin", "ops", "dev"]}\n'
               "Repeat the record as JSON.")




def spec_requests(server, tools=True):
    """(content, tool calls, finish_reason, completion tokens) and the accepted draft tokens of a
    schema-constrained copy, a forced tool call (unless not tools: its long prompt is slow on the
    1.5B model), and a regex that ends before the prompt's list."""
    results, accepted = [], 0
    jobs = [(SPEC_PROMPT, {"response_format": rf(SPEC_SCHEMA, "record")}),
            ("What's the weather like in Rome?",
             {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}),
            ("Count: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10. Again:", {"extra_body": {"guided_regex": r"(\d+, ){5}\d+"}})]
    for prompt, kw in jobs if tools else jobs[::2]:
        r = ask(server, prompt, max_tokens=96, **kw)
        m = r.choices[0].message
        calls = [(c.function.name, c.function.arguments) for c in m.tool_calls or []]
        results.append((m.content, calls, r.choices[0].finish_reason, r.usage.completion_tokens))
        details = r.usage.completion_tokens_details
        accepted += details.accepted_prediction_tokens if details else 0
    return results, accepted


@pytest.fixture(scope="module")
def coder_1_5b_server():
    need(CODER_1_5B, "the 1.5B coder model (draft-model target)")
    server = ZenServer(model=CODER_1_5B)
    yield server
    server.stop()


@pytest.mark.parametrize("config", [
    {"method": "ngram", "num_speculative_tokens": 8, "adaptive": False},
    {"method": "suffix", "num_speculative_tokens": 8, "adaptive": False},
    {"method": "draft_model", "model": str(DEFAULT_MODEL), "num_speculative_tokens": 4, "adaptive": False},
], ids=["ngram", "suffix", "draft_model"])
def test_speculation_under_a_grammar_equals_plain(request, zen_server, config):
    # SmolLM2's vocabulary differs from Qwen2.5's (the server refuses it as a draft); the
    # default 0.5B model drafts for the 1.5B coder, which shares its vocabulary.
    need(DEFAULT_MODEL, "the default model")
    if config["method"] == "draft_model":
        plain = request.getfixturevalue("coder_1_5b_server")
        model = CODER_1_5B
    else:
        plain, model = zen_server, DEFAULT_MODEL
    server = ZenServer("--speculative-config", json.dumps(config), model=model)
    try:
        assert f"Speculative decoding: {config['method']}" in "".join(server.output)
        tools = config["method"] != "draft_model"
        want, _ = spec_requests(plain, tools)
        got, accepted = spec_requests(server, tools)
        assert got == want
        assert [g[2] for g in got] == (["stop", "tool_calls", "stop"] if tools else ["stop", "stop"]), got
        validate(got[0][0], SPEC_SCHEMA)
        if tools:
            check_calls_json(got[1][1])
        assert re.fullmatch(r"(\d+, ){5}\d+", got[-1][0])
        assert accepted > 0  # drafts were made and some were accepted under the grammars
    finally:
        server.stop()
