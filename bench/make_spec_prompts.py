#!/usr/bin/env python3
"""Writes the prompt packs of bench/spec_bench.py: bench/prompts/{prose,code,edit}.jsonl.

Deterministic (seeded, stdlib only): the same --seed always writes the same bytes. One JSON
object per line: {"id": ..., "messages": [{"role": "user", "content": ...}], "max_tokens": N}.

  prose  "Write a short story about X": X combines a character, what happens to them and a
         setting (96 distinct prompts, max_tokens 256). Little of the answer is in the prompt:
         the hard case for n-gram / suffix drafting.
  code   "Write a Python module implementing Y with type hints and a doctest" over data
         structures, algorithms, parsers and utilities (85, each Y once; max_tokens 256).
         Code repeats itself (names, signatures): some help for prompt lookup.
  edit   a ~800-token Python module (2,800-3,400 characters; 680-880 tokens with the Qwen2.5
         tokenizer) built from templates over one of a dozen domains: a dataclass, a handful of
         record and collection functions with docstrings, often a registry class and a __main__
         block; the parts, their order and some wording vary. Then the instruction to rename one
         function that the module defines once and calls at least three times, and to return the
         module otherwise byte for byte. The answer is nearly the prompt: the best case for
         n-gram / suffix drafting. 72 prompts; max_tokens is 1.1x the module's length in tokens,
         estimated at 3.5 characters a token, capped at 1200. Every module and its renamed form
         is checked with ast.parse (and, with --run-check, executed as __main__).

    python3 bench/make_spec_prompts.py [--seed 0] [--out bench/prompts] [--run-check]
"""
import argparse
import ast
import contextlib
import io
import json
import math
import os
import random
import re
import sys
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ---------------------------------------------------------------------------------------- prose

CHARACTERS = [
    "a retired lighthouse keeper", "a nervous apprentice baker", "a stray cat with one ear",
    "a teenage chess prodigy", "an elderly beekeeper", "a night-shift nurse", "a lost delivery drone",
    "a disgraced court magician", "twin sisters who never agree", "a ship's cook",
    "a cartographer who cannot read maps", "a small-town mayor", "a robot vacuum cleaner",
    "a grieving violin maker", "a border collie", "a pair of rival street musicians",
    "an astronaut on her last mission", "a forgetful wizard", "a shy librarian", "a fox cub",
]
EVENTS = [
    "finds a letter addressed to someone who died a century ago",
    "has to win back a friend's trust before sunset",
    "discovers that the town clock has stopped time",
    "is given a map with one island too many",
    "must cook dinner for a visiting queen with an empty pantry",
    "wakes up able to understand what birds say",
    "loses the only key to an important door",
    "agrees to guard a mysterious egg for one night",
    "is asked to forge a painting and refuses",
    "hears a song that nobody else can hear",
    "gets stuck in an elevator with a stranger",
    "receives a package that keeps getting heavier",
    "tries to return a library book that is forty years overdue",
    "inherits a greenhouse full of plants that move at night",
]
SETTINGS = [
    "in a snowed-in mountain village", "on a generation starship", "in a flooded Venice",
    "at a night market in Taipei", "in a lighthouse during a storm", "in a desert research station",
    "in a Victorian railway station", "on a houseboat on the Mekong", "in an abandoned amusement park",
    "in a bakery at four in the morning", "on the Moon's first farm", "in a medieval monastery library",
]

# ----------------------------------------------------------------------------------------- code

CODE_TOPICS = [
    # data structures
    "an LRU cache with a fixed capacity", "a binary min-heap priority queue with decrease-key",
    "a trie with insert, lookup and prefix search", "a disjoint-set (union-find) with path compression and union by rank",
    "a fixed-size ring buffer", "a Bloom filter with a configurable false-positive rate",
    "an interval tree answering overlap queries", "a skip list with insert, delete and search",
    "a doubly linked list with O(1) removal of a node", "a queue built from two stacks",
    "a sparse matrix stored as a dictionary of keys", "a fixed-width bitset with set operations",
    "a segment tree for range-sum queries with point updates", "a Fenwick (binary indexed) tree",
    "an AVL tree with in-order iteration", "a sorted multiset backed by the bisect module",
    "a time-based key-value store that returns the value at a timestamp", "an immutable 2D vector class",
    "a Fraction class with arithmetic and comparison", "a Polynomial class with evaluation, addition and multiplication",
    "a directed graph class with BFS and DFS", "a persistent (immutable) stack",
    # algorithms
    "Dijkstra's shortest-path algorithm", "topological sorting with Kahn's algorithm",
    "A* path finding on a grid with obstacles", "Knuth-Morris-Pratt string search",
    "Rabin-Karp multiple-pattern search", "the Levenshtein edit distance with the edit script",
    "the longest common subsequence of two sequences", "the 0/1 knapsack problem with item recovery",
    "a stable merge sort", "an in-place quicksort with median-of-three pivots",
    "LSD radix sort for non-negative integers", "reservoir sampling over an iterator",
    "the sieve of Eratosthenes with a segmented variant", "the extended Euclidean algorithm and modular inverse",
    "Fibonacci numbers by matrix exponentiation", "Andrew's monotone chain convex hull",
    "Huffman coding with encode and decode", "Kruskal's minimum spanning tree",
    "the Floyd-Warshall all-pairs shortest paths", "Tarjan's strongly connected components",
    "merging overlapping intervals", "the longest increasing subsequence in O(n log n)",
    "a flood fill on a 2D grid", "an N-queens solver that yields every solution",
    "a backtracking Sudoku solver", "run-length encoding and decoding",
    # parsers
    "an INI file parser with sections and comments", "a CSV reader that handles quoted fields",
    "a recursive-descent arithmetic expression evaluator", "a parser for a small subset of JSON",
    "a URL query-string parser and encoder", "semantic version parsing and comparison",
    "an ISO 8601 duration parser", "conversion between Roman numerals and integers",
    "a tokenizer and reader for S-expressions", "a cron expression parser that lists the next run times",
    "a Markdown table-of-contents generator from headings", "a shell-like command-line tokenizer",
    "an HTTP/1.1 request-line and header parser", "a tiny template engine with {{ name }} substitution",
    "a glob-pattern to regular-expression converter", "a .env file parser with quoting and escapes",
    "a unit-conversion parser for inputs like '5 km to mi'",
    # utilities
    "a retry decorator with exponential backoff and jitter", "a token-bucket rate limiter",
    "a memoizing decorator with a time-to-live", "full justification of text to a given width",
    "a slugify function for URLs", "human-readable byte sizes (KiB, MiB, ...)",
    "a word-frequency counter with stop words", "a line-based diff of two texts",
    "chunking an iterable into fixed-size batches", "flattening arbitrarily nested lists",
    "a deep merge of nested dictionaries", "conversion between camelCase and snake_case",
    "a streaming SHA-256 checksum of a file", "a plain-text table formatter for rows of data",
    "running mean and variance with Welford's algorithm", "a text histogram of numeric data",
    "a simple publish/subscribe event emitter", "a finite-state machine with guarded transitions",
    "a double-entry bookkeeping ledger", "a scheduler that runs tasks by priority and deadline",
]

# ----------------------------------------------------------------------------------------- edit

# A domain: the entity (snake / Class / plural), its string key, a label, a float value and a
# string group, sample rows, and words for the docstrings.
DOMAINS = [
    dict(e="order", E="Order", p="orders", k="order_id", l="customer", v="total", g="status",
         rows=[("A-100", "Ada Lovelace", 129.5, "paid"), ("A-101", "Alan Turing", 42.0, "pending"),
               ("A-102", "Grace Hopper", 310.25, "paid"), ("A-103", "Edsger Dijkstra", 15.75, "refunded")],
         what="customer orders", unit="euros"),
    dict(e="invoice", E="Invoice", p="invoices", k="number", l="client", v="amount", g="currency",
         rows=[("INV-7", "Acme Ltd", 1200.0, "EUR"), ("INV-8", "Globex", 860.4, "USD"),
               ("INV-9", "Initech", 99.99, "EUR"), ("INV-10", "Umbrella", 4300.0, "GBP")],
         what="invoices", unit="currency units"),
    dict(e="reading", E="Reading", p="readings", k="sensor_id", l="location", v="value", g="unit",
         rows=[("s-01", "roof", 21.4, "celsius"), ("s-02", "cellar", 12.9, "celsius"),
               ("s-03", "garden", 64.0, "percent"), ("s-04", "attic", 1013.2, "hpa")],
         what="sensor readings", unit="the sensor's unit"),
    dict(e="employee", E="Employee", p="employees", k="employee_id", l="name", v="salary", g="department",
         rows=[("E17", "Maria Garcia", 58000.0, "finance"), ("E18", "Wei Chen", 72500.0, "engineering"),
               ("E19", "Amara Okafor", 64000.0, "engineering"), ("E20", "Lars Nilsson", 51000.0, "support")],
         what="employee records", unit="euros a year"),
    dict(e="book", E="Book", p="books", k="isbn", l="title", v="price", g="genre",
         rows=[("978-0", "Dune", 9.99, "science fiction"), ("978-1", "Emma", 6.5, "classic"),
               ("978-2", "Neuromancer", 8.75, "science fiction"), ("978-3", "Beloved", 11.0, "literary")],
         what="books in a catalogue", unit="dollars"),
    dict(e="ticket", E="Ticket", p="tickets", k="ticket_id", l="assignee", v="hours", g="priority",
         rows=[("T-501", "kim", 3.5, "high"), ("T-502", "noor", 0.75, "low"),
               ("T-503", "kim", 8.0, "urgent"), ("T-504", "oscar", 2.25, "medium")],
         what="support tickets", unit="time spent"),
    dict(e="shipment", E="Shipment", p="shipments", k="tracking_id", l="destination", v="weight", g="carrier",
         rows=[("1Z999", "Lisbon", 2.4, "ups"), ("JD014", "Oslo", 12.0, "dhl"),
               ("RR120", "Nairobi", 0.8, "post"), ("1Z321", "Quito", 5.6, "ups")],
         what="parcel shipments", unit="kilograms"),
    dict(e="track", E="Track", p="tracks", k="track_id", l="artist", v="duration", g="genre",
         rows=[("t1", "Nina Simone", 245.0, "jazz"), ("t2", "Fela Kuti", 612.5, "afrobeat"),
               ("t3", "Bjork", 289.0, "electronic"), ("t4", "Miles Davis", 562.0, "jazz")],
         what="music tracks", unit="seconds"),
    dict(e="transaction", E="Transaction", p="transactions", k="txn_id", l="account", v="amount", g="category",
         rows=[("X1", "checking", 54.2, "groceries"), ("X2", "savings", 1000.0, "transfer"),
               ("X3", "checking", 12.5, "transport"), ("X4", "credit", 89.9, "groceries")],
         what="bank transactions", unit="euros"),
    dict(e="course", E="Course", p="courses", k="code", l="instructor", v="credits", g="faculty",
         rows=[("CS101", "Dr Rivera", 6.0, "science"), ("HI204", "Dr Osei", 5.0, "humanities"),
               ("MA110", "Dr Novak", 7.5, "science"), ("EC300", "Dr Haddad", 5.0, "economics")],
         what="university courses", unit="credits"),
    dict(e="product", E="Product", p="products", k="sku", l="name", v="price", g="category",
         rows=[("SKU-1", "kettle", 34.99, "kitchen"), ("SKU-2", "lamp", 19.5, "living"),
               ("SKU-3", "pan", 27.0, "kitchen"), ("SKU-4", "rug", 120.0, "living")],
         what="products in a shop", unit="dollars"),
    dict(e="flight", E="Flight", p="flights", k="flight_no", l="origin", v="delay", g="airline",
         rows=[("LH400", "Frankfurt", 12.0, "lufthansa"), ("BA117", "London", 0.0, "british"),
               ("AF006", "Paris", 47.5, "airfrance"), ("LH401", "Newark", 5.0, "lufthansa")],
         what="flights", unit="minutes of delay"),
]

# Renames per role of the target: the new name's template.
# The functions a module may hold. Each: (tier, the functions it calls, its text). Tier 0: one
# record at a time; 1: collections; 2: built on tier 1. The rename target is a tier-0 function.
TARGETS = ["parse", "validate", "normalize", "format", "to_dict", "key"]
OLD_NAMES = {"parse": "parse_{e}", "validate": "validate_{e}", "normalize": "normalize_{e}",
             "format": "format_{e}", "to_dict": "{e}_to_dict", "key": "{e}_key"}
RENAMES = {
    "parse": ["decode_{e}", "read_{e}", "{e}_from_line", "parse_{e}_line"],
    "validate": ["check_{e}", "verify_{e}", "ensure_valid_{e}", "assert_{e}_ok"],
    "normalize": ["canonicalize_{e}", "clean_{e}", "tidy_{e}", "standardize_{e}"],
    "format": ["render_{e}", "describe_{e}", "{e}_to_text", "pretty_{e}"],
    "to_dict": ["{e}_as_dict", "serialize_{e}", "{e}_to_record", "{e}_as_json_object"],
    "key": ["{e}_sort_key", "rank_{e}", "{e}_order_key", "by_{v}_desc"],
}


def pick(rng, *options):
    return rng.choice(options)


def function_pool(rng, d, log, has_max):
    e, E, p, k, l, v, g = d["e"], d["E"], d["p"], d["k"], d["l"], d["v"], d["g"]
    bounds = f"item.{v} < 0" + (f" or item.{v} > MAX_{v.upper()}" if has_max else "")
    if log:
        skip = '        except ValueError as err:\n            log.warning("line %d skipped: %s", number, err)\n'
    else:
        skip = "        except ValueError:\n"
    f = {}
    f["parse"] = (0, [], f'''def parse_{e}(line: str) -> {E}:
    """Parses one line into a {E}; ValueError unless it holds FIELD_COUNT fields."""
    fields = [part.strip() for part in line.split(SEPARATOR)]
    if len(fields) != FIELD_COUNT:
        raise ValueError(f"expected {{FIELD_COUNT}} fields, got {{len(fields)}}: {{line!r}}")
    {k}, {l}, {v}, {g} = fields
    return {E}({k}={k}, {l}={l}, {v}=float({v}), {g}={g})''')
    f["validate"] = (0, [], f'''def validate_{e}(item: {E}) -> None:
    """Raises ValueError when the {e} cannot be right."""
    if not item.{k}:
        raise ValueError("empty {k}")
    if {bounds}:
        raise ValueError(f"{v} out of range: {{item.{v}}}")''')
    f["normalize"] = (0, [], f'''def normalize_{e}(item: {E}) -> {E}:
    """A copy with the {g} in lower case, the {l} trimmed and the {v} rounded."""
    return {E}(
        {k}=item.{k}.strip(),
        {l}=" ".join(item.{l}.split()),
        {v}=round(item.{v}, DECIMALS),
        {g}=item.{g}.strip().lower(),
    )''')
    f["format"] = (0, [], f'''def format_{e}(item: {E}) -> str:
    """One line of text for reports."""
    return f"{{item.{k}:<10}} {{item.{l}:<18}} {{item.{v}:>10.{{DECIMALS}}f}}  {{item.{g}}}"''')
    f["to_dict"] = (0, [], f'''def {e}_to_dict(item: {E}) -> dict:
    """A JSON-ready dictionary of the {e}."""
    return {{"{k}": item.{k}, "{l}": item.{l}, "{v}": item.{v}, "{g}": item.{g}}}''')
    f["key"] = (0, [], f'''def {e}_key(item: {E}) -> tuple:
    """Sort key: largest {v} first, then by {k}."""
    return (-item.{v}, item.{k})''')
    f["is_valid"] = (0, ["validate"], f'''def is_valid_{e}(item: {E}) -> bool:
    """Whether validate_{e} accepts the {e}."""
    try:
        validate_{e}(item)
    except ValueError:
        return False
    return True''')
    f["load"] = (1, ["parse", "validate", "normalize"], f'''def load_{p}(lines: Iterable[str]) -> tuple[list[{E}], int]:
    """Parses, checks and normalizes the record lines; returns the {p} and the count skipped."""
    {p}: list[{E}] = []
    skipped = 0
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            item = parse_{e}(line)
            validate_{e}(item)
{skip}            skipped += 1
            continue
        {p}.append(normalize_{e}(item))
    return {p}, skipped''')
    f["parse_all"] = (1, ["parse"], f'''def {p}_from_text(text: str) -> list[{E}]:
    """Every record of a text block (no checks)."""
    return [parse_{e}(line) for line in text.splitlines() if line.strip() and not line.startswith("#")]''')
    f["invalid"] = (1, ["validate"], f'''def invalid_{p}({p}: Iterable[{E}]) -> list[tuple[str, str]]:
    """({k}, reason) for each {e} that fails validation."""
    problems = []
    for item in {p}:
        try:
            validate_{e}(item)
        except ValueError as err:
            problems.append((item.{k}, str(err)))
    return problems''')
    f["group"] = (1, ["normalize"], f'''def group_by_{g}({p}: Iterable[{E}]) -> dict[str, list[{E}]]:
    """The {p} of each {g}, in input order."""
    groups: dict[str, list[{E}]] = {{}}
    for item in {p}:
        groups.setdefault(normalize_{e}(item).{g}, []).append(item)
    return groups''')
    f["dedupe"] = (1, ["normalize"], f'''def dedupe_{p}({p}: Iterable[{E}]) -> list[{E}]:
    """The {p} with repeated {k}s dropped (the first one wins), normalized."""
    seen: set[str] = set()
    unique = []
    for item in map(normalize_{e}, {p}):
        if item.{k} not in seen:
            seen.add(item.{k})
            unique.append(item)
    return unique''')
    f["summary"] = (1, [], f'''def summarize({p}: list[{E}]) -> dict[str, float]:
    """Count, total and mean {v} of the {p}."""
    values = [item.{v} for item in {p}]
    total = round(sum(values), DECIMALS)
    mean = round(total / len(values), DECIMALS) if values else 0.0
    return {{"count": len(values), "total": total, "mean": mean}}''')
    f["top"] = (1, ["key"], f'''def top_{p}({p}: Iterable[{E}], n: int = 3) -> list[{E}]:
    """The n {p} with the largest {v}."""
    return sorted({p}, key={e}_key)[:n]''')
    f["dump"] = (1, ["to_dict"], f'''def dump_{p}({p}: Iterable[{E}], indent: Optional[int] = 2) -> str:
    """The {p} as a JSON array."""
    return json.dumps([{e}_to_dict(item) for item in {p}], indent=indent)''')
    f["json_lines"] = (1, ["to_dict"], f'''def to_json_lines({p}: Iterable[{E}]) -> str:
    """One JSON object per line, keys sorted."""
    return "\\n".join(json.dumps({e}_to_dict(item), sort_keys=True) for item in {p})''')
    f["find"] = (1, [], f'''def find_{e}({p}: Iterable[{E}], {k}: str) -> Optional[{E}]:
    """The first {e} with this {k}, or None."""
    return next((item for item in {p} if item.{k} == {k}), None)''')
    f["format_all"] = (1, ["format"], f'''def {p}_as_text({p}: Iterable[{E}]) -> str:
    """The {p} as text, one per line."""
    return "\\n".join(format_{e}(item) for item in {p})''')
    f["first"] = (1, ["parse"], f'''def first_{e}(text: str) -> Optional[{E}]:
    """The first record of a text block, or None."""
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            return parse_{e}(line)
    return None''')
    f["describe_top"] = (2, ["top", "format"], f'''def describe_top({p}: Iterable[{E}], n: int = 3) -> str:
    """The n largest {p}, one line each."""
    return "\\n".join(format_{e}(item) for item in top_{p}({p}, n))''')
    f["report"] = (2, ["format", "key", "summary"], f'''def report({p}: list[{E}]) -> str:
    """One line per {e}, largest {v} first, then the totals."""
    lines = [format_{e}(item) for item in sorted({p}, key={e}_key)]
    stats = summarize({p})
    lines.append(f"{{stats['count']}} {p}, total {{stats['total']:.{{DECIMALS}}f}}")
    return "\\n".join(lines)''')
    return f


def registry_methods(d):
    e, E, p, k = d["e"], d["E"], d["p"], d["k"]
    return {  # name: (calls, text)
        "add_line": (["parse"], f'''    def add_line(self, line: str) -> {E}:
        return self.add(parse_{e}(line))'''),
        "get": ([], f'''    def get(self, {k}: str) -> Optional[{E}]:
        return self._items.get({k})'''),
        "remove": ([], f'''    def remove(self, {k}: str) -> {E}:
        return self._items.pop({k})'''),
        "len": ([], '''    def __len__(self) -> int:
        return len(self._items)'''),
        "iter": (["key"], f'''    def __iter__(self) -> Iterator[{E}]:
        return iter(sorted(self._items.values(), key={e}_key))'''),
        "str": (["format"], f'''    def __str__(self) -> str:
        return "\\n".join(format_{e}(item) for item in self._items.values())'''),
        "to_json": (["to_dict"], f'''    def to_json(self) -> str:
        return json.dumps([{e}_to_dict(item) for item in self._items.values()], sort_keys=True)'''),
    }


def registry_text(d, methods):
    e, E, p, k = d["e"], d["E"], d["p"], d["k"]
    head = f'''class {E}Registry:
    """Keeps {p} by {k}; each is checked and normalized on the way in."""

    def __init__(self) -> None:
        self._items: dict[str, {E}] = {{}}

    def add(self, item: {E}) -> {E}:
        validate_{e}(item)
        item = normalize_{e}(item)
        if item.{k} in self._items:
            raise KeyError(f"duplicate {k}: {{item.{k}}}")
        self._items[item.{k}] = item
        return item'''
    table = registry_methods(d)
    return "\n\n".join([head] + [table[m][1] for m in methods])


def main_text(d, sep, have, registry):
    """The __main__ block: snippets whose functions the module has; None when none apply."""
    e, E, p = d["e"], d["E"], d["p"]
    body = []
    if "load" in have:
        body += [f"{p}, skipped = load_{p}(SAMPLE)", f'print(f"{{len({p})}} {p}, {{skipped}} line(s) skipped")']
        if "report" in have:
            body.append(f"print(report({p}))")
        elif "dump" in have:
            body.append(f"print(dump_{p}({p}))")
    if {"parse", "format"} <= have:
        body += ["for line in SAMPLE[1:-1]:", f"    print(format_{e}(parse_{e}(line)))"]
    if registry and "add_line" in registry:
        body += [f"registry = {E}Registry()", "for line in SAMPLE[1:-1]:", "    registry.add_line(line)"]
        if "to_json" in registry:
            body.append("print(registry.to_json())")
    if not body:
        return None
    rows = "\n".join(f'        "{sep.join([r[0], r[1], format(r[2], "g"), r[3]])}",' for r in d["rows"])
    return (f'if __name__ == "__main__":\n    SAMPLE = [\n        "# {d["k"]}, {d["l"]}, {d["v"]}, {d["g"]}",\n'
            f'{rows}\n        "broken line",\n    ]\n' + "\n".join("    " + line for line in body))


def make_module(rng, d, target, min_chars, max_chars):
    """A module over domain d in which the function of role `target` is defined once and called
    at least three times; None when this draw does not get there."""
    e, E, p, k, l, v, g = d["e"], d["E"], d["p"], d["k"], d["l"], d["v"], d["g"]
    sep = pick(rng, ",", ";", "|", "\\t")  # Python source: "\\t" writes a tab escape
    sep_name = {",": "commas", ";": "semicolons", "|": "pipes", "\\t": "tabs"}[sep]
    log = rng.random() < 0.4
    has_max = rng.random() < 0.6
    imports = ["from __future__ import annotations", "", "import json"] + (["import logging"] if log else [])
    imports += ["from dataclasses import dataclass",
                "from typing import Iterable, Iterator, Optional"]
    if log:
        imports += ["", "log = logging.getLogger(__name__)"]
    header = pick(rng, f"Utilities for {d['what']}", f"Loading, checking and summarising {d['what']}",
                  f"A small toolkit for {d['what']}", f"Helpers that read and report on {d['what']}")
    doc = (f'"""{header}.\n\nOne record per line, fields separated by {sep_name}: {k}, {l}, {v} ({d["unit"]})\n'
           f"and {g}. Blank lines and lines starting with '#' are skipped.\n\"\"\"")
    consts = [f'SEPARATOR = "{sep}"', "FIELD_COUNT = 4", f"DECIMALS = {pick(rng, 1, 2)}"]
    if has_max:
        consts.append(f"MAX_{v.upper()} = {pick(rng, 1e4, 5e4, 1e6):.1f}")
    cls = (f"@dataclass{pick(rng, '', '(frozen=True)')}\nclass {E}:\n    \"\"\"One of the {d['what']}.\"\"\"\n\n"
           f"    {k}: str\n    {l}: str\n    {v}: float\n    {g}: str")
    pool = function_pool(rng, d, log, has_max)
    regs = registry_methods(d)

    chosen = {target}
    registry = None  # list of method names, or None

    def closure(name):
        out, todo = set(), [name]
        while todo:
            n = todo.pop()
            if n not in out:
                out.add(n)
                todo += pool[n][1]
        return out

    def registry_deps(methods):
        deps = {"validate", "normalize"}
        for m in methods:
            deps |= set(regs[m][0])
        return deps

    def render(chosen, registry):
        tiers = {}
        for name in chosen:
            tiers.setdefault(pool[name][0], []).append(name)
        funcs = []
        for t in sorted(tiers):
            names = sorted(tiers[t])
            rng_order.shuffle(names)
            funcs += [pool[n][2] for n in names]
        if registry is not None:
            funcs.append(registry_text(d, registry))
        main = main_text(d, sep, chosen | set(registry or []), registry)
        blocks = [doc + "\n\n" + "\n".join(imports), "\n".join(consts), cls, *funcs] + ([main] if main else [])
        return "\n\n\n".join(blocks) + "\n"

    old = OLD_NAMES[target].format(e=e)
    # Candidates that call the target: pool functions and the registry (its add calls validate
    # and normalize; its methods the others).
    # The __main__ block calls parse and format when the module has both.
    users = [n for n in pool if target in pool[n][1]] + ["registry"] + (["main"] if target in ("parse", "format") else [])

    def with_user(name):
        if name == "registry":
            methods = [m for m in regs if target in regs[m][0]]
            deps = set()
            for dep in registry_deps(methods):
                deps |= closure(dep)
            return chosen | deps, methods
        if name == "main":
            return chosen | {"parse", "format"}, registry
        return chosen | closure(name), registry

    rng_order = random.Random(0)
    # Add callers of the target, one of the two cheapest each time, until it is used 3 times.
    while count_word(render(chosen, registry), old) < 4:
        options = []
        for name in users:
            trial, trial_reg = with_user(name)
            if (trial, trial_reg) != (chosen, registry):
                options.append((len(render(trial, trial_reg)), name, trial, trial_reg))
        if not options:
            return None
        options.sort(key=lambda o: o[:2])
        _, name, chosen, registry = rng.choice(options[:2])
        users.remove(name)
    # Fill up to the length target with other functions (and perhaps the registry).
    extras = [n for n in pool if n not in chosen] + ([] if registry is not None else ["registry"])
    rng.shuffle(extras)
    goal = rng.randint(min_chars, max_chars)
    for name in extras:
        if len(render(chosen, registry)) >= goal:
            break
        if name == "registry":
            trial_reg = [m for m in regs if rng.random() < 0.5]
            trial = set(chosen)
            for dep in registry_deps(trial_reg):
                trial |= closure(dep)
        else:
            trial_reg, trial = registry, chosen | closure(name)
        if len(render(trial, trial_reg)) <= max_chars:
            chosen, registry = trial, trial_reg
    rng_order = random.Random(rng.random())
    text = render(chosen, registry)
    if count_word(text, old) < 4 or len(text) > max_chars + 400:
        return None
    return text, old


def count_word(text, name):
    """Occurrences of name as a whole identifier (not inside a longer one)."""
    return len(re.findall(r"(?<![A-Za-z0-9_])" + re.escape(name) + r"(?![A-Za-z0-9_])", text))


def run_module(text, name):
    """Executes a generated module (as __main__ runs its sample) with its output discarded."""
    module = types.ModuleType(name)
    saved = sys.modules.get(name)
    sys.modules[name] = module  # dataclasses looks its module up there
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            exec(compile(text, "<generated>", "exec"), module.__dict__)
    finally:
        if saved is not None:
            sys.modules[name] = saved


def edit_prompts(rng, n, run_check, min_chars=2800, max_chars=3400):
    out = []
    seen = set()
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 100 * n:
            raise SystemExit("could not make enough distinct edit prompts")
        d = rng.choice(DOMAINS)
        target = rng.choice(TARGETS)
        made = make_module(rng, d, target, min_chars, max_chars)
        if made is None:
            continue
        text, old = made
        ast.parse(text)
        new = rng.choice(RENAMES[target]).format(e=d["e"], v=d["v"])
        # The old name must never sit inside a longer identifier, the new one must be fresh.
        if text.count(old) != count_word(text, old) or re.search(re.escape(new), text) or text in seen:
            continue
        seen.add(text)
        renamed = re.sub(r"(?<![A-Za-z0-9_])" + re.escape(old) + r"(?![A-Za-z0-9_])", new, text)
        ast.parse(renamed)
        if run_check:
            run_module(text, "__main__")
            run_module(renamed, "__main__")
        content = (f"{text_intro(rng)}\n\n```python\n{text}```\n\n"
                   f"Rename the function `{old}` to `{new}` everywhere and return the whole module byte for "
                   f"byte otherwise, in one ```python block, nothing else.")
        max_tokens = min(1200, math.ceil(1.1 * len(text) / 3.5))
        out.append({"id": f"edit-{len(out):03d}", "messages": [{"role": "user", "content": content}],
                    "max_tokens": max_tokens})
    return out


def text_intro(rng):
    return rng.choice(["Here is a Python module:", "This is one of our Python modules:",
                       "Below is a Python module from our code base.", "Consider this module:"])


def prose_prompts(rng, n):
    combos = [(c, ev, s) for c in CHARACTERS for ev in EVENTS for s in SETTINGS]
    rng.shuffle(combos)
    out = []
    for i, (c, ev, s) in enumerate(combos[:n]):
        out.append({"id": f"prose-{i:03d}", "messages": [{"role": "user",
                    "content": f"Write a short story about {c} who {ev}, {s}."}], "max_tokens": 256})
    return out


def code_prompts(rng):
    topics = list(dict.fromkeys(CODE_TOPICS))
    rng.shuffle(topics)
    return [{"id": f"code-{i:03d}", "messages": [{"role": "user",
             "content": f"Write a Python module implementing {y} with type hints and a doctest."}], "max_tokens": 256}
            for i, y in enumerate(topics)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "prompts"))
    ap.add_argument("--prose", type=int, default=96, help="prose prompts (default 96)")
    ap.add_argument("--edit", type=int, default=72, help="edit prompts (default 72)")
    ap.add_argument("--run-check", action="store_true", help="also execute every edit module (and its renamed form)")
    args = ap.parse_args()
    packs = {
        "prose": prose_prompts(random.Random(f"prose-{args.seed}"), args.prose),
        "code": code_prompts(random.Random(f"code-{args.seed}")),
        "edit": edit_prompts(random.Random(f"edit-{args.seed}"), args.edit, args.run_check),
    }
    os.makedirs(args.out, exist_ok=True)
    for name, prompts in packs.items():
        contents = [p["messages"][0]["content"] for p in prompts]
        assert len(set(contents)) == len(contents) >= 64, (name, len(set(contents)))
        path = os.path.join(args.out, f"{name}.jsonl")
        with open(path, "w", encoding="utf-8") as f:
            for p in prompts:
                f.write(json.dumps(p, ensure_ascii=False) + "\n")
        chars = [len(c) for c in contents]
        print(f"{path}: {len(prompts)} prompts, {os.path.getsize(path)} bytes, prompt chars "
              f"{min(chars)}..{max(chars)}, max_tokens {min(p['max_tokens'] for p in prompts)}.."
              f"{max(p['max_tokens'] for p in prompts)}")


if __name__ == "__main__":
    main()
