"""`zen serve` through the official openai client: chat and completions, streaming, usage,
stop strings, logprobs, tools, thinking plumbing, and every error status."""
import json
import socket
import threading
import time

import openai
import pytest

from conftest import zen
from zen_server import ZenServer

USER = [{"role": "user", "content": "Write a Python function that adds two numbers."}]
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}},
                   "required": ["city"]}}}


def greedy(**kw):
    kw.setdefault("temperature", 0)
    return kw


def collect_stream(stream):
    """(text, finish_reason, usage, chunks) of a streamed chat completion."""
    text, finish, usage, chunks = "", None, None, []
    for chunk in stream:
        chunks.append(chunk)
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    return text, finish, usage, chunks


def test_serve_flags_are_checked_before_loading():
    r = zen("serve", "--tool-call-parser", "xml")
    assert r.returncode == 1 and "--tool-call-parser must be one of {qwen3_xml, hermes, none}" in r.stderr
    r = zen("serve", "--kv-memory", "lots")
    assert r.returncode == 1 and "--kv-memory expects a size" in r.stderr
    r = zen("serve", "--state-snapshot-memory", "-1G")
    assert r.returncode == 1 and "--state-snapshot-memory expects a size" in r.stderr
    r = zen("serve", "--port", "70000")
    assert r.returncode == 1 and "--port must be in [0, 65535]" in r.stderr
    r = zen("serve", "--max-model-len", "10", "--context-window", "10")
    assert r.returncode == 1 and "not both" in r.stderr
    assert "--served-model-name" in zen("serve", "--help").stdout


def test_models_health_and_chat_page(zen_server):
    models = zen_server.client().models.list()
    assert [m.id for m in models.data] == [zen_server.model]
    assert zen_server.raw("GET", "/health") == (200, {"status": "ok"})
    status, page = zen_server.raw("GET", "/")
    assert status == 200 and "<html" in page and "http" not in page.split("<script")[0].lower().replace("http-equiv", "")


def test_chat_non_stream_usage_matches_tokenizer(zen_server):
    client = zen_server.client()
    r = client.chat.completions.create(model=zen_server.model, messages=USER, max_tokens=24, **greedy(), logprobs=True)
    choice = r.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    _, tok = zen_server.raw("POST", "/tokenize", {"messages": USER})
    assert r.usage.prompt_tokens == tok["count"]
    # Every generated token has a logprob entry (the end-of-turn token too).
    assert r.usage.completion_tokens == len(choice.logprobs.content)
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    # The same prompt again is served from the prefix cache (whole blocks of 16).
    again = client.chat.completions.create(model=zen_server.model, messages=USER, max_tokens=4, **greedy())
    assert again.usage.prompt_tokens_details.cached_tokens >= 16


def test_chat_stream_equals_non_stream(zen_server):
    client = zen_server.client()
    full = client.chat.completions.create(messages=USER, model=zen_server.model, max_tokens=20, **greedy())
    stream = client.chat.completions.create(messages=USER, model=zen_server.model, max_tokens=20, stream=True,
                                            stream_options={"include_usage": True}, **greedy())
    text, finish, usage, chunks = collect_stream(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert text == full.choices[0].message.content
    assert finish == full.choices[0].finish_reason
    assert chunks[-1].choices == [] and usage.completion_tokens == full.usage.completion_tokens
    assert usage.prompt_tokens == full.usage.prompt_tokens


def test_completions_text_ids_stream_and_echo(zen_server):
    client = zen_server.client()
    prompt = "def fibonacci(n):"
    r = client.completions.create(model=zen_server.model, prompt=prompt, max_tokens=12, **greedy())
    assert r.object == "text_completion" and r.choices[0].text and r.usage.completion_tokens == 12
    assert r.choices[0].finish_reason == "length"
    _, tok = zen_server.raw("POST", "/tokenize", {"prompt": prompt})
    assert r.usage.prompt_tokens == tok["count"]
    by_ids = client.completions.create(model=zen_server.model, prompt=tok["tokens"], max_tokens=12, **greedy())
    assert by_ids.choices[0].text == r.choices[0].text
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=zen_server.model, prompt=prompt, max_tokens=12, stream=True, **greedy()) if c.choices)
    assert streamed == r.choices[0].text
    echo = client.completions.create(model=zen_server.model, prompt=prompt, max_tokens=12, echo=True, **greedy())
    assert echo.choices[0].text == prompt + r.choices[0].text
    _, detok = zen_server.raw("POST", "/detokenize", {"tokens": tok["tokens"]})
    assert detok["prompt"] == prompt


def test_stop_strings_cut_and_never_appear(zen_server):
    client = zen_server.client()
    base = client.completions.create(model=zen_server.model, prompt="def fibonacci(n):", max_tokens=40, **greedy())
    text = base.choices[0].text
    assert len(text) > 30
    stop = text[20:24]  # a stop string that (probably) spans tokens
    expected = text[:text.index(stop)]
    for stream in (False, True):
        kw = dict(model=zen_server.model, prompt="def fibonacci(n):", max_tokens=40, stop=[stop, "\x00never"], **greedy())
        if stream:
            got, finish = "", None
            for c in client.completions.create(stream=True, **kw):
                got += c.choices[0].text
                finish = c.choices[0].finish_reason or finish
        else:
            r = client.completions.create(**kw)
            got, finish = r.choices[0].text, r.choices[0].finish_reason
            assert r.usage.completion_tokens < 40
        assert got == expected and finish == "stop", (stream, stop, got)
    # Chat too, and several stops: the first to appear wins.
    full = client.chat.completions.create(model=zen_server.model, messages=USER, max_tokens=30, **greedy())
    content = full.choices[0].message.content
    stops = [content[15:18], content[8:11]]
    r = client.chat.completions.create(model=zen_server.model, messages=USER, max_tokens=30, stop=stops, **greedy())
    assert r.choices[0].message.content == content[:min(content.index(s) for s in stops)]


def test_max_tokens_and_max_completion_tokens(zen_server):
    client = zen_server.client()
    for key in ("max_tokens", "max_completion_tokens"):
        r = client.chat.completions.create(model=zen_server.model, messages=USER, **{key: 3}, **greedy())
        assert r.usage.completion_tokens == 3 and r.choices[0].finish_reason == "length"


def test_logprobs_are_consistent(zen_server):
    client = zen_server.client()
    r = client.chat.completions.create(model=zen_server.model, messages=USER, max_tokens=6, logprobs=True,
                                       top_logprobs=3, **greedy())
    entries = r.choices[0].logprobs.content
    assert len(entries) == 6
    for e in entries:
        assert e.logprob <= 0 and len(e.top_logprobs) == 3
        tops = [t.logprob for t in e.top_logprobs]
        assert tops == sorted(tops, reverse=True)
        assert e.top_logprobs[0].token == e.token and abs(e.top_logprobs[0].logprob - e.logprob) < 1e-5  # greedy
        assert bytes(e.bytes) == e.token.encode("utf-8")
    c = client.completions.create(model=zen_server.model, prompt="Hello", max_tokens=4, logprobs=2, **greedy())
    lp = c.choices[0].logprobs
    assert len(lp.tokens) == 4 and all(len(t) == 2 for t in lp.top_logprobs)
    assert "".join(lp.tokens) == c.choices[0].text


def test_sampling_parameters_and_seed(zen_server):
    client = zen_server.client()
    kw = dict(model=zen_server.model, messages=USER, max_tokens=12, temperature=0.9, top_p=0.95, seed=1234,
              presence_penalty=0.5, frequency_penalty=0.2, extra_body={"top_k": 40, "min_p": 0.05})
    a = client.chat.completions.create(**kw).choices[0].message.content
    b = client.chat.completions.create(**kw).choices[0].message.content
    assert a == b


def test_tool_round_trip_hermes(zen_server):
    client = zen_server.client()
    messages = [{"role": "user", "content": "What is the weather like in Paris today?"}]
    r = client.chat.completions.create(model=zen_server.model, messages=messages, tools=[WEATHER_TOOL],
                                       max_tokens=60, **greedy())
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather" and call.id
    args = json.loads(call.function.arguments)
    assert "city" in args
    # Streaming gives the same call, assembled from deltas.
    name, arguments, finish = None, "", None
    for chunk in client.chat.completions.create(model=zen_server.model, messages=messages, tools=[WEATHER_TOOL],
                                                max_tokens=60, stream=True, **greedy()):
        for c in chunk.choices:
            finish = c.finish_reason or finish
            for tc in c.delta.tool_calls or []:
                name = tc.function.name or name
                arguments += tc.function.arguments or ""
    assert (name, json.loads(arguments), finish) == ("get_weather", args, "tool_calls")
    # The tool's result goes back through the chat template; the model answers with it.
    messages += [{"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                 {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature_c": 21, "sky": "sunny"})}]
    _, tok = zen_server.raw("POST", "/tokenize", {"messages": messages, "tools": [WEATHER_TOOL]})
    final = client.chat.completions.create(model=zen_server.model, messages=messages, tools=[WEATHER_TOOL],
                                           max_tokens=40, **greedy())
    assert final.usage.prompt_tokens == tok["count"]
    assert final.choices[0].message.content and final.choices[0].finish_reason in ("stop", "length")
    assert "21" in final.choices[0].message.content


def test_tool_choice_named_required_and_none(zen_server):
    client = zen_server.client()
    messages = [{"role": "user", "content": "I am going to Berlin tomorrow."}]
    named = client.chat.completions.create(model=zen_server.model, messages=messages, tools=[WEATHER_TOOL],
                                           tool_choice={"type": "function", "function": {"name": "get_weather"}},
                                           max_tokens=40, **greedy())
    call = named.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather" and isinstance(json.loads(call.function.arguments), dict)
    none = client.chat.completions.create(model=zen_server.model, messages=messages, tools=[WEATHER_TOOL],
                                          tool_choice="none", max_tokens=20, **greedy())
    assert not none.choices[0].message.tool_calls and none.choices[0].message.content
    required = client.chat.completions.create(model=zen_server.model, messages=USER, tools=[WEATHER_TOOL],
                                              tool_choice="required", max_tokens=40, **greedy())
    assert required.choices[0].finish_reason in ("tool_calls", "stop", "length")


def test_thinking_switch_reaches_the_template(zen_server):
    # The default model has no thinking: the switch is accepted and the template ignores it.
    client = zen_server.client()
    for enable in (True, False):
        r = client.chat.completions.create(model=zen_server.model, messages=USER, max_tokens=4,
                                           extra_body={"chat_template_kwargs": {"enable_thinking": enable}}, **greedy())
        assert r.choices[0].message.content
        assert getattr(r.choices[0].message, "reasoning_content", None) is None


def reasoning_and_content(client, stream, **kw):
    if not stream:
        m = client.chat.completions.create(**kw).choices[0].message
        return getattr(m, "reasoning_content", None) or "", m.content or ""
    reasoning, content = "", ""
    for chunk in client.chat.completions.create(stream=True, **kw):
        for c in chunk.choices:
            reasoning += getattr(c.delta, "reasoning_content", None) or ""
            content += c.delta.content or ""
    return reasoning, content


def test_reasoning_parser_splits_think_blocks():
    # The default model does not think, so the test opens the block itself: the assistant
    # turn is continued from "<think>\n..." (continue_final_message), and with
    # --reasoning-parser qwen3 what follows is reasoning until "</think>".
    server = ZenServer("--reasoning-parser", "qwen3")
    try:
        client = server.client()
        question = {"role": "user", "content": "What is 17 * 23? Think step by step."}
        kw = dict(model=server.model, max_tokens=16, **greedy(),
                  messages=[question, {"role": "assistant", "content": "<think>\nFirst,"}],
                  extra_body={"continue_final_message": True, "add_generation_prompt": False,
                              "chat_template_kwargs": {"enable_thinking": True}})
        reasoning, content = reasoning_and_content(client, False, **kw)
        assert reasoning and "</think>" not in reasoning and "<think>" not in reasoning
        assert (reasoning, content) == reasoning_and_content(client, True, **kw)
        # A closed block: the answer after it is content, the block is reasoning.
        kw["messages"] = [question, {"role": "assistant", "content": "<think>\n17 * 23 = 391\n</think>\n\nThe answer"}]
        reasoning, content = reasoning_and_content(client, False, **kw)
        assert reasoning == "" and content  # the prompt closed the block: all content
        # enable_thinking off, no block: all content, nothing in reasoning.
        off = dict(model=server.model, max_tokens=8, **greedy(), messages=[question],
                   extra_body={"chat_template_kwargs": {"enable_thinking": False}})
        assert reasoning_and_content(client, False, **off)[0] == ""
    finally:
        server.stop()


def test_tool_round_trip_qwen3_xml():
    # The default model's template teaches hermes; a few-shot turn in the xml format and
    # tool_choice "required" make it write qwen3_xml, which --tool-call-parser qwen3_xml parses.
    server = ZenServer("--tool-call-parser", "qwen3_xml")
    try:
        client = server.client()
        messages = [
            {"role": "system", "content": "You call tools by writing exactly this format:\n<tool_call>\n<function=NAME>\n"
                                          "<parameter=ARGUMENT>\nVALUE\n</parameter>\n</function>\n</tool_call>"},
            {"role": "user", "content": "What is the weather like in London?"},
            {"role": "assistant", "content": "<tool_call>\n<function=get_weather>\n<parameter=city>\nLondon\n"
                                             "</parameter>\n</function>\n</tool_call>"},
            {"role": "tool", "content": "{\"temperature_c\": 12}"},
            {"role": "assistant", "content": "It is 12 degrees Celsius in London."},
            {"role": "user", "content": "What is the weather like in Paris?"}]
        kw = dict(model=server.model, messages=messages, tools=[WEATHER_TOOL], tool_choice="required",
                  max_tokens=60, **greedy())
        r = client.chat.completions.create(**kw)
        assert r.choices[0].finish_reason == "tool_calls"
        call = r.choices[0].message.tool_calls[0]
        assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
        name, arguments = None, ""
        for chunk in client.chat.completions.create(stream=True, **kw):
            for c in chunk.choices:
                for tc in c.delta.tool_calls or []:
                    name = tc.function.name or name
                    arguments += tc.function.arguments or ""
        assert name == "get_weather" and json.loads(arguments) == {"city": "Paris"}
        messages += [{"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                     {"role": "tool", "tool_call_id": call.id, "content": "{\"temperature_c\": 19}"}]
        final = client.chat.completions.create(model=server.model, messages=messages, tools=[WEATHER_TOOL],
                                               max_tokens=30, **greedy())
        assert "19" in (final.choices[0].message.content or "")
    finally:
        server.stop()


def error_of(fn):
    with pytest.raises(openai.APIStatusError) as e:
        fn()
    return e.value


def test_errors_name_the_parameter(zen_server):
    client = zen_server.client()
    e = error_of(lambda: client.chat.completions.create(model=zen_server.model, messages=USER, temperature=7))
    assert e.status_code == 400 and e.body["param"] == "temperature" and "temperature" in e.body["message"]
    e = error_of(lambda: client.chat.completions.create(model=zen_server.model, messages=USER, n=17))
    assert e.status_code == 400 and e.body["param"] == "n"
    e = error_of(lambda: client.chat.completions.create(model="no-such-model", messages=USER))
    assert e.status_code == 404 and e.body["param"] == "model"
    status, body = zen_server.raw("POST", "/v1/chat/completions", b'{"messages": [')
    assert status == 400 and "malformed JSON" in body["error"]["message"]
    status, body = zen_server.raw("GET", "/v1/nothing-here")
    assert status == 404 and body["error"]["type"] == "not_found_error"
    status, body = zen_server.raw("POST", "/v1/chat/completions", b"x" * (9 << 20))
    assert status == 413 and "error" in body
    # A prompt beyond the context window: 400 with the numbers.
    long_prompt = "hello " * 5000
    e = error_of(lambda: client.completions.create(model=zen_server.model, prompt=long_prompt, max_tokens=10))
    assert e.status_code == 400 and "4096" in e.body["message"] and "10" in e.body["message"]
    assert zen_server.raw("GET", "/health")[0] == 200


def test_api_key_and_queue_full():
    server = ZenServer("--api-key", "sekret", "--max-num-seqs", "1", "--max-waiting", "1")
    try:
        e = error_of(lambda: server.client(api_key="wrong").models.list())
        assert e.status_code == 401
        status, body = server.raw("GET", "/v1/models")  # no key at all
        assert status == 401 and body["error"]["type"] == "authentication_error"
        client = server.client(api_key="sekret")
        assert client.models.list().data[0].id == server.model
        assert server.raw("GET", "/health")[0] == 200  # health needs no key
        assert server.raw("GET", "/metrics")[0] == 401  # counts and latencies do
        assert server.raw("GET", "/metrics", headers={"Authorization": "Bearer sekret"})[0] == 200
        # One running, one waiting: the next request is refused with 429 while they last. The
        # first must be running (its first token out) before the second arrives, or both wait.
        def long_stream():
            return client.chat.completions.create(model=server.model, messages=USER, max_tokens=400, stream=True,
                                                  extra_body={"ignore_eos": True}, **greedy())
        streams = [long_stream()]
        next(iter(streams[0]))
        streams.append(long_stream())
        statuses = []
        for _ in range(3):
            try:
                client.chat.completions.create(model=server.model, messages=USER, max_tokens=1)
                statuses.append(200)
            except openai.APIStatusError as err:
                statuses.append(err.status_code)
        assert 429 in statuses
        for s in streams:
            s.close()
    finally:
        server.stop()


def test_client_disconnect_aborts_the_request(zen_server):
    client = zen_server.client()
    aborted_before = zen_server.metric('zen_requests_total{outcome="abort"}')
    stream = client.chat.completions.create(model=zen_server.model, messages=USER, max_tokens=2000, stream=True,
                                            extra_body={"ignore_eos": True}, **greedy())
    it = iter(stream)
    for _ in range(4):
        next(it)
    stream.close()
    deadline = time.time() + 20
    while time.time() < deadline:
        if zen_server.metric("zen_num_requests_running") == 0 and \
                zen_server.metric('zen_requests_total{outcome="abort"}') > aborted_before:
            break
        time.sleep(0.1)
    assert zen_server.metric("zen_num_requests_running") == 0
    assert zen_server.metric('zen_requests_total{outcome="abort"}') > aborted_before


def wait_for(condition, seconds=20):
    """Polls condition until it holds or `seconds` pass; returns its last value."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def send_unread_chat(server, stream):
    """A long chat completion on a bare socket that is never read (its close is a vanished
    client). ignore_eos: the request cannot end by itself before the client goes away."""
    body = json.dumps({"model": server.model, "messages": USER, "max_tokens": 2000, "ignore_eos": True,
                       "temperature": 0, "stream": stream}).encode()
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(body) + body)
    return sock


def aborted(server):
    return server.metric('zen_requests_total{outcome="abort"}')


def test_ignore_eos_generates_exactly_max_tokens(zen_server):
    # The model's end-of-turn token (<|im_end|>) is an EOS too: ignore_eos must run past it,
    # or a "long" request may end after a dozen tokens.
    client = zen_server.client()
    messages = [{"role": "user", "content": "Reply with just the word OK."}]
    n = 40
    short = client.chat.completions.create(model=zen_server.model, messages=messages, max_tokens=n, **greedy())
    assert short.choices[0].finish_reason == "stop" and short.usage.completion_tokens < n  # ends early by itself
    full = client.chat.completions.create(model=zen_server.model, messages=messages, max_tokens=n,
                                          extra_body={"ignore_eos": True}, **greedy())
    assert full.choices[0].finish_reason == "length" and full.usage.completion_tokens == n
    _, finish, usage, _ = collect_stream(client.chat.completions.create(
        model=zen_server.model, messages=messages, max_tokens=n, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True}, **greedy()))
    assert finish == "length" and usage.completion_tokens == n


def test_non_streaming_client_disconnect_aborts_too(zen_server):
    # A non-streaming request gets whitespace keep-alives before its JSON body (valid JSON),
    # so a vanished client shows up as a failed write and its request is aborted.
    aborted_before = aborted(zen_server)
    sock = send_unread_chat(zen_server, stream=False)
    assert wait_for(lambda: zen_server.metric("zen_num_requests_running") >= 1)
    time.sleep(1.0)  # keep-alives reach the client's buffer unread
    sock.close()
    assert wait_for(lambda: aborted(zen_server) > aborted_before and zen_server.metric("zen_num_requests_running") == 0)


def test_client_disconnect_while_queued_aborts_the_waiting_request():
    # One sequence at a time: the first request runs, the next two (one streaming, one not)
    # wait in the queue, where only keep-alives can notice that their clients left.
    server = ZenServer("--max-num-seqs", "1")
    try:
        running = send_unread_chat(server, stream=True)
        assert wait_for(lambda: server.metric("zen_num_requests_running") == 1)
        queued = [send_unread_chat(server, stream) for stream in (False, True)]
        assert wait_for(lambda: server.metric("zen_num_requests_waiting") == 2)
        for sock in queued:
            sock.close()
        assert wait_for(lambda: aborted(server) == 2 and server.metric("zen_num_requests_waiting") == 0)
        assert server.metric("zen_num_requests_running") == 1  # the running request goes on
        running.close()
        assert wait_for(lambda: aborted(server) == 3 and server.metric("zen_num_requests_running") == 0)
    finally:
        server.stop()


def test_metrics_exposition(zen_server):
    zen_server.client().chat.completions.create(model=zen_server.model, messages=USER, max_tokens=2, **greedy())
    _, text = zen_server.raw("GET", "/metrics")
    for name in ("zen_requests_total", "zen_prompt_tokens_total", "zen_generation_tokens_total",
                 "zen_time_to_first_token_seconds_bucket", "zen_inter_token_latency_seconds_bucket",
                 "zen_num_requests_running", "zen_num_requests_waiting", "zen_kv_cache_usage_ratio",
                 "zen_prefix_cache_hit_rate"):
        assert name in text, name
    assert zen_server.metric("zen_generation_tokens_total") > 0
    assert zen_server.metric("zen_time_to_first_token_seconds_count") > 0


def test_sentencepiece_prompts_get_one_bos_and_metrics_can_be_opened():
    """stories260K (SentencePiece GGUF): /tokenize and a completion's prompt both start with one
    BOS, as llama.cpp's ids (tools/make_tokenizer_fixtures.py); --open-metrics serves /metrics
    without the key while /v1 still needs it."""
    from conftest import STORIES, ROOT, need
    need(STORIES, "stories260K")
    ref = json.loads((ROOT / "tests/fixtures/tokenizer/stories260k.json").read_text())
    texts = json.loads((ROOT / "tests/fixtures/tokenizer/corpus.json").read_text())["texts"]
    text, ids = texts[1], ref["ids"][1]
    server = ZenServer("--api-key", "k", "--open-metrics", model=STORIES)
    try:
        auth = {"Authorization": "Bearer k"}
        status, body = server.raw("POST", "/tokenize", {"prompt": text}, headers=auth)
        assert status == 200 and body["tokens"] == ids
        client = server.client(api_key="k")
        r = client.completions.create(model=server.model, prompt=text, max_tokens=1)
        assert r.usage.prompt_tokens == len(ids)
        assert server.raw("GET", "/metrics")[0] == 200
        assert server.raw("GET", "/v1/models")[0] == 401
    finally:
        server.stop()


def test_logit_bias_forces_and_bans_tokens(zen_server):
    """OpenAI logit_bias: +100 makes every greedy token the biased one, -100 bans the token
    greedy decoding picks first; ids outside the vocabulary are a 400 naming logit_bias."""
    client = zen_server.client()
    _, tok = zen_server.raw("POST", "/tokenize", {"prompt": " zen", "add_special_tokens": False})
    (zen_id,) = tok["tokens"]
    r = client.completions.create(model=zen_server.model, prompt="The capital of France is", max_tokens=3,
                                  temperature=0, logit_bias={str(zen_id): 100})
    assert r.choices[0].text == " zen" * 3
    plain = client.completions.create(model=zen_server.model, prompt="The capital of France is", max_tokens=1,
                                      temperature=0, logprobs=0)
    first = zen_server.raw("POST", "/tokenize", {"prompt": plain.choices[0].text, "add_special_tokens": False})[1]["tokens"][0]
    banned = client.completions.create(model=zen_server.model, prompt="The capital of France is", max_tokens=1,
                                       temperature=0, logit_bias={str(first): -100})
    assert banned.choices[0].text != plain.choices[0].text
    e = error_of(lambda: client.completions.create(model=zen_server.model, prompt="x", max_tokens=1,
                                                   logit_bias={"999999999": 1}))
    assert e.status_code == 400 and "logit_bias" in e.body["message"]
