#!/usr/bin/env python3
"""Checks the JSON Schema corpus in tests/fixtures/json_schemas/ against the `jsonschema` package.

Each NNN_name.json holds {"schema": ..., "valid": [...], "invalid": [...]}. This script checks
that every schema is a well-formed draft 2020-12 schema using only keywords the engine
enforces under strict mode, that every valid instance validates (formats checked by
jsonschema's FormatChecker) and every invalid instance does not, and that the instances follow
the layout the engine generates, so a test feeding them to `zen grammar --check` tests the
schema and not the layout:

  - object keys in the order the schema's `properties` lists them (over allOf / $ref parts:
    the schema's own properties, then its $ref target's, then each allOf part's, in order);
  - in valid instances, keys the schema does not list only where additionalProperties is
    true or a schema (the engine generates no extra keys when it is absent), and after the
    listed ones;
  - in valid instances, no float where the schema only allows integers (json.dumps writes
    3.0, which the engine's integer rule does not produce), and no control characters other
    than \\n, \\t, \\r in strings (their \\u00XX spelling is a choice of case).

_unsupported.json holds [{"name", "schema", "keyword"}]: schemas the engine refuses under
strict mode; each must be a well-formed schema that uses its keyword.

Usage: tools/check_json_schemas.py [DIR] [--coverage]. Exits 1 listing every problem.
"""
import argparse
import collections
import itertools
import json
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_DIR = ROOT / "tests" / "fixtures" / "json_schemas"
NAME_RE = re.compile(r"^(\d{3})_[a-z0-9_]+\.json$")

# Keywords the engine refuses under strict mode: kept out of the main corpus (they belong in
# _unsupported.json).
# Keywords refused under strict only in some uses (_unsupported.json may name them): a length
# bound with a pattern too large to intersect exactly, oneOf branches that can both match.
REFUSED_IN_COMBINATION = {"maxLength", "minLength", "oneOf"}
UNSUPPORTED = {"patternProperties", "propertyNames", "if", "then", "else", "not", "uniqueItems", "contains",
               "minContains", "maxContains", "multipleOf", "dependentRequired", "dependentSchemas", "dependencies",
               "minProperties", "maxProperties", "unevaluatedProperties", "unevaluatedItems"}
# The formats the engine enforces; valid instances must be well-formed for them.
FORMATS = {"date-time", "date", "time", "uuid", "email", "uri"}
# Keywords whose value is a schema, a list of schemas, or a map of names to schemas.
SCHEMA_KW = {"items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else",
             "unevaluatedProperties", "unevaluatedItems"}
LIST_KW = {"allOf", "anyOf", "oneOf", "prefixItems"}
MAP_KW = {"properties", "$defs", "definitions", "patternProperties", "dependentSchemas"}
# Annotations and the keywords the engine enforces; anything else in a schema is reported.
KNOWN = {"$schema", "$id", "$comment", "$ref", "$defs", "definitions", "title", "description", "default", "examples",
         "deprecated", "readOnly", "writeOnly", "discriminator",
         "type", "enum", "const", "properties", "required", "additionalProperties", "allOf", "anyOf", "oneOf",
         "items", "prefixItems", "minItems", "maxItems", "minLength", "maxLength", "pattern", "format",
         "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"} | UNSUPPORTED


def _no_constants(name):
    raise ValueError(f"{name} is not JSON")


def _pairs(pairs):
    keys = [k for k, _ in pairs]
    dup = {k for k in keys if keys.count(k) > 1}
    if dup:
        raise ValueError(f"duplicate keys {sorted(dup)}")
    return dict(pairs)


def load_json(path):
    """json.load that refuses NaN/Infinity and duplicate keys (both would not round-trip)."""
    return json.loads(pathlib.Path(path).read_text(encoding="utf-8"), parse_constant=_no_constants, object_pairs_hook=_pairs)


def corpus_files(directory=DEFAULT_DIR):
    return sorted(p for p in pathlib.Path(directory).glob("*.json") if not p.name.startswith("_"))


def load_corpus(directory=DEFAULT_DIR):
    """[(path, doc)] for every schema file, in name order (load errors raise)."""
    return [(p, load_json(p)) for p in corpus_files(directory)]


def load_unsupported(directory=DEFAULT_DIR):
    return load_json(pathlib.Path(directory) / "_unsupported.json")


def walk_schema(schema, path=""):
    """Yields (json pointer, subschema) for schema and every subschema under it."""
    yield path, schema
    if not isinstance(schema, dict):
        return
    for kw, value in schema.items():
        if kw in SCHEMA_KW and isinstance(value, (dict, bool)):
            yield from walk_schema(value, f"{path}/{kw}")
        elif kw in LIST_KW and isinstance(value, list):
            for i, sub in enumerate(value):
                yield from walk_schema(sub, f"{path}/{kw}/{i}")
        elif kw in MAP_KW and isinstance(value, dict):
            for name, sub in value.items():
                yield from walk_schema(sub, f"{path}/{kw}/{name}")


def keywords_used(schema):
    """{keyword: [pointer, ...]} over every subschema."""
    used = collections.defaultdict(list)
    for path, sub in walk_schema(schema):
        if isinstance(sub, dict):
            for kw in sub:
                used[kw].append(path)
    return used


def _resolve(root, ref):
    if not ref.startswith("#"):
        raise KeyError(f"non-local $ref {ref!r}")
    node = root
    for part in [p for p in ref[1:].split("/") if p]:
        part = part.replace("~1", "/").replace("~0", "~")
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def has_recursion(schema):
    """Whether some $ref reaches itself again (a recursive schema: trees, threads, linked lists)."""
    graph = {}

    def refs_under(node):
        return {sub["$ref"] for _, sub in walk_schema(node) if isinstance(sub, dict) and "$ref" in sub}

    todo = [r for r in refs_under(schema)]
    while todo:
        ref = todo.pop()
        if ref in graph:
            continue
        try:
            graph[ref] = refs_under(_resolve(schema, ref))
        except (KeyError, IndexError, ValueError):
            graph[ref] = set()
        todo.extend(graph[ref])

    def reaches(start):
        seen, stack = set(), list(graph.get(start, ()))
        while stack:
            r = stack.pop()
            if r == start:
                return True
            if r not in seen:
                seen.add(r)
                stack.extend(graph.get(r, ()))
        return False

    return any(reaches(r) for r in graph)


def make_validator(schema):
    from jsonschema import Draft202012Validator
    return Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)


def missing_format_support():
    """Formats in FORMATS that this jsonschema install cannot check (optional packages missing)."""
    from jsonschema import Draft202012Validator
    return sorted(FORMATS - set(Draft202012Validator.FORMAT_CHECKER.checkers))


# --- layout ---------------------------------------------------------------------------------

def _parts(schema, root, depth=0):
    """The schemas that apply together: schema, its $ref target, its allOf parts (recursively)."""
    if not isinstance(schema, dict) or depth > 32:
        return []
    out = [schema]
    if "$ref" in schema:
        out += _parts(_resolve(root, schema["$ref"]), root, depth + 1)
    for sub in schema.get("allOf", []):
        out += _parts(sub, root, depth + 1)
    return out


def _conjunctions(schemas, root, depth=0):
    """Expands anyOf/oneOf choices: a list of alternatives, each a list of schemas that apply
    together (disjunctive normal form, one level of nesting at a time)."""
    parts = [p for s in schemas for p in _parts(s, root)]
    choices = [p.get("anyOf") or p.get("oneOf") for p in parts if p.get("anyOf") or p.get("oneOf")]
    if not choices or depth > 8:
        return [parts]
    out = []
    for pick in itertools.product(*choices):
        for extra in _conjunctions(list(pick), root, depth + 1):
            out.append(parts + extra)
    return out[:256]


def _types(parts):
    types = None
    for p in parts:
        if "type" in p:
            t = {p["type"]} if isinstance(p["type"], str) else set(p["type"])
            types = t if types is None else types & t
    return types


def _layout(inst, schemas, root, validator, valid, where):
    """Problems with inst's layout under the conjunction of schemas ([] when fine)."""
    alternatives = _conjunctions(schemas, root)
    if valid:
        ok = [a for a in alternatives if all(validator.evolve(schema=p).is_valid(inst) for p in a)]
        alternatives = ok or alternatives
    best = None
    for parts in alternatives:
        problems = _layout_parts(inst, parts, root, validator, valid, where)
        if not problems:
            return []
        if best is None or len(problems) < len(best):
            best = problems
    return best or []


def _layout_parts(inst, parts, root, validator, valid, where):
    problems = []
    if any(p is False for p in parts):
        return problems
    literals = [p["enum"] if "enum" in p else [p["const"]] for p in parts if "enum" in p or "const" in p]
    if literals:
        # The engine writes an enum / const value as the schema spells it (2 and 2.0 differ,
        # and so do key orders).
        text = _dumps(inst)
        if valid and not any(text == _dumps(v) for values in literals for v in values):
            problems.append(f"{where}: {_short(inst)} is not written exactly as the enum/const value it equals")
        return problems
    if isinstance(inst, dict):
        order = []
        for p in parts:
            for k in p.get("properties", {}):
                if k not in order:
                    order.append(k)
        # Extra keys: where additionalProperties is true or a schema, or where no part says
        # anything about objects (an unconstrained value: any JSON). A bare {"type": "object"}
        # is not assumed to allow them.
        free = not any(k in p for p in parts for k in ("type", "properties", "additionalProperties", "required"))
        extras_allowed = free or any(p.get("additionalProperties") not in (None, False) for p in parts)
        last, seen_extra = -1, None
        for k in inst:
            if k in order:
                i = order.index(k)
                if i < last:
                    problems.append(f"{where}: key {k!r} out of schema property order {order}")
                last = max(last, i)
                if valid and seen_extra is not None:
                    problems.append(f"{where}: listed key {k!r} after the unlisted key {seen_extra!r}")
            elif valid:
                seen_extra = k
                if not extras_allowed:
                    problems.append(f"{where}: key {k!r} is not a listed property and additionalProperties "
                                    "is neither true nor a schema (the engine generates no extra keys)")
        for k, v in inst.items():
            subs = [p["properties"][k] for p in parts if k in p.get("properties", {})]
            if not subs:
                subs = [p["additionalProperties"] for p in parts if isinstance(p.get("additionalProperties"), dict)]
            if subs:
                problems += _layout(v, subs, root, validator, valid, f"{where}/{k}")
    elif isinstance(inst, list):
        for i, v in enumerate(inst):
            subs = []
            for p in parts:
                prefix = p.get("prefixItems", [])
                if i < len(prefix):
                    subs.append(prefix[i])
                elif isinstance(p.get("items"), dict):
                    subs.append(p["items"])
            if subs:
                problems += _layout(v, subs, root, validator, valid, f"{where}/{i}")
    elif valid and isinstance(inst, float):
        types = _types(parts)
        if types is not None and "integer" in types and "number" not in types:
            problems.append(f"{where}: {inst!r} is written as a float but the schema allows only integers")
    elif valid and isinstance(inst, str):
        bad = sorted({hex(ord(c)) for c in inst if ord(c) < 0x20 and c not in "\n\t\r"})
        if bad:
            problems.append(f"{where}: control characters {bad} (their \\u00XX spelling is ambiguous)")
    return problems


def layout_problems(inst, schema, valid, validator=None):
    validator = validator or make_validator(schema)
    return _layout(inst, [schema], schema, validator, valid, "#")


def _one_of_as_any_of(node):
    """A copy of a schema with every oneOf keyword renamed anyOf (data under enum/const/
    default/examples left alone)."""
    if isinstance(node, list):
        return [_one_of_as_any_of(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for k, v in node.items():
        if k in ("enum", "const", "default", "examples"):
            out[k] = v
        elif k in MAP_KW and isinstance(v, dict):
            out[k] = {name: _one_of_as_any_of(sub) for name, sub in v.items()}
        else:
            out["anyOf" if k == "oneOf" else k] = _one_of_as_any_of(v)
    return out


# --- checks ---------------------------------------------------------------------------------

def _dumps(inst):
    """The text the test feeds the engine for an instance."""
    return json.dumps(inst, ensure_ascii=False)


def _short(inst, n=100):
    s = _dumps(inst)
    return s if len(s) <= n else s[:n - 3] + "..."


def check_doc(name, doc):
    """Problems with one corpus file's contents."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError
    problems = []
    if not isinstance(doc, dict) or set(doc) != {"schema", "valid", "invalid"}:
        return [f"{name}: expected exactly the keys schema, valid, invalid"]
    schema = doc["schema"]
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as e:
        return [f"{name}: not a valid draft 2020-12 schema: {e.message}"]
    used = keywords_used(schema)
    for kw in sorted(set(used) & UNSUPPORTED):
        problems.append(f"{name}: uses {kw!r} (refused under strict mode: belongs in _unsupported.json) at {used[kw][0] or '#'}")
    for kw in sorted(set(used) - KNOWN):
        problems.append(f"{name}: unknown keyword {kw!r} at {used[kw][0] or '#'}")
    for path, sub in walk_schema(schema):
        if isinstance(sub, dict) and "format" in sub and sub["format"] not in FORMATS:
            problems.append(f"{name}: format {sub['format']!r} at {path or '#'} is not one the engine enforces {sorted(FORMATS)}")
        if isinstance(sub, dict) and "$ref" in sub:
            try:
                _resolve(schema, sub["$ref"])
            except (KeyError, IndexError, ValueError) as e:
                problems.append(f"{name}: $ref {sub['$ref']!r} at {path or '#'} does not resolve ({e})")
    for key in ("valid", "invalid"):
        if not isinstance(doc[key], list) or len(doc[key]) < 2:
            problems.append(f"{name}: needs at least 2 {key} instances")
    if problems:
        return problems
    validator = make_validator(schema)
    for i, inst in enumerate(doc["valid"]):
        errors = list(validator.iter_errors(inst))
        for e in errors[:3]:
            at = "/".join(map(str, e.absolute_path))
            problems.append(f"{name}: valid[{i}] does not validate: {e.message} (at /{at})")
        if not errors:
            problems += [f"{name}: valid[{i}]: {p}" for p in layout_problems(inst, schema, True, validator)]
    # A grammar cannot check that exactly one oneOf branch matches; invalid instances must stay
    # invalid when oneOf is read as anyOf.
    relaxed = make_validator(_one_of_as_any_of(schema)) if "oneOf" in used else validator
    seen = set()
    for i, inst in enumerate(doc["invalid"]):
        text = _dumps(inst)
        if text in seen:
            problems.append(f"{name}: invalid[{i}] repeats an earlier instance")
        seen.add(text)
        if validator.is_valid(inst):
            problems.append(f"{name}: invalid[{i}] validates: {_short(inst)}")
        elif relaxed.is_valid(inst):
            problems.append(f"{name}: invalid[{i}] is invalid only because it matches more than one oneOf branch")
        else:
            problems += [f"{name}: invalid[{i}]: {p}" for p in layout_problems(inst, schema, False, validator)]
    texts = [_dumps(v) for v in doc["valid"]]
    if len(set(texts)) != len(texts):
        problems.append(f"{name}: repeated valid instances")
    return problems


def check_corpus(directory=DEFAULT_DIR, min_schemas=1):
    """Every problem in the corpus directory, as readable lines ([] when all is well)."""
    directory = pathlib.Path(directory)
    problems = []
    missing = missing_format_support()
    if missing:
        problems.append(f"jsonschema cannot check the formats {missing}: install jsonschema[format-nongpl] "
                        "(tools/requirements.txt)")
    files = corpus_files(directory)
    if len(files) < min_schemas:
        problems.append(f"{directory}: {len(files)} schema files, expected at least {min_schemas}")
    numbers = collections.Counter()
    for path in files:
        m = NAME_RE.match(path.name)
        if not m:
            problems.append(f"{path.name}: name is not NNN_short_name.json")
        else:
            numbers[m.group(1)] += 1
        try:
            doc = load_json(path)
        except ValueError as e:
            problems.append(f"{path.name}: {e}")
            continue
        problems += check_doc(path.name, doc)
    problems += [f"number {n} used by {c} files" for n, c in sorted(numbers.items()) if c > 1]
    problems += check_unsupported(directory)
    return problems


def check_unsupported(directory=DEFAULT_DIR):
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError
    path = pathlib.Path(directory) / "_unsupported.json"
    if not path.exists():
        return [f"{path}: missing"]
    try:
        entries = load_json(path)
    except ValueError as e:
        return [f"_unsupported.json: {e}"]
    problems, names = [], set()
    if not isinstance(entries, list) or not entries:
        return ["_unsupported.json: expected a non-empty list"]
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or set(e) != {"name", "schema", "keyword"}:
            problems.append(f"_unsupported.json[{i}]: expected exactly the keys name, schema, keyword")
            continue
        if e["name"] in names:
            problems.append(f"_unsupported.json[{i}]: name {e['name']!r} repeats")
        names.add(e["name"])
        try:
            Draft202012Validator.check_schema(e["schema"])
        except SchemaError as err:
            problems.append(f"_unsupported.json {e['name']}: not a valid schema: {err.message}")
            continue
        used = keywords_used(e["schema"])
        if e["keyword"] not in used:
            problems.append(f"_unsupported.json {e['name']}: does not use its keyword {e['keyword']!r}")
        if e["keyword"] not in UNSUPPORTED | REFUSED_IN_COMBINATION:
            problems.append(f"_unsupported.json {e['name']}: {e['keyword']!r} is not in the unsupported list")
        others = sorted((set(used) & UNSUPPORTED) - {e["keyword"]})
        if others and not (e["keyword"] in ("if", "then", "else") and set(others) <= {"if", "then", "else"}):
            problems.append(f"_unsupported.json {e['name']}: also uses {others} (one refused keyword per entry)")
    return problems


# --- coverage -------------------------------------------------------------------------------

def features(schema, docs_valid=()):
    """The set of features a schema exercises (for the coverage table)."""
    f = set()
    for path, sub in walk_schema(schema):
        if not isinstance(sub, dict):
            continue
        for kw in sub:
            if kw in ("title", "description", "default", "examples", "$schema", "$comment"):
                continue
            f.add(kw)
        t = sub.get("type")
        if isinstance(t, list):
            f.add("type: [..., null]" if "null" in t else "type: [...]")
        if "properties" in sub:
            f.add("additionalProperties absent" if "additionalProperties" not in sub
                  else "additionalProperties: false" if sub["additionalProperties"] is False
                  else "additionalProperties: true" if sub["additionalProperties"] is True
                  else "additionalProperties: schema")
        elif isinstance(sub.get("additionalProperties"), dict):
            f.add("additionalProperties: schema (map)")
        elif sub.get("additionalProperties") is True:
            f.add("additionalProperties: true")
        if "format" in sub:
            f.add(f"format: {sub['format']}")
        for kw in ("anyOf", "oneOf"):
            if any(isinstance(b, dict) and b.get("type") == "null" for b in sub.get(kw, [])):
                f.add(f"{kw} with null (Optional)")
        if "$ref" in sub and any(k not in ("$ref",) for k in sub):
            f.add("$ref with sibling keywords")
        items = sub.get("items")
        if isinstance(items, dict):
            target = _resolve(schema, items["$ref"]) if "$ref" in items else items
            if isinstance(target, dict) and (target.get("type") == "object" or "properties" in target):
                f.add("array of objects")
            if isinstance(target, dict) and target.get("type") == "array":
                f.add("array of arrays")
        if path.count("/items") >= 2 or path.count("/properties") >= 3:
            f.add("deep nesting (3+ levels)")
    if has_recursion(schema):
        f.add("recursion ($ref cycle)")
    top = schema.get("type") if isinstance(schema, dict) else None
    if top not in (None, "object"):
        f.add("top-level non-object")
    return f


COVERAGE_ORDER = [
    "type", "type: [..., null]", "properties", "required", "additionalProperties: false", "additionalProperties absent",
    "additionalProperties: true", "additionalProperties: schema", "additionalProperties: schema (map)", "enum", "const",
    "anyOf", "anyOf with null (Optional)", "oneOf", "oneOf with null (Optional)", "allOf", "$ref", "$ref with sibling keywords",
    "$defs", "definitions", "recursion ($ref cycle)", "items", "prefixItems", "minItems", "maxItems", "array of objects",
    "array of arrays", "deep nesting (3+ levels)", "minLength", "maxLength", "pattern", "format", "format: date-time",
    "format: date", "format: time", "format: uuid", "format: email", "format: uri", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "discriminator", "top-level non-object",
]


def coverage(corpus):
    counts = collections.Counter()
    for _, doc in corpus:
        counts.update(features(doc["schema"]))
    return counts


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("directory", nargs="?", default=str(DEFAULT_DIR))
    ap.add_argument("--coverage", action="store_true", help="print how many schemas exercise each keyword")
    args = ap.parse_args()
    try:
        import jsonschema  # noqa: F401
    except ImportError:
        print("the jsonschema package is missing: pip install -r tools/requirements.txt", file=sys.stderr)
        return 2
    problems = check_corpus(args.directory)
    corpus = []
    for p in corpus_files(args.directory):
        try:
            corpus.append((p, load_json(p)))
        except ValueError:
            pass
    n_valid = sum(len(d.get("valid", [])) for _, d in corpus)
    n_invalid = sum(len(d.get("invalid", [])) for _, d in corpus)
    if args.coverage:
        counts = coverage(corpus)
        width = max(map(len, COVERAGE_ORDER))
        print(f"{'feature':<{width}}  schemas")
        for k in COVERAGE_ORDER:
            print(f"{k:<{width}}  {counts.get(k, 0)}")
        rest = sorted(set(counts) - set(COVERAGE_ORDER) - {"additionalProperties"})
        if rest:
            print("also: " + ", ".join(f"{k} {counts[k]}" for k in rest))
    for p in problems:
        print(p)
    size = sum(p.stat().st_size for p in pathlib.Path(args.directory).glob("*.json"))
    print(f"{len(corpus)} schemas, {n_valid} valid and {n_invalid} invalid instances, {size / 1024:.0f} KiB: "
          f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
