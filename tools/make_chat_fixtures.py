#!/usr/bin/env python3
"""Builds tests/fixtures/chat/*.json: chat-template renderings by HF transformers, the
reference that src/template/chat_template.cc must match byte for byte.

  .venv-tools/bin/python tools/make_chat_fixtures.py [--shared ../shared/data] [--out tests/fixtures/chat]

For each of four templates (Qwen3 and Qwen2.5 from their tokenizer_config.json, and the
templates inside the default Qwen2.5-Coder GGUF and the SmolLM2 GGUF) it renders a fixed set
of conversations with tokenizer.apply_chat_template(..., tokenize=False) and writes the
template text, the exact context the template saw (messages, tools, documents,
add_generation_prompt, the tokenizer's special tokens, extra kwargs) and the expected text
(or the error transformers raised). jinja_semantics.json holds small templates exercising the
interpreter, rendered with transformers' own compiled jinja2 environment.

Rerunning reproduces the files exactly (nothing here depends on time or randomness).
"""
import argparse
import json
import os
import sys

import transformers
from transformers import AutoTokenizer
from transformers.utils.chat_template_utils import _compile_jinja_template

GGUF_MODELS = {
    "qwen2_5_coder_gguf": ("models/default", "model.gguf"),
    "smollm2_gguf": ("models/smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a given location",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "City and country, e.g. Paris, France"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["location"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search_docs",
        "description": "Search the documentation; returns up to `limit` snippets. Quotes \"like this\" are fine.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 20, "default": 5},
                "filters": {"type": "array", "items": {"type": "string"}},
                "threshold": {"type": "number", "default": 0.5},
                "exact": {"type": "boolean", "default": False},
            },
            "required": ["query"],
        },
    },
}
TOOLS = [WEATHER_TOOL, SEARCH_TOOL]


def tool_call(name, arguments, call_id):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


SYSTEM = {"role": "system", "content": "You are a careful assistant.\nAnswer briefly."}
USER = {"role": "user", "content": "What is the capital of France?"}
ASSISTANT = {"role": "assistant", "content": "Paris."}
USER2 = {"role": "user", "content": "And of Italy?"}

# (name, messages, tools, kwargs)
CONVERSATIONS = [
    ("system_user", [SYSTEM, USER], None, {"add_generation_prompt": True}),
    ("multi_turn", [SYSTEM, USER, ASSISTANT, USER2], None, {"add_generation_prompt": True}),
    ("no_system", [USER], None, {"add_generation_prompt": False}),
    ("no_system_generation_prompt", [USER, ASSISTANT, USER2], None, {"add_generation_prompt": True}),
    ("ends_with_assistant", [SYSTEM, USER, ASSISTANT], None, {"add_generation_prompt": False}),
    ("reasoning_content", [
        USER,
        {"role": "assistant", "content": "Paris.", "reasoning_content": "The user asks about France.\nIts capital is Paris."},
        USER2,
    ], None, {"add_generation_prompt": True}),
    ("reasoning_content_last_turn", [
        USER,
        {"role": "assistant", "content": "\nParis.", "reasoning_content": "\nFrance -> Paris.\n"},
    ], None, {"add_generation_prompt": False}),
    ("reasoning_alias_field", [
        USER,
        {"role": "assistant", "content": "Paris.", "reasoning": "Recall: Paris."},
    ], None, {"add_generation_prompt": False}),
    ("think_tags_in_content", [
        USER,
        {"role": "assistant", "content": "<think>\nFrance's capital.\n</think>\n\nParis."},
        USER2,
        {"role": "assistant", "content": "<think>Italy</think>Rome."},
    ], None, {"add_generation_prompt": False}),
    ("enable_thinking_false", [SYSTEM, USER], None, {"add_generation_prompt": True, "enable_thinking": False}),
    ("enable_thinking_true", [USER], None, {"add_generation_prompt": True, "enable_thinking": True}),
    ("tools_with_system", [SYSTEM, {"role": "user", "content": "Weather in Paris?"}], TOOLS,
     {"add_generation_prompt": True}),
    ("tools_without_system", [{"role": "user", "content": "Find docs about tojson."}], TOOLS,
     {"add_generation_prompt": True}),
    ("empty_tools_list", [USER], [], {"add_generation_prompt": True}),
    ("tool_call_arguments_dict", [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            tool_call("get_weather", {"location": "Paris, France", "unit": "celsius"}, "call_1")]},
        {"role": "tool", "content": "{\"temperature\": 21, \"sky\": \"clear\"}", "tool_call_id": "call_1"},
    ], TOOLS, {"add_generation_prompt": True}),
    ("tool_call_arguments_string", [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [
            tool_call("get_weather", "{\"location\": \"Paris, France\"}", "call_1")]},
        {"role": "tool", "content": "21 C", "tool_call_id": "call_1"},
    ], TOOLS, {"add_generation_prompt": True}),
    ("parallel_tool_calls_and_results", [
        SYSTEM,
        {"role": "user", "content": "Weather in Paris and Rome, then search docs."},
        {"role": "assistant", "content": "", "tool_calls": [
            tool_call("get_weather", {"location": "Paris"}, "a"),
            tool_call("get_weather", {"location": "Rome", "unit": "fahrenheit"}, "b"),
            tool_call("search_docs", {"query": "weather", "limit": 3, "filters": ["api", "v2"],
                                      "threshold": 0.25, "exact": True}, "c")]},
        {"role": "tool", "content": "Paris: 21", "tool_call_id": "a"},
        {"role": "tool", "content": "Rome: 75", "tool_call_id": "b"},
        {"role": "tool", "content": "<tool_response>nested</tool_response>", "tool_call_id": "c"},
        {"role": "assistant", "content": "Paris 21 C, Rome 75 F."},
        {"role": "user", "content": "Thanks!"},
    ], TOOLS, {"add_generation_prompt": True}),
    ("tool_call_without_content", [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "tool_calls": [tool_call("get_weather", {"location": "Oslo"}, "x")]},
        {"role": "tool", "content": "cold", "tool_call_id": "x"},
    ], TOOLS, {"add_generation_prompt": True}),
    ("tool_call_null_content", [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "tool_calls": [tool_call("get_weather", {"location": "Oslo"}, "x")]},
        {"role": "tool", "content": "cold", "tool_call_id": "x"},
    ], TOOLS, {"add_generation_prompt": True}),
    ("unicode_content", [
        {"role": "system", "content": "Réponds en français. 日本語も OK. Emoji: 😀🚀 \\ backslash \"quotes\" 'single'"},
        {"role": "user", "content": "Ça va ? 你好！ \t tab\u00a0nbsp \u2028 line-sep"},
        {"role": "assistant", "content": "Très bien — merci ✓", "tool_calls": [
            tool_call("search_docs", {"query": "café ☕ «guillemets»", "filters": ["ü", "ß"]}, "u")]},
        {"role": "tool", "content": "résultat: ✓"},
    ], TOOLS, {"add_generation_prompt": True}),
    ("extra_kwargs", [USER], None, {"add_generation_prompt": True, "custom_flag": 3, "bos_token": "<override>"}),
]


def load_tokenizer(name, shared):
    if name in GGUF_MODELS:
        folder, file = GGUF_MODELS[name]
        if not os.path.exists(os.path.join(folder, file)):
            sys.exit(f"missing {os.path.join(folder, file)}")
        return AutoTokenizer.from_pretrained(folder, gguf_file=file)
    folder = os.path.join(shared, "tokenizers", name)
    if not os.path.exists(folder):
        sys.exit(f"missing {folder}")
    return AutoTokenizer.from_pretrained(folder)


def template_context(tokenizer, messages, tools, kwargs):
    # What render_jinja_template hands the template (before transformers aliases reasoning
    # fields, which the C++ renderer does itself): special tokens, then the call's arguments.
    extra = {k: v for k, v in kwargs.items() if k != "add_generation_prompt"}
    context = {"messages": messages, "tools": tools, "documents": None,
               "add_generation_prompt": kwargs.get("add_generation_prompt", False)}
    for key, value in {**tokenizer.special_tokens_map, **extra}.items():
        context[key] = value
    return context


def render_cases(tokenizer):
    cases = []
    for name, messages, tools, kwargs in CONVERSATIONS:
        case = {"name": name, "context": template_context(tokenizer, messages, tools, kwargs)}
        try:
            case["expected"] = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, **kwargs)
        except Exception as e:  # the template itself refused or failed: C++ must fail too
            case["expected_error"] = f"{type(e).__name__}: {e}"
        cases.append(case)
    return cases


# Small templates for interpreter semantics: (template, context).
SEMANTICS = [
    ("hello\n", {}),
    ("a\r\nb\rc\n\n", {}),
    ("{{ 1 }} {{ 1.0 }} {{ -2.5e-7 }} {{ 1e16 }} {{ 1e15 }} {{ 0.1 }} {{ 123456789.123 }} {{ 2**62 }}", {}),
    ("{{ true }} {{ none }} {{ 'a' ~ 1 ~ none }} {{ [1, 'x', none, true, 1.5] }} {{ {'a': [1], 'b': {'c': 'd'}} }}", {}),
    ("{{ 'it\\'s' }} {{ [\"it's\", 'say \"hi\"', 'both \\' \"', '\\n\\t\\x01é€😀'] }} {{ (1,) }} {{ (1, 2) }}", {}),
    ("  {% if true %}\n  x\n  {% endif %}\n  y", {}),
    ("a  {% if true %}b{% endif %}|{% if true %}  \nx{% endif %}", {}),
    ("a\n  {%- if true -%}  \n  b  \n  {%- endif -%}\n  c", {}),
    ("{{- ' x ' -}}  \n  {{ 'y' }}  \n  {{- 'z' }}", {}),
    ("a {# comment #}\nb\n  {# c2 #}\nc {#- c3 -#} d", {}),
    ("{% raw %}{{ x }}{% endraw %}\n{%- raw -%}  {% y %}  {%- endraw %}|", {}),
    ("{%+ if true %}x{% endif +%}\ny", {}),
    ("{% for i in range(3) %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}"
     "{{ loop.revindex }}{{ loop.revindex0 }},{% endfor %}", {}),
    ("{% for i in [] %}x{% else %}empty{% endfor %}|{% for i in range(10) if i % 2 == 0 %}{{ i }}{{ loop.index }}"
     "{{ loop.length }} {% endfor %}", {}),
    ("{% for i in range(10) %}{% if i == 3 %}{% continue %}{% endif %}{% if i == 6 %}{% break %}{% endif %}"
     "{{ i }}{% endfor %}", {}),
    ("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}"
     "{% for ch in 'héllo' %}[{{ ch }}]{% endfor %}", {"d": {"z": 1, "a": 2, "m": [1, 2]}}),
    ("{% set ns = namespace(x=1, y='a') %}{% for i in range(3) %}{% set ns.x = ns.x + i %}{% endfor %}"
     "{{ ns.x }}{{ ns.y }}", {}),
    ("{% set x = 1 %}{% for i in [1,2] %}{{ x }}{% set x = 5 %}{{ x }}{% endfor %}{{ x }}"
     "{% for i in [1,2] %}{% if i == 2 %}[{{ y }}]{% endif %}{% set y = i %}{% endfor %}", {}),
    ("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = 1, 2 %}{{ c }}{% set x %}in {{ 1 + 1 }}{% endset %}[{{ x }}]"
     "{% set y | upper %}abc{% endset %}{{ y }}", {}),
    ("{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('Bob') }} "
     "{{ greet('Al', greeting='Hi') }} {{ greet(greeting='Yo', name='Z') }}", {}),
    ("{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k=4) }}"
     "{% macro rec(n) %}{% if n > 0 %}{{ n }}{{ rec(n - 1) }}{% endif %}{% endmacro %}{{ rec(5) }}", {}),
    ("{% macro outer() %}[{{ caller() }}]{% endmacro %}{% call outer() %}body{% endcall %}"
     "{% filter upper %}hello {{ 'x' }}{% endfilter %}{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a }}", {}),
    ("{{ 'Hello World'|lower }} {{ 'abc'|upper }} {{ '  x  '|trim }} {{ 'xxhixx'|trim('x') }} "
     "{{ 'hello world-wide (x'|title }} {{ 'hELLO'|capitalize }}", {}),
    ("{{ [1,2,3]|length }} {{ 'héllo'|length }} {{ {'a':1}|length }} {{ u|length }} {{ [3,1,2]|sort }} "
     "{{ ['b','A','c']|sort }} {{ ['b','A','c']|sort(case_sensitive=true) }} {{ [3,1,2]|sort(reverse=true) }}", {}),
    ("{{ [1,2,3]|join(', ') }} {{ [1,2,3]|join }} {{ [1,2,3]|first }} {{ [1,2,3]|last }} {{ 'abc'|first }} "
     "[{{ []|first }}] {{ u|default('d') }} {{ ''|default('d') }} {{ ''|default('d', true) }} {{ none|default('d') }}", {}),
    ("{{ 'a,b,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a b c'.rsplit(' ', 1) }} "
     "{{ '  a b  '.split(none, 1) }} {{ '  a b  '.rsplit(none, 1) }}", {}),
    ("{{ 'hello'.startswith('he') }} {{ 'hello'.endswith(('x', 'lo')) }} {{ 'abc'.replace('b', 'X') }} "
     "{{ 'aaa'.replace('a', 'b', 2) }} {{ 'ab'.replace('', '-') }}", {}),
    ("{{ '\\n\\nx\\n'.strip('\\n') }}|{{ 'xyx'.lstrip('x') }}|{{ 'xyx'.rstrip('x') }}|{{ '  a '.lstrip() }}|"
     "{{ ' a  '.rstrip() }}|{{ '\\u3000a\\u00a0'.strip() }}|", {}),
    ("{{ 'abcdef'[1:3] }} {{ 'abcdef'[::-1] }} {{ 'abcdef'[-2:] }} {{ [1,2,3,4][::2] }} {{ [1,2,3][-1] }} "
     "{{ 'héllo'[1] }} {{ 'héllo'[::-1] }} {{ [1,2,3][5:] }} {{ [1,2,3,4,5][4:1:-2] }} {{ [1,2,3][-10:-1] }}", {}),
    ("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 2 ** 10 }} "
     "{{ 2 ** -2 }} {{ 2.0 ** 3 }} {{ 10 / 4 }} {{ 1 + 2.0 }} {{ true + 1 }} {{ 4 / 2 }}", {}),
    ("{{ 'ab' * 3 }} {{ 2 * 'x' }} {{ [1] * 3 }} {{ [1] + [2] }} {{ 'a' + 'b' }} {{ -(3) }} {{ +3 }} {{ not 1 }} "
     "{{ -1|abs }} {{ 3 - -1 }}", {}),
    ("{{ 1 < 2 < 3 }} {{ 3 > 2 > 5 }} {{ 'a' < 'b' }} {{ [1,2] < [1,3] }} {{ 1 == 1.0 }} {{ '1' == 1 }} "
     "{{ none == none }} {{ 1 != 2 }} {{ 'a' in 'abc' }} {{ 2 in [1,2] }} {{ 'k' in {'k':1} }} "
     "{{ 'z' not in 'abc' }} {{ 1 in u }}", {}),
    ("{{ 1 if true else 2 }} {{ 1 if false else 2 }} [{{ 1 if false }}] {{ 0 or 'x' }} {{ 1 and 'y' }} "
     "{{ 0 and 'y' }} {{ none or none }}", {}),
    ("{{ x is defined }} {{ y is defined }} {{ y is undefined }} {{ none is none }} {{ x is not none }} "
     "{{ 's' is string }} {{ 1 is number }} {{ 1.0 is float }} {{ 1 is integer }} {{ true is integer }} "
     "{{ true is boolean }} {{ {} is mapping }} {{ [] is sequence }} {{ 'x' is iterable }} {{ 3 is odd }} "
     "{{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(2) }} {{ false is false }} {{ 1 is true }}",
     {"x": 1}),
    ("{{ 2 is in [1,2] }} {{ 1 is eq 1 }} {{ 3 is gt 2 }} {{ 'abc' is lower }} {{ 'ABC' is upper }} "
     "{{ f is callable }} {{ range is callable }} {{ 'upper' is filter }} {{ 'odd' is test }}", {"f": 1}),
    ("{{ d|tojson }} {{ d|tojson(indent=2) }} {{ d|tojson(separators=(',', ':')) }} {{ d|tojson(sort_keys=true) }} "
     "{{ d|tojson(ensure_ascii=true) }}",
     {"d": {"b": [1, 2.5, None, True, "é\"\n\x01\x7f\\😀"], "a": {}, "c": [], "n": 1e100, "i": -3}}),
    ("{{ 'x'|tojson }} {{ 1.0|tojson }} {{ [1,[2,[3]]]|tojson(indent=1) }} {{ {'a':{'b':1}}|tojson(indent='\\t') }} "
     "{{ {1: 'a'}|tojson }} {{ {true: 1, none: 2}|tojson }}", {}),
    ("{{ d.a }} {{ d['a'] }} {{ d.get('a') }} {{ d.get('zz', 5) }} {{ d.get('zz') }} {{ d.keys()|list }} "
     "{{ d.values()|list }} {{ d.items()|list }}", {"d": {"a": 1, "b": 2}}),
    ("{{ d.missing }}|{{ d.missing is defined }}|{{ d['missing'] }}|{{ l[10] }}|{{ n.x }}|{{ x }}{{ x.y }}|",
     {"d": {}, "l": [1], "n": None, "x": []}),
    ("{{ [1,2]|map('string')|list }} {{ [{'a': 1}, {'a': 2}]|map(attribute='a')|list }} "
     "{{ [{'a': 1}, {}]|map(attribute='a', default=0)|list }} {{ [1,0,2]|select|list }} "
     "{{ [1,2,3,4]|select('even')|list }} {{ [1,2,3]|reject('odd')|list }} {{ [{'a':1},{'a':0}]|selectattr('a')|list }} "
     "{{ [{'a':1},{'a':2}]|selectattr('a', 'equalto', 2)|list }} {{ [{'a':1},{'b':2}]|rejectattr('a', 'defined')|list }}", {}),
    ("{{ [1,2,2,3,1]|unique|list }} {{ ['a','A','b']|unique|list }} {{ [1,2,3]|sum }} {{ [1,5,3]|max }} "
     "{{ [4,2,8]|min }} {{ [1,2,3]|reverse|list }} {{ 'abc'|reverse }}", {}),
    ("{{ '3'|int }} {{ '3.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ '0x1A'|int(base=16) }} "
     "{{ ' 12 '|int }} {{ '1_000'|int }} {{ '3'|float }} {{ 'x'|float }} {{ 3|float }}", {}),
    ("{{ 3.14159|round(2) }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 3|round }} "
     "{{ 3.14|round(1, 'floor') }} {{ 3.11|round(1, 'ceil') }}", {}),
    ("{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}|", {}),
    ("{{ {'b': 1, 'a': 2}|dictsort }} {{ {'b': 1, 'a': 2}|items|list }} {{ '%s and %d'|format('x', 3) }} "
     "{{ '%s-%s' % ('a', 'b') }} {{ '%05.1f|%-4s|%x' % (3.14159, 'ab', 255) }} {{ '%(a)s=%(b)s' % {'a': 1, 'b': 2} }}", {}),
    ("{{ '<a href=\\'x\\'>&</a>'|e }} {{ 'x'|safe }} {{ [1, 2]|string }} {{ 12|string }} {{ 'a b c'|wordcount }} "
     "{{ 'hello'|center(11) }}|{{ 'some long text here'|truncate(9, leeway=0) }}", {}),
    ("{{ range(5)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }} {{ range(0)|list }} "
     "{{ dict(a=1, b=2) }} {{ namespace(a=1).a }} {% set j = joiner('|') %}{% for i in range(3) %}{{ j() }}{{ i }}{% endfor %}"
     " {{ [1,2,3,4,5]|batch(2)|list }} {{ [1,2,3]|batch(2, 'x')|list }}", {}),
    ("{{ 'Hello {}, {}!'.format('a', 1) }} {{ '{0}{0}{name}'.format('x', name='n') }} {{ 'a-b'.partition('-') }} "
     "{{ '5'.zfill(3) }} {{ 'ab'.center(6, '*') }} {{ 'a\\nb\\r\\nc'.splitlines() }} {{ 'abc'.find('c') }} "
     "{{ 'abc'.find('z') }} {{ 'aXbXc'.count('X') }} {{ '-'.join(['a', 'b']) }} {{ 'x'.isdigit() }} {{ '12'.isdigit() }} "
     "{{ 'Ab'.isupper() }} {{ 'AB'.isupper() }} {{ 'hello world'.title() }}", {}),
    ("{{ messages[0].role }} {{ messages[0]['content'] }} {{ messages|length }} {{ messages[-1].content }} "
     "{{ (messages|last).role }} {% for m in messages[::-1] %}{{ m.role }}{% endfor %} "
     "{{ messages|map(attribute='role')|join(',') }} {{ messages|selectattr('role', 'equalto', 'user')|list|length }}",
     {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}),
    ("{{ 'x' 'y' }} {{ 1_000 }} {{ 0x10 }} {{ 0b11 }} {{ 0o7 }} {{ 1.5e3 }} {{ 10.0 }} {{ d }} {{ d|string }}",
     {"d": {"a": "it's", "b": [True, None, 1.5]}}),
    ("{{ 'é'|upper }} {{ 'ÀÉÎ'|lower }} {{ 'straße'|upper }} {{ 'ΑΒΓ'|lower }} {{ 'привет'|upper }}", {}),
    ("{{ x.y.z }} {{ x['y']['z'] }} {{ l[0][1] }} {{ l.0.1 }}", {"x": {"y": {"z": "deep"}}, "l": [[1, 2]]}),
    ("{{ not x is defined }} {{ not (x is defined) }} {{ x is defined and x }} {{ a ~ b }}", {"x": 0, "a": "x", "b": None}),
    ("{% for a, b in [[1, 2], [3, 4]] %}{{ a }}{{ b }}{% endfor %}{% for a, b in ['xy'] %}{{ a }}{{ b }}{% endfor %}"
     "{% for x in [1,2,3] %}{{ loop.previtem }}-{{ loop.nextitem }}-{{ loop.cycle('a','b') }};{% endfor %}"
     "{% for x in [1,1,2] %}{{ loop.changed(x) }}{% endfor %}", {}),
    ("{% generation %}gen{% endgeneration %}{{ ns }}{% set ns = namespace() %}{% set ns.a = 1 %}{{ ns.a }}{{ ns.b }}", {}),
    ("{{ {1: 'a', '1': 'b'}[1] }} {{ '%s' % none }} {{ '%r' % 'x' }} {{ '%d%%' % 50 }} {{ 1e308 * 10 }} "
     "{{ -1e308 * 10 }} {{ (1e308 * 10)|tojson }}", {}),
    ("{% if x %}{{ x|no_such_filter }}{% endif %}ok {{ 'x' if false else y|default('z') }}", {"x": 0}),
    # Generator filters: always true, lazy errors, consumed by |list / for.
    ("{% if m|selectattr('role', 'equalto', 'none') %}gen-true{% endif %}|{{ m|selectattr('role', 'equalto', 'none')|list }}"
     "|{% if not (5|select) %}x{% else %}lazy{% endif %}|{% if u|items %}items-true{% endif %}"
     "|{% for k, v in {'a': 1}|items %}{{ k }}{{ v }}{% endfor %}|{{ (m|map(attribute='role')|list)[1] }}",
     {"m": [{"role": "user"}, {"role": "assistant"}]}),
    ("{{ m|unique|list }}", {"m": [{"a": 1}]}),
    ("{{ 'no specifiers' % [1, 2] }} {{ 'x' % u }} {{ u is callable }} {{ 2.5 is odd }} {{ 4.0 is divisibleby 2 }}", {}),
    # Errors: the C++ renderer must fail as transformers does.
    ("{{ d.missing.x }}", {"d": {}}),
    ("{{ u.x }}", {}),
    ("{{ u() }}", {}),
    ("{{ u + 1 }}", {}),
    ("{{ 'a' + 1 }}", {}),
    ("{{ 1 / 0 }}", {}),
    ("{{ raise_exception('custom message') }}", {}),
    ("{{ x|no_such_filter }}", {}),
    ("{{ x is no_such_test }}", {}),
    ("{% for i in 5 %}{% endfor %}", {}),
    ("{% for i in none %}{% endfor %}", {}),
    ("{% set a, b = [1] %}", {}),
    ("{{ range(100001) }}", {}),
    ("{% set l = [1, 2] %}{{ l.append(3) }}", {}),
    ("{% set x = {'a': 1} %}{{ x.update({'b': 2}) }}", {}),
    ("{% set ns = namespace() %}{% set ns._private = 1 %}", {}),
    ("{% set x = 1 %}{% set x.a = 1 %}", {}),
    ("{{ u|tojson }}", {}),
    ("{{ 1 }}{# unterminated comment", {}),
    ("{{ 1 ", {}),
    ("{% if x %}", {}),
    ("{% for %}", {}),
    ("{% endif %}", {}),
    ("{{ ) }}", {}),
    ("{{ 'unterminated }}", {}),
    ("{% foo %}", {}),
    ("{% include 'other.jinja' %}", {}),
    ("{% macro m(a=1, b) %}{% endmacro %}", {}),
    ("{% break %}", {}),
]


def render_semantics():
    cases = []
    for template, context in SEMANTICS:
        case = {"template": template, "context": context}
        try:
            case["expected"] = _compile_jinja_template(template).render(**context)
        except Exception as e:
            case["expected_error"] = f"{type(e).__name__}: {e}"
        cases.append(case)
    return cases


def write(path, data):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=1)
        f.write("\n")


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser()
    parser.add_argument("--shared", default=os.path.join(root, "..", "shared", "data"))
    parser.add_argument("--out", default=os.path.join(root, "tests", "fixtures", "chat"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    sources = {
        "qwen3": "Qwen3 tokenizer_config.json chat_template (shared/data/tokenizers/qwen3)",
        "qwen2_5": "Qwen2.5 tokenizer_config.json chat_template (shared/data/tokenizers/qwen2_5)",
        "qwen2_5_coder_gguf": "tokenizer.chat_template of the default model GGUF (Qwen2.5-Coder-0.5B-Instruct)",
        "smollm2_gguf": "tokenizer.chat_template of SmolLM2-135M-Instruct.Q4_1.gguf",
    }
    for name, source in sources.items():
        tokenizer = load_tokenizer(name, args.shared)
        write(os.path.join(args.out, f"{name}.json"), {
            "template_name": name,
            "template_source": source,
            "reference": f"transformers {transformers.__version__} apply_chat_template(..., tokenize=False)",
            "template": tokenizer.chat_template,
            "cases": render_cases(tokenizer),
        })
    write(os.path.join(args.out, "jinja_semantics.json"), {
        "reference": f"transformers {transformers.__version__} chat-template jinja2 environment",
        "cases": render_semantics(),
    })


if __name__ == "__main__":
    main()
