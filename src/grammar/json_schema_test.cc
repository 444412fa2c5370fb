// JSON Schema -> grammar: for each schema, hand-written texts in the canonical layout that
// validate are accepted and ones that do not are rejected (by the reference simulation,
// accepts()); refused schemas name their keyword; pathological schemas fail fast.
#include "grammar/json_schema.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "base/error.h"

namespace zen::grammar {
namespace {

using Json = nlohmann::ordered_json;

std::shared_ptr<const Grammar> compile(const Json& schema, const JsonSchemaOptions& options = {}) {
  GrammarBuilder b;
  const int32_t root = json_schema_rules(b, schema, options);
  return b.build(root);
}

std::shared_ptr<const Grammar> compile(const std::string& schema, const JsonSchemaOptions& options = {}) {
  return compile(Json::parse(schema), options);
}

// Every text in `valid` is accepted and every text in `invalid` rejected.
void expect_language(const std::string& schema, const std::vector<std::string>& valid,
                     const std::vector<std::string>& invalid, const JsonSchemaOptions& options = {}) {
  SCOPED_TRACE(schema);
  const auto g = compile(schema, options);
  for (const auto& t : valid) EXPECT_TRUE(accepts(*g, t)) << "should accept: " << t;
  for (const auto& t : invalid) EXPECT_FALSE(accepts(*g, t)) << "should reject: " << t;
}

// The schema is refused with a SchemaError naming `keyword`.
void expect_refused(const std::string& schema, const std::string& keyword, const JsonSchemaOptions& options = {}) {
  SCOPED_TRACE(schema);
  try {
    compile(schema, options);
    ADD_FAILURE() << "expected a SchemaError for " << keyword;
  } catch (const SchemaError& e) {
    EXPECT_EQ(e.keyword, keyword) << e.what() << " at " << e.path;
  }
}

JsonSchemaOptions lenient() {
  JsonSchemaOptions o;
  o.strict = false;
  return o;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// ---- free JSON -------------------------------------------------------------------------------

TEST(JsonSchemaFree, AnyValueInCanonicalLayout) {
  GrammarBuilder b;
  const auto g = b.build(json_value_rules(b));
  for (const char* t : {"{}", "[]", "0", "-1.5e+3", "true", "null", "\"x\"", "{\"a\": [1, 2.5, {\"b\": null}], \"c\": \"\"}",
                        "[[], {}, [1]]"})
    EXPECT_TRUE(accepts(*g, t)) << t;
  for (const char* t : {"{\"a\":1}", "[1,2]", "[1 ,2]", "01", "1.", ".5", "+1", "[1, ]", "{\"a\": 1, }", "tru", "\"a\nb\"",
                        " 1", "[ 1]"})
    EXPECT_FALSE(accepts(*g, t)) << t;
}

TEST(JsonSchemaFree, ObjectAtTopLevel) {
  GrammarBuilder b;
  const auto g = b.build(json_object_rules(b));
  for (const char* t : {"{}", "{\"a\": [1, {\"b\": 2}]}"}) EXPECT_TRUE(accepts(*g, t)) << t;
  for (const char* t : {"[]", "1", "\"a\"", "null"}) EXPECT_FALSE(accepts(*g, t)) << t;
}

TEST(JsonSchemaFree, AnyWhitespaceIsBounded) {
  JsonSchemaOptions o;
  o.any_whitespace = true;
  o.max_whitespace = 4;
  GrammarBuilder b;
  const auto g = b.build(json_value_rules(b, o));
  for (const char* t : {"{ \"a\" :\n[ 1 ,2 ]\t}", "{\"a\":1}", "[1,2]", "[    ]", "{    \"a\": 1}"}) EXPECT_TRUE(accepts(*g, t)) << t;
  for (const char* t : {"[     1]", "{\"a\"     : 1}", "[1 , 2 ,]"}) EXPECT_FALSE(accepts(*g, t)) << t;
}

// ---- primitives ------------------------------------------------------------------------------

TEST(JsonSchemaTypes, Strings) {
  expect_language(R"({"type": "string"})",
                  {R"("")", R"("héllo")", R"("a\"b\\c\/\n\t\u00e9\uD83D\uDE00")", R"("日本")", "\"\x7f\""},
                  {R"("a)", R"("\x")", R"("\ud83d")", "\"a\nb\"", R"("\u12")", "\"\x01\"", "1", "null"});
}

TEST(JsonSchemaTypes, IntegersNumbersBooleansNull) {
  expect_language(R"({"type": "integer"})", {"0", "-12", "12345678901234567890"}, {"01", "1.0", "1e3", "-", "+1", "\"1\""});
  expect_language(R"({"type": "number"})", {"0", "-0.0", "1.5e-3", "2E+10", "10", "-3.25"}, {".5", "1.", "+1", "01", "1e", "--1"});
  expect_language(R"({"type": "boolean"})", {"true", "false"}, {"True", "1", "null"});
  expect_language(R"({"type": "null"})", {"null"}, {"None", "false"});
}

TEST(JsonSchemaTypes, TypeListsAndNullable) {
  expect_language(R"({"type": ["string", "null"]})", {"null", R"("a")"}, {"1", "false"});
  expect_language(R"({"type": "integer", "nullable": true})", {"null", "3"}, {"1.5", R"("3")"});
  expect_language(R"({"type": ["integer", "number"]})", {"1", "1.5"}, {"null"});
}

TEST(JsonSchemaTypes, TrueFalseAndEmptySchemas) {
  expect_language("true", {"1", "{\"a\": [null]}"}, {"{\"a\":1}"});
  expect_language("{}", {"\"s\"", "[]"}, {"[1,2]"});
  expect_language(R"({"type": "object", "properties": {"a": false, "b": {"type": "integer"}}})", {"{}", "{\"b\": 1}"},
                  {"{\"a\": 1}", "{\"a\": 1, \"b\": 1}"});
  // A description changes nothing.
  expect_language(R"({"type": "integer", "description": "d", "title": "t", "default": 3, "examples": [1]})", {"3"},
                  {"\"3\""});
}

TEST(JsonSchemaTypes, NoTypeMeansTheTypesOfTheKeywords) {
  expect_language(R"({"properties": {"a": {"type": "integer"}}})", {"{\"a\": 1}", "{}"}, {"1", "\"a\""});
  expect_language(R"({"minLength": 2})", {"\"ab\""}, {"\"a\"", "12"});
  expect_language(R"({"minimum": 2})", {"2", "2.5"}, {"1", "\"2\""});
}

// ---- objects ---------------------------------------------------------------------------------

TEST(JsonSchemaObjects, RequiredAndOptionalInSchemaOrder) {
  const std::string schema = R"({"type": "object", "properties": {
      "a": {"type": "integer"}, "b": {"type": "boolean"}, "c": {"type": "string"}, "d": {"type": "null"}},
      "required": ["c", "a"], "additionalProperties": false})";
  expect_language(schema,
                  {R"({"a": 1, "c": "x"})", R"({"a": 1, "b": true, "c": "x"})", R"({"a": 1, "c": "x", "d": null})",
                   R"({"a": 1, "b": false, "c": "", "d": null})"},
                  {R"({"c": "x", "a": 1})", R"({"a": 1})", R"({"a":1,"c":"x"})", R"({"a": 1, "c": "x", "e": 1})",
                   R"({"b": true, "a": 1, "c": "x"})", R"({"a": 1, "c": "x", })", R"({, "a": 1, "c": "x"})", "{}"});
}

TEST(JsonSchemaObjects, OptionalBeforeFirstRequired) {
  expect_language(R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"},
                      "c": {"type": "integer"}}, "required": ["c"]})",
                  {R"({"c": 3})", R"({"a": 1, "c": 3})", R"({"b": 2, "c": 3})", R"({"a": 1, "b": 2, "c": 3})"},
                  {R"({"a": 1, })", R"({"a": 1, "b": 2})", R"({"b": 2, "a": 1, "c": 3})", "{}"});
}

TEST(JsonSchemaObjects, AllOptional) {
  expect_language(R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"},
                      "c": {"type": "integer"}}})",
                  {"{}", R"({"b": 2})", R"({"a": 1, "c": 3})", R"({"a": 1, "b": 2, "c": 3})", R"({"c": 3})"},
                  {R"({, "b": 2})", R"({"b": 2, "a": 1})", R"({"a": 1, })", R"({"a": 1, "a": 1})", R"({"d": 1})"});
}

TEST(JsonSchemaObjects, ManyOptionalPropertiesUseAChain) {
  Json props = Json::object();
  for (int i = 0; i < 40; ++i) props["p" + std::to_string(i)] = {{"type", "integer"}};
  const Json schema = {{"type", "object"}, {"properties", props}};
  const auto g = compile(schema);
  for (const char* t : {"{}", R"({"p39": 1})", R"({"p0": 1, "p20": 2, "p39": 3})", R"({"p5": 1, "p6": 2})"})
    EXPECT_TRUE(accepts(*g, t)) << t;
  for (const char* t : {R"({"p20": 1, "p0": 2})", R"({"p40": 1})", R"({"p1": 1, })", R"({, "p1": 1})"})
    EXPECT_FALSE(accepts(*g, t)) << t;
}

TEST(JsonSchemaObjects, AdditionalPropertiesAbsentAllowsOnlyListedKeys) {
  expect_language(R"({"type": "object", "properties": {"a": {"type": "integer"}}})", {"{}", R"({"a": 1})"},
                  {R"({"b": 1})", R"({"a": 1, "b": 1})"});
  // No properties listed: any object.
  expect_language(R"({"type": "object"})", {"{}", R"({"x": [1], "y": {}})"}, {"[]", R"({"x":1})"});
  // Required keys that are not listed are generated after the listed ones, with any value.
  expect_language(R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["b"]})",
                  {R"({"b": [1]})", R"({"a": 1, "b": "x"})"}, {"{}", R"({"a": 1})", R"({"b": 1, "a": 1})"});
}

TEST(JsonSchemaObjects, AdditionalPropertiesTrueComeAfterAndDifferFromListedKeys) {
  expect_language(R"({"type": "object", "properties": {"a": {"type": "integer"}, "b\"c": {"type": "integer"}},
                      "additionalProperties": true})",
                  {"{}", R"({"a": 1, "zz": [1]})", R"({"zz": 1})", R"({"ab": 1})", R"({"": 1})", R"({"b\"cd": 1})",
                   R"({"b": 1, "x": {"y": 2}})", R"({"a": 1, "b\"c": 2, "a2": null})", R"({"\n": 1})"},
                  {R"({"zz": 1, "a": 1})", R"({"a": 1, "a": 2})", R"({"a": "x"})", R"({"b\"c": "x"})",
                   R"({"x": 1, "b\"c": 2})", R"({"\u0061": 1})"});
}

TEST(JsonSchemaObjects, ExtraKeysAvoidNonAsciiListedKeys) {
  expect_language(R"({"type": "object", "properties": {"é": {"type": "integer"}, "日本": {"type": "integer"}},
                      "additionalProperties": {"type": "string"}})",
                  {R"({"é": 1, "éa": "x"})", R"({"e": "x"})", R"({"日": "x", "本": "y"})"},
                  // Extra keys are spelled as json.dumps spells them: é itself, never \u00e9.
                  {R"({"é": "x"})", R"({"日本": "x"})", R"({"x": "y", "é": 1})", R"({"\u00e9": "x"})"});
}

TEST(JsonSchemaObjects, ThousandsOfListedKeysWithExtrasCompileFast) {
  Json props = Json::object();
  for (int i = 0; i < 1000; ++i) props["property_name_" + std::to_string(i)] = {{"type", "string"}};
  const Json schema = {{"type", "object"}, {"properties", props}, {"additionalProperties", {{"type", "integer"}}}};
  const auto start = std::chrono::steady_clock::now();
  const auto g = compile(schema);
  EXPECT_LT(seconds_since(start), 20.0);  // generous for sanitizer builds
  for (const char* t : {R"({"property_name_7": "x", "property_name_999": "y"})", R"({"property_name_1000": 1})",
                        R"({"property_name_": 1, "other": 2})"})
    EXPECT_TRUE(accepts(*g, t)) << t;
  for (const char* t : {R"({"property_name_5": 1})", R"({"other": 1, "property_name_1": "x"})"}) EXPECT_FALSE(accepts(*g, t)) << t;
}

TEST(JsonSchemaObjects, AdditionalPropertiesSchema) {
  expect_language(R"({"type": "object", "additionalProperties": {"type": "integer"}})",
                  {"{}", R"({"x": 1, "y": 2})", R"({"\u00e9": 3})"}, {R"({"x": "s"})", R"({"x": 1, "y": null})"});
  expect_language(R"({"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"],
                      "additionalProperties": {"type": "number", "minimum": 0}})",
                  {R"({"id": "a"})", R"({"id": "a", "w": 1.5, "h": 0})"},
                  {R"({"id": "a", "w": -1})", R"({"w": 1, "id": "a"})", R"({"id": "a", "id": 1})"});
}

TEST(JsonSchemaObjects, NestedObjectsAndArrays) {
  expect_language(R"({"type": "object", "properties": {
      "user": {"type": "object", "properties": {"name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}},
               "required": ["name", "tags"], "additionalProperties": false}},
      "required": ["user"], "additionalProperties": false})",
                  {R"({"user": {"name": "x", "tags": []}})", R"({"user": {"name": "x", "tags": ["a", "b"]}})"},
                  {R"({"user": {"name": "x"}})", R"({"user": {"name": "x", "tags": [1]}})", R"({"user": {"tags": [], "name": "x"}})"});
}

// ---- enum / const ----------------------------------------------------------------------------

TEST(JsonSchemaEnum, AnyJsonValuesInJsonDumpsSpelling) {
  expect_language(R"({"enum": ["a", 1, null, {"k": [1, 2], "m": "é"}, 2.5, true, "a\"b\n", []]})",
                  {R"("a")", "1", "null", R"({"k": [1, 2], "m": "é"})", "2.5", "true", R"("a\"b\n")", "[]"},
                  {R"("b")", R"({"k":[1,2],"m":"é"})", R"({"m": "é", "k": [1, 2]})", "2", "false", "1.0", R"("a")"
                   "x"});
  expect_language(R"({"const": "fixed"})", {R"("fixed")"}, {R"("other")", R"("fixe")", R"("fixedd")"});
  expect_language(R"({"const": {"a": [true, null]}})", {R"({"a": [true, null]})"}, {R"({"a":[true,null]})"});
}

TEST(JsonSchemaEnum, ValuesFilteredByOtherKeywords) {
  expect_language(R"({"type": "string", "enum": ["a", 1, "bcd"], "maxLength": 2})", {R"("a")"}, {"1", R"("bcd")"});
  expect_language(R"({"type": "integer", "enum": [1, 2.5, 3, 10], "maximum": 5})", {"1", "3"}, {"2.5", "10"});
  expect_language(R"({"anyOf": [{"type": "string", "enum": [1, 2]}, {"type": "null"}]})", {"null"}, {"1", "2"});
  // Checked against a pattern, a format and array keywords through the schema's own grammar.
  expect_language(R"({"type": "string", "enum": ["ab", "ba", "a-1"], "pattern": "^a"})", {R"("ab")", R"("a-1")"}, {R"("ba")"});
  expect_language(R"({"enum": ["2024-01-01", "2024-13-01", 5], "format": "date"})", {R"("2024-01-01")", "5"}, {R"("2024-13-01")"});
  expect_language(R"({"enum": [[1, 2], [1, "x"], [], "s"], "items": {"type": "integer"}, "minItems": 1})", {"[1, 2]", R"("s")"},
                  {R"([1, "x"])", "[]"});
  expect_refused(R"({"type": "object", "enum": [{"a": 1}], "properties": {"a": {"type": "integer"}}})", "properties");
}

TEST(JsonSchemaEnum, PrefixesAndPrefixedValues) {
  expect_language(R"({"enum": ["a", "ab", "abc", "b", "", "abd"]})", {R"("a")", R"("ab")", R"("abc")", R"("b")", R"("")", R"("abd")"},
                  {R"("abe")", R"("abcd")", R"("c")"});
}

TEST(JsonSchemaEnum, AnyWhitespaceInStructuredValues) {
  JsonSchemaOptions o;
  o.any_whitespace = true;
  expect_language(R"({"enum": [{"a": [1, 2]}, "x"]})", {R"({"a": [1, 2]})", R"({"a":[1,2]})", R"({ "a" : [ 1 ,2 ] })", R"("x")"},
                  {R"({"a": [2, 1]})", R"( "x")"}, o);
}

TEST(JsonSchemaEnum, HundredThousandValuesCompileFast) {
  Json values = Json::array();
  for (int i = 0; i < 100000; ++i) values.push_back("value-" + std::to_string(i * 7919 % 1000003));
  const auto start = std::chrono::steady_clock::now();
  const auto g = compile(Json{{"enum", values}});
  EXPECT_LT(seconds_since(start), 20.0);
  EXPECT_TRUE(accepts(*g, "\"value-0\""));
  EXPECT_TRUE(accepts(*g, "\"value-" + std::to_string(99999L * 7919 % 1000003) + "\""));
  EXPECT_FALSE(accepts(*g, "\"value-1\""));
  EXPECT_FALSE(accepts(*g, "\"value-\""));
}

// ---- combinators -----------------------------------------------------------------------------

TEST(JsonSchemaCombinators, AnyOfAndOneOf) {
  expect_language(R"({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 1}]})", {"1", R"("a")"},
                  {R"("ab")", "null"});
  // Not strict, oneOf is read as anyOf: 1 matches both branches and is still accepted.
  expect_language(R"({"oneOf": [{"type": "integer"}, {"type": "number", "minimum": 0}]})", {"1", "-1", "0.5"},
                  {"-0.5", "null"}, lenient());
  // Strict: overlapping branches are refused; branches that cannot both match are exact.
  expect_refused(R"({"oneOf": [{"type": "integer"}, {"type": "number", "minimum": 0}]})", "oneOf");
  expect_refused(R"({"oneOf": [{"type": "object"}, {"type": "object", "properties": {"a": {"type": "integer"}}}]})", "oneOf");
  expect_language(R"({"oneOf": [{"type": "integer"}, {"type": "string"}, {"type": "null"}]})", {"1", R"("a")", "null"},
                  {"1.5", "true"});
  expect_language(R"({"oneOf": [{"enum": ["a", "b"]}, {"enum": ["c"]}]})", {R"("a")", R"("c")"}, {R"("d")"});
  expect_language(R"({"oneOf": [
      {"type": "object", "properties": {"kind": {"const": "cat"}, "lives": {"type": "integer"}}, "required": ["kind", "lives"]},
      {"type": "object", "properties": {"kind": {"const": "dog"}, "good": {"type": "boolean"}}, "required": ["kind", "good"]}]})",
                  {R"({"kind": "cat", "lives": 9})", R"({"kind": "dog", "good": true})"}, {R"({"kind": "cat", "good": true})"});
  expect_language(R"({"oneOf": [
      {"type": "object", "properties": {"at": {"type": "string"}}, "required": ["at"], "additionalProperties": false},
      {"type": "object", "properties": {"in": {"type": "integer"}}, "required": ["in"], "additionalProperties": false}]})",
                  {R"({"at": "x"})", R"({"in": 3})"}, {R"({"at": 3})", "{}"});
}

TEST(JsonSchemaCombinators, AllOfMergesPropertiesRequiredTypesAndBounds) {
  expect_language(R"({"allOf": [
      {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0}}, "required": ["a"]},
      {"properties": {"b": {"type": "string"}, "a": {"maximum": 10}}, "required": ["b"]}]})",
                  {R"({"a": 0, "b": "x"})", R"({"a": 10, "b": ""})"},
                  {R"({"a": 11, "b": "x"})", R"({"a": -1, "b": "x"})", R"({"a": 1})", R"({"b": "x", "a": 1})"});
  expect_language(R"({"allOf": [{"type": ["integer", "string"]}, {"type": ["number", "null"]}]})", {"3"},
                  {"3.5", "null", R"("s")"});
  expect_language(R"({"allOf": [{"minimum": 2}, {"exclusiveMaximum": 5}], "type": "integer"})", {"2", "4"}, {"1", "5"});
}

TEST(JsonSchemaCombinators, AllOfAdditionalPropertiesBindsTheOtherPartsKeys) {
  // The first part forbids any key but `a`, so `b` from the second part may never appear.
  expect_language(R"({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": false},
                                {"properties": {"b": {"type": "integer"}}}]})",
                  {"{}", R"({"a": 1})"}, {R"({"b": 1})", R"({"a": 1, "b": 2})"});
}

TEST(JsonSchemaCombinators, AllOfDistributesOverAnyOf) {
  expect_language(R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                      "anyOf": [{"required": ["a"]}, {"required": ["b"]}]})",
                  {R"({"a": 1})", R"({"b": 1})", R"({"a": 1, "b": 2})"}, {"{}"});
}

TEST(JsonSchemaCombinators, ConflictsAreRefusedUnderStrict) {
  expect_refused(R"({"allOf": [{"type": "string"}, {"type": "integer"}]})", "type");
  expect_refused(R"({"allOf": [{"pattern": "a"}, {"pattern": "b"}]})", "pattern");
  expect_refused(R"({"allOf": [{"enum": [1, 2]}, {"enum": [3]}]})", "enum");
  // Non-strict: disjoint types match nothing (the root then matches nothing at all).
  GrammarBuilder b;
  const int32_t root = json_schema_rules(b, Json::parse(R"({"allOf": [{"type": "string"}, {"type": "integer"}]})"), lenient());
  EXPECT_THROW(b.build(root), Error);
  expect_language(R"({"type": "object", "properties": {"x": {"allOf": [{"type": "string"}, {"type": "integer"}]}}})", {"{}"},
                  {R"({"x": 1})", R"({"x": "1"})"}, lenient());
}

// ---- $ref ------------------------------------------------------------------------------------

TEST(JsonSchemaRefs, DefsDefinitionsAndPointerEscapes) {
  expect_language(R"({"$defs": {"a/b": {"type": "integer"}, "c~d": {"type": "string"}}, "definitions": {"n": {"type": "null"}},
                      "type": "array", "prefixItems": [{"$ref": "#/$defs/a~1b"}, {"$ref": "#/$defs/c~0d"},
                      {"$ref": "#/definitions/n"}], "items": false})",
                  {R"([1, "x", null])", R"([1, "x"])", "[]"}, {R"([1, "x", null, 1])", R"(["x"])"});
}

TEST(JsonSchemaRefs, RecursiveLinkedListAndTree) {
  expect_language(R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
                      "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}}, "required": ["v", "next"],
                      "additionalProperties": false}}, "$ref": "#/$defs/node"})",
                  {R"({"v": 1, "next": null})", R"({"v": 1, "next": {"v": 2, "next": {"v": 3, "next": null}}})"},
                  {R"({"v": 1})", R"({"v": 1, "next": {"v": 2}})"});
  expect_language(R"({"type": "object", "properties": {"name": {"type": "string"},
                      "kids": {"type": "array", "items": {"$ref": "#"}}}, "required": ["name"]})",
                  {R"({"name": "a"})", R"({"name": "a", "kids": [{"name": "b", "kids": []}, {"name": "c"}]})"},
                  {R"({"name": "a", "kids": [{}]})"});
}

TEST(JsonSchemaRefs, RefWithSiblingsMergesOwnPropertiesFirst) {
  expect_language(R"({"$defs": {"base": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}},
                      "$ref": "#/$defs/base", "properties": {"b": {"type": "string"}}, "required": ["b"],
                      "description": "derived"})",
                  {R"({"b": "x", "a": 1})"}, {R"({"a": 1, "b": "x"})", R"({"b": "x"})"});
  // allOf parts come after the node's own properties.
  expect_language(R"({"$defs": {"base": {"properties": {"a": {"type": "integer"}}, "required": ["a"]}},
                      "type": "object", "allOf": [{"$ref": "#/$defs/base"}], "properties": {"b": {"type": "string"}}})",
                  {R"({"b": "x", "a": 1})", R"({"a": 1})"}, {R"({"a": 1, "b": "x"})"});
}

TEST(JsonSchemaRefs, RecursionThroughARefWithSiblings) {
  expect_language(R"({"$defs": {"X": {"type": "object", "properties": {"child": {"$ref": "#/$defs/X", "nullable": true}},
                      "required": ["child"]}}, "$ref": "#/$defs/X"})",
                  {R"({"child": null})", R"({"child": {"child": {"child": null}}})"}, {"{}", "null", R"({"child": {}})"});
  expect_language(R"({"$defs": {"X": {"type": "object", "properties": {"v": {"type": "integer"},
                      "next": {"$ref": "#/$defs/X", "required": ["v"]}}}}, "$ref": "#/$defs/X"})",
                  {"{}", R"({"next": {"v": 1}})", R"({"v": 0, "next": {"v": 1, "next": {"v": 2}}})"},
                  {R"({"next": {}})", R"({"next": {"v": 1, "next": {}}})"});
}

TEST(JsonSchemaRefs, RootIdPrefixAndPercentEncoding) {
  expect_language(R"({"$id": "https://example.com/s.json", "$defs": {"a b": {"type": "integer"}},
                      "type": "array", "items": {"$ref": "https://example.com/s.json#/$defs/a%20b"}})",
                  {"[1, 2]"}, {R"(["1"])"});
}

TEST(JsonSchemaRefs, BadReferencesAreRefused) {
  expect_refused(R"({"$ref": "#/$defs/missing"})", "$ref");
  expect_refused(R"({"$ref": "other.json#/a"})", "$ref");
  expect_refused(R"({"$ref": "#anchor", "$defs": {"x": {"$anchor": "anchor"}}})", "$ref");
  expect_refused(R"({"$ref": 5})", "$ref");
  expect_refused(R"({"type": "array", "items": {"$ref": "#/items/0"}})", "$ref");
}

TEST(JsonSchemaRefs, LoopsThatConsumeNothingAreRefusedFast) {
  const auto start = std::chrono::steady_clock::now();
  expect_refused(R"({"$ref": "#"})", "$ref");
  expect_refused(R"({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})", "$ref");
  expect_refused(R"({"anyOf": [{"$ref": "#"}, {"type": "null"}]})", "$ref");
  expect_refused(R"({"allOf": [{"$ref": "#"}]})", "$ref");
  expect_refused(R"({"$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}], "type": "object"}}, "$ref": "#/$defs/a"})", "$ref");
  expect_refused(R"({"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "null"}], "type": ["object", "null"]}},
                     "$ref": "#/$defs/a"})",
                 "$ref");
  EXPECT_LT(seconds_since(start), 5.0);
  // Recursion through a consuming position is fine, even when written through anyOf.
  expect_language(R"({"anyOf": [{"type": "array", "items": {"$ref": "#"}}, {"type": "integer"}]})", {"1", "[[1], []]"},
                  {"[[1], [\"x\"]]"});
}

// ---- arrays ----------------------------------------------------------------------------------

TEST(JsonSchemaArrays, ItemsAndCounts) {
  expect_language(R"({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3})",
                  {"[1]", "[1, 2]", "[1, 2, 3]"}, {"[]", "[1, 2, 3, 4]", "[1,2]", "[1, \"a\"]", "[1, ]"});
  expect_language(R"({"type": "array"})", {"[]", R"([1, "a", null, [{}]])"}, {"[1,2]"});
  expect_language(R"({"type": "array", "maxItems": 0})", {"[]"}, {"[1]"});
  expect_language(R"({"type": "object", "properties": {"x": {"type": "array", "minItems": 2, "maxItems": 1}}})", {"{}"},
                  {R"({"x": []})", R"({"x": [1]})", R"({"x": [1, 2]})"});
}

TEST(JsonSchemaArrays, PrefixItems) {
  const std::string tuple = R"({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]})";
  expect_language(tuple, {"[]", R"(["a"])", R"(["a", 1])", R"(["a", 1, null, true])"}, {"[1]", R"(["a", "b"])"});
  expect_language(R"({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": false, "minItems": 1})",
                  {R"(["a"])", R"(["a", 1])"}, {"[]", R"(["a", 1, 2])"});
  expect_language(R"({"type": "array", "prefixItems": [{"type": "string"}], "items": {"type": "boolean"}, "minItems": 3, "maxItems": 4})",
                  {R"(["a", true, false])", R"(["a", true, false, true])"}, {R"(["a", true])", R"(["a", true, false, true, true])",
                                                                            R"(["a", "b", true])"});
  // draft-07 spelling: items as a list, additionalItems.
  expect_language(R"({"type": "array", "items": [{"type": "integer"}], "additionalItems": {"type": "string"}})",
                  {"[1]", R"([1, "a", "b"])"}, {R"([1, 2])"});
}

// ---- strings ---------------------------------------------------------------------------------

TEST(JsonSchemaStrings, LengthsCountCharactersAndEscapes) {
  const std::string schema = R"({"type": "string", "minLength": 2, "maxLength": 3})";
  expect_language(schema, {R"("ab")", R"("abc")", R"("é日")", R"("\n\"")", R"("a\u00e9")", R"("\uD83D\uDE00x")", "\"😀x\""},
                  {R"("a")", R"("abcd")", R"("é")", R"("\n")", R"("\uD83D\uDE00")", R"("abc\n")"});
}

TEST(JsonSchemaStrings, Pattern) {
  expect_language(R"({"type": "string", "pattern": "^[a-z]+-[0-9]{2}$"})", {R"("ab-12")"}, {R"("ab-1")", R"("Ab-12")", R"("xab-12y")"});
  // Unanchored: the pattern may match anywhere.
  expect_language(R"({"type": "string", "pattern": "[0-9]"})", {R"("a1b")", R"("7")"}, {R"("abc")", R"("")"});
  expect_refused(R"({"type": "string", "pattern": "(a"})", "pattern");
}

TEST(JsonSchemaStrings, LargeLengthBoundsCompileFast) {
  const auto start = std::chrono::steady_clock::now();
  const auto g = compile(std::string(R"({"type": "string", "minLength": 3, "maxLength": 40000})"));
  EXPECT_LT(seconds_since(start), 5.0);
  const std::string max(40000, 'a');
  EXPECT_TRUE(accepts(*g, "\"" + max + "\""));
  EXPECT_FALSE(accepts(*g, "\"" + max + "b\""));
  EXPECT_TRUE(accepts(*g, R"("a\u00e9\n")"));
  EXPECT_FALSE(accepts(*g, R"("a\n")"));
}

TEST(JsonSchemaStrings, PatternWithLengths) {
  expect_language(R"({"type": "string", "pattern": "^[a-z0-9_]+$", "minLength": 3, "maxLength": 5})",
                  {R"("abc")", R"("ab_de")"}, {R"("ab")", R"("abcdef")", R"("ab-c")"});
  expect_language(R"({"type": "string", "pattern": "^[a-z0-9][a-z0-9-]*$", "maxLength": 4})", {R"("a")", R"("a-b-")"},
                  {R"("a-b-c")", R"("-a")", R"("")"});
  // Two variable parts: split by the length of one.
  expect_language(R"({"type": "string", "pattern": "^(@[a-z]+/)?[a-z][a-z.]*$", "maxLength": 6})",
                  {R"("a")", R"("@a/b")", R"("@ab/cd")", R"("abcdef")", R"("@a/b.c")"},
                  {R"("@abc/de")", R"("abcdefg")", R"("@/b")", R"("@a/b.cd")"});
  // Unanchored: the pattern's surroundings count too; escapes and multi-byte characters are
  // one character each.
  expect_language(R"({"type": "string", "pattern": "x", "minLength": 2, "maxLength": 3})",
                  {R"("ax")", R"("xa")", R"("\nxé")", R"("axa")"}, {R"("x")", R"("axaa")", R"("ab")"});
  expect_language(R"({"type": "string", "pattern": "^é\\\\.+$", "minLength": 4})", {R"("é\\ab")", R"("é\\日本語")"},
                  {R"("é\\a")", R"("éxab")"});
}

TEST(JsonSchemaStrings, FormatWithLengths) {
  expect_language(R"({"type": "string", "format": "uri", "minLength": 1, "maxLength": 12})",
                  {R"("http://a.bc")", R"("a:")", R"("https://a.io")"}, {R"("https://a.com")", R"("a")"});
  expect_language(R"({"type": "string", "format": "date-time", "maxLength": 20})", {R"("2024-05-01T12:00:00Z")"},
                  {R"("2024-05-01T12:00:00.5Z")", R"("2024-05-01T12:00:00+01:00")"});
  // Too large to combine exactly: strict refuses, non-strict keeps the pattern.
  expect_refused(R"({"type": "string", "pattern": "^\\s*(SELECT|WITH)\\s", "maxLength": 4000})", "maxLength");
  expect_language(R"({"type": "string", "pattern": "^\\s*(SELECT|WITH)\\s", "maxLength": 4000})", {R"("SELECT 1")"},
                  {R"("DROP")"}, lenient());
  expect_refused(R"({"type": "string", "format": "email", "maxLength": 64})", "maxLength");
  expect_refused(R"({"type": "string", "format": "email", "pattern": "x"})", "format");
}

TEST(JsonSchemaStrings, FormatWithAnchoredPattern) {
  expect_language(R"({"type": "string", "format": "uri", "pattern": "^https?://"})",
                  {R"("https://a.example.com/x")", R"("http://localhost:8000/health")", R"("https://")"},
                  {R"("ftp://a.b")", R"("https:/a")", R"("xhttps://a")", R"("https://a b")"});
  expect_language(R"({"type": "string", "format": "date", "pattern": "^(2024|2025)-"})", {R"("2024-02-29")", R"("2025-12-31")"},
                  {R"("2023-01-01")", R"("2024-13-01")"});
  expect_language(R"({"type": "string", "format": "uuid", "pattern": "^[0-9a-f]{8}-0000-0000-0000-000000000000$"})",
                  {}, {R"("123e4567-e89b-12d3-a456-426614174000")"}, lenient());
  expect_language(R"({"type": "string", "format": "uri", "pattern": "^https://", "maxLength": 12})", {R"("https://a.b")"},
                  {R"("https://a.bc.")", R"("http://a.b")"});
}

TEST(JsonSchemaStrings, Formats) {
  expect_language(R"({"type": "string", "format": "date"})", {R"("2024-02-29")", R"("1999-12-31")"},
                  {R"("2024-13-01")", R"("2024-00-10")", R"("2024-01-32")", R"("24-01-01")", R"("2024-1-01")"});
  expect_language(R"({"type": "string", "format": "time"})", {R"("23:59:60Z")", R"("08:30:00.123+05:30")"},
                  {R"("24:00:00Z")", R"("08:30:00")", R"("08:60:00Z")"});
  expect_language(R"({"type": "string", "format": "date-time"})", {R"("2024-05-01T12:00:00Z")", R"("2024-05-01t12:00:00.5-01:00")"},
                  {R"("2024-05-01 12:00:00Z")", R"("2024-05-01T12:00Z")"});
  expect_language(R"({"type": "string", "format": "uuid"})", {R"("123e4567-e89b-12d3-a456-426614174000")"},
                  {R"("123e4567e89b12d3a456426614174000")", R"("123e4567-e89b-12d3-a456-42661417400g")"});
  expect_language(R"({"type": "string", "format": "email"})", {R"("a.b+c@example.co.uk")", R"("x@y.z")"},
                  {R"("a@b")", R"("@b.c")", R"("a b@c.d")", R"("a..b@c.d")", R"("a@-b.c")"});
  expect_language(R"({"type": "string", "format": "uri"})", {R"("https://example.com/a?b=c#d")", R"("urn:isbn:0451450523")"},
                  {R"("example.com")", R"("http://a b")", R"("1http://x")"});
  expect_language(R"({"type": "string", "format": "ipv4"})", {R"("192.168.0.255")", R"("0.0.0.0")"},
                  {R"("256.1.1.1")", R"("01.1.1.1")", R"("1.1.1")"});
  expect_refused(R"({"type": "string", "format": "ipv6"})", "format");
  expect_language(R"({"type": "string", "format": "ipv6"})", {R"("::1")"}, {"1"}, lenient());
  // format on a number is an annotation (OpenAPI's int64): not refused.
  expect_language(R"({"type": "integer", "format": "int64"})", {"1"}, {"\"1\""});
}

// ---- numbers ---------------------------------------------------------------------------------

struct IntRange {
  std::string schema;
  long lo, hi;  // inclusive
};

TEST(JsonSchemaNumbers, IntegerRangesAreExact) {
  const std::vector<IntRange> ranges = {
      {R"({"type": "integer", "minimum": 0, "maximum": 100})", 0, 100},
      {R"({"type": "integer", "minimum": 7, "maximum": 1234})", 7, 1234},
      {R"({"type": "integer", "minimum": -1000, "maximum": -17})", -1000, -17},
      {R"({"type": "integer", "minimum": -99, "maximum": 250})", -99, 250},
      {R"({"type": "integer", "exclusiveMinimum": -1, "exclusiveMaximum": 10})", 0, 9},
      {R"({"type": "integer", "minimum": 1.5, "maximum": 99.9})", 2, 99},
      {R"({"type": "integer", "minimum": -2.5, "maximum": -0.5})", -2, -1},
      {R"({"type": "integer", "minimum": 5, "maximum": 5})", 5, 5},
      {R"({"type": "integer", "minimum": 10})", 10, 100000},
      {R"({"type": "integer", "maximum": -3})", -100000, -3},
      {R"({"type": "integer", "exclusiveMaximum": 0})", -100000, -1},
      {R"({"type": "integer", "minimum": 95, "maximum": 1005})", 95, 1005},
  };
  for (const auto& r : ranges) {
    SCOPED_TRACE(r.schema);
    const auto g = compile(r.schema);
    for (long v = -1300; v <= 1300; ++v)
      ASSERT_EQ(accepts(*g, std::to_string(v)), v >= r.lo && v <= r.hi) << v;
    EXPECT_FALSE(accepts(*g, "-0"));
    EXPECT_FALSE(accepts(*g, "007"));
  }
  expect_language(R"({"type": "integer", "minimum": 100000000000000000000})", {"100000000000000000000", "999999999999999999999999"},
                  {"99999999999999999999", "1"});
  expect_language(R"({"type": "object", "properties": {"x": {"type": "integer", "minimum": 5, "maximum": 4}}})", {"{}"},
                  {R"({"x": 4})", R"({"x": 5})"});
}

// Decimal text in thousandths (value = k / 1000) spelled with 0..3 fraction digits.
std::vector<std::pair<std::string, long>> decimals(long from, long to) {
  std::vector<std::pair<std::string, long>> out;
  for (long k = from; k <= to; ++k) {
    const long a = k < 0 ? -k : k;
    const std::string sign = k < 0 ? "-" : "";
    const std::string whole = std::to_string(a / 1000);
    const long f = a % 1000;
    char buf[8];
    std::snprintf(buf, sizeof buf, "%03ld", f);
    std::string frac = buf;
    out.push_back({sign + whole + "." + frac, k});  // 3 digits, maybe trailing zeros
    while (!frac.empty() && frac.back() == '0') frac.pop_back();
    if (frac.empty()) out.push_back({sign + whole, k});
    else if (frac.size() < 3) out.push_back({sign + whole + "." + frac, k});
  }
  return out;
}

struct NumRange {
  std::string schema;
  long lo, hi;  // thousandths
  bool lo_excl, hi_excl;
};

TEST(JsonSchemaNumbers, NumberRangesWithFractionalBoundsAreExact) {
  const long kNone = 1L << 40;
  const std::vector<NumRange> ranges = {
      {R"({"type": "number", "minimum": 0.5, "exclusiveMaximum": 2.25})", 500, 2250, false, true},
      {R"({"type": "number", "exclusiveMinimum": -1.05, "maximum": 0.3})", -1050, 300, true, false},
      {R"({"type": "number", "minimum": -2.5, "maximum": -0.125})", -2500, -125, false, false},
      {R"({"type": "number", "exclusiveMinimum": 0})", 0, kNone, true, false},
      {R"({"type": "number", "minimum": 0})", 0, kNone, false, false},
      {R"({"type": "number", "maximum": 1.001})", -kNone, 1001, false, false},
      {R"({"type": "number", "exclusiveMaximum": -0.5})", -kNone, -500, false, true},
      {R"({"type": "number", "minimum": 1.5, "maximum": 1.75})", 1500, 1750, false, false},
      {R"({"type": "number", "exclusiveMinimum": 1, "exclusiveMaximum": 2})", 1000, 2000, true, true},
      {R"({"type": "number", "minimum": 0.007, "maximum": 12})", 7, 12000, false, false},
  };
  const auto texts = decimals(-3200, 3200);
  for (const auto& r : ranges) {
    SCOPED_TRACE(r.schema);
    const auto g = compile(r.schema);
    for (const auto& [text, k] : texts) {
      const bool in = (r.lo_excl ? k > r.lo : k >= r.lo) && (r.hi_excl ? k < r.hi : k <= r.hi);
      if (text.rfind("-0", 0) == 0 && k == 0) continue;  // negative zero is not generated
      ASSERT_EQ(accepts(*g, text), in) << text;
    }
    EXPECT_FALSE(accepts(*g, "1e0"));
  }
  expect_language(R"({"type": "number", "minimum": 0.1})", {"0.1", "0.10000", "0.1000001", "12345.6"},
                  {"0.0999999", "0.09", "0", "-0.1"});
  expect_language(R"({"type": "number", "minimum": 1e-7, "maximum": 1e20})", {"0.0000001", "100000000000000000000"},
                  {"0.00000009", "100000000000000000000.1"});
}

// A fraction stops at 20 digits (a model that keeps writing zeros after "0." must end), or
// one past a bound's own digits, which stay exact.
TEST(JsonSchemaNumbers, FractionsAreBoundedInLength) {
  const std::string z19(19, '0'), z20(20, '0');
  expect_language(R"({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1})",
                  {"0.5", "0." + z19 + "1", "0.1" + z19},
                  {"0." + z20 + "1", "0.1" + z20, "0." + z20, "0"});
  expect_language(R"({"type": "number"})", {"1.5", "-0.1" + z19, "1.5e300"}, {"1.1" + z20});
  expect_language(R"({"type": "number", "minimum": 2})", {"3." + z19 + "1", "2"}, {"3." + z20 + "1"});
  const std::string tiny = "0." + std::string(29, '0') + "1";  // 1e-30: 30 digits
  expect_language(R"({"type": "number", "exclusiveMinimum": )" + tiny + R"(, "maximum": 1})",
                  {"0." + std::string(29, '0') + "11", "0." + std::string(28, '0') + "2"},
                  {tiny, "0." + std::string(29, '0') + "101"});
  expect_language(R"({"type": "object"})", {R"({"a": 0.)" + z19 + "1}"}, {R"({"a": 0.)" + z20 + "1}"});
}

// ---- refusals --------------------------------------------------------------------------------

TEST(JsonSchemaRefusals, MalformedKeywordValues) {
  for (const JsonSchemaOptions& o : {JsonSchemaOptions{}, lenient()}) {
    expect_refused(R"({"type": 5})", "type", o);
    expect_refused(R"({"type": "int"})", "type", o);
    expect_refused(R"({"type": []})", "type", o);
    expect_refused(R"({"type": "object", "required": "a"})", "required", o);
    expect_refused(R"({"type": "object", "required": [1]})", "required", o);
    expect_refused(R"({"type": "object", "properties": []})", "properties", o);
    expect_refused(R"({"type": "object", "properties": {"a": 5}})", "properties", o);
    expect_refused(R"({"enum": []})", "enum", o);
    expect_refused(R"({"enum": 1})", "enum", o);
    expect_refused(R"({"type": "string", "minLength": -1})", "minLength", o);
    expect_refused(R"({"type": "string", "maxLength": 1.5})", "maxLength", o);
    expect_refused(R"({"type": "string", "pattern": 1})", "pattern", o);
    expect_refused(R"({"anyOf": []})", "anyOf", o);
    expect_refused(R"({"allOf": {}})", "allOf", o);
    expect_refused(R"({"type": "number", "minimum": "1"})", "minimum", o);
    expect_refused(R"({"type": "array", "items": 3})", "items", o);
    expect_refused("5", "", o);
  }
}

TEST(JsonSchemaRefusals, UnsupportedKeywordsUnderStrictOnly) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"type": "object", "patternProperties": {"^x": {"type": "integer"}}})", "patternProperties"},
      {R"({"type": "object", "propertyNames": {"maxLength": 3}})", "propertyNames"},
      {R"({"type": "object", "dependentSchemas": {"a": {"required": ["b"]}}})", "dependentSchemas"},
      {R"({"type": "object", "dependentRequired": {"a": ["b"]}})", "dependentRequired"},
      {R"({"type": "integer", "if": {"minimum": 0}, "then": {"maximum": 5}})", "if"},
      {R"({"not": {"type": "null"}})", "not"},
      {R"({"type": "array", "uniqueItems": true})", "uniqueItems"},
      {R"({"type": "array", "contains": {"type": "integer"}})", "contains"},
      {R"({"type": "integer", "multipleOf": 3})", "multipleOf"},
      {R"({"type": "object", "minProperties": 1})", "minProperties"},
      {R"({"type": "object", "maxProperties": 1})", "maxProperties"},
      {R"({"type": "object", "properties": {"a": {"type": "integer"}}, "unevaluatedProperties": false})", "unevaluatedProperties"},
      {R"({"type": "array", "unevaluatedItems": false})", "unevaluatedItems"},
      {R"({"type": "string", "format": "hostname-idn"})", "format"},
      {R"({"type": "string", "format": "email", "maxLength": 64})", "maxLength"},
  };
  for (const auto& [schema, keyword] : cases) {
    expect_refused(schema, keyword);
    GrammarBuilder b;
    EXPECT_NO_THROW(b.build(json_schema_rules(b, Json::parse(schema), lenient()))) << schema;
  }
  // Non-strict ignores them: multipleOf leaves any integer.
  expect_language(R"({"type": "integer", "multipleOf": 3})", {"4"}, {"4.5"}, lenient());
  expect_language(R"({"type": "array", "uniqueItems": false, "items": {"type": "integer"}})", {"[1, 1]"}, {});
  // unevaluated* stand in for additionalProperties / items when those are absent.
  expect_language(R"({"type": "object", "properties": {"a": {"type": "integer"}}, "unevaluatedProperties": {"type": "string"}})",
                  {R"({"a": 1, "b": "x"})"}, {R"({"a": 1, "b": 2})"}, lenient());
}

TEST(JsonSchemaRefusals, HugeCounts) {
  expect_refused(R"({"type": "array", "minItems": 200000})", "minItems");
  expect_refused(R"({"type": "string", "minLength": 1000000})", "minLength", lenient());
  expect_refused(R"({"type": "array", "maxItems": 200000})", "maxItems");
  expect_refused(R"({"type": "string", "maxLength": 4294967296})", "maxLength");
  // Non-strict drops an upper bound it cannot build.
  expect_language(R"({"type": "string", "maxLength": 1000000})", {R"("abc")"}, {"1"}, lenient());
}

TEST(JsonSchemaRefusals, DeepNestingFailsFast) {
  Json schema = {{"type", "integer"}};
  for (int i = 0; i < 300; ++i) schema = {{"type", "array"}, {"items", schema}};
  const auto start = std::chrono::steady_clock::now();
  expect_refused(schema.dump(), "items");
  // A document deeper than any schema could need is refused before it is walked.
  std::string deep = "{\"enum\": [";
  for (int i = 0; i < 5000; ++i) deep += "[";
  for (int i = 0; i < 5000; ++i) deep += "]";
  deep += "]}";
  expect_refused(deep, "");
  Json nested_all_of = {{"type", "integer"}};
  for (int i = 0; i < 300; ++i) nested_all_of = {{"allOf", Json::array({nested_all_of})}};
  expect_refused(nested_all_of.dump(), "allOf");
  EXPECT_LT(seconds_since(start), 5.0);
  // 100 levels is fine.
  Json ok = {{"type", "integer"}};
  for (int i = 0; i < 100; ++i) ok = {{"type", "array"}, {"items", ok}};
  const auto g = compile(ok);
  EXPECT_TRUE(accepts(*g, std::string(100, '[') + "1" + std::string(100, ']')));
}

TEST(JsonSchemaRefusals, AnyOfProductsAreBounded) {
  Json all = Json::array();
  for (int i = 0; i < 10; ++i) all.push_back({{"anyOf", Json::array({{{"type", "integer"}}, {{"type", "number"}}})}});
  expect_refused(Json{{"allOf", all}}.dump(), "anyOf");
}

// ---- layout and sharing ----------------------------------------------------------------------

TEST(JsonSchemaLayout, AnyWhitespaceInObjectsAndArrays) {
  JsonSchemaOptions o;
  o.any_whitespace = true;
  expect_language(R"({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}},
                      "b": {"type": "string"}}, "required": ["a"]})",
                  {R"({"a": [1, 2]})", R"({"a":[1,2],"b":"x"})", "{\n  \"a\": [\n    1\n  ],\n  \"b\": \"x\"\n}", R"({ "a" : [ ] })"},
                  {R"({"b": "x", "a": []})", R"({"a": [1, 2], })", "{\"a\": [1,          2]}"}, o);
}

TEST(JsonSchemaLayout, EqualSubSchemasShareOneRule) {
  auto rules = [](const std::string& schema) {
    GrammarBuilder b;
    json_schema_rules(b, Json::parse(schema));
    return b.num_rules();
  };
  const int one = rules(R"({"type": "object", "properties": {"a": {"type": "string", "maxLength": 5}}})");
  const int three = rules(R"({"type": "object", "properties": {"a": {"type": "string", "maxLength": 5},
      "b": {"type": "string", "maxLength": 5, "description": "x"}, "c": {"maxLength": 5, "type": "string"}}})");
  EXPECT_EQ(three, one + 1);  // "c" lists its keywords in another order: its own rule
}

TEST(JsonSchemaLayout, OptionsAreChecked) {
  JsonSchemaOptions o;
  o.max_whitespace = -1;
  GrammarBuilder b;
  EXPECT_THROW(json_value_rules(b, o), SchemaError);
}

// A realistic tool-call schema (pydantic output) end to end.
TEST(JsonSchemaLayout, PydanticStyleSchema) {
  expect_language(R"({
    "$defs": {
      "Address": {"properties": {"street": {"title": "Street", "type": "string"},
                                 "zip": {"anyOf": [{"type": "string", "pattern": "^[0-9]{5}$"}, {"type": "null"}], "default": null}},
                  "required": ["street"], "title": "Address", "type": "object"},
      "Role": {"enum": ["admin", "user"], "title": "Role", "type": "string"}
    },
    "properties": {
      "name": {"title": "Name", "type": "string", "minLength": 1},
      "age": {"title": "Age", "type": "integer", "minimum": 0, "maximum": 150},
      "role": {"$ref": "#/$defs/Role", "default": "user"},
      "addresses": {"items": {"$ref": "#/$defs/Address"}, "title": "Addresses", "type": "array"},
      "score": {"anyOf": [{"type": "number"}, {"type": "null"}], "default": null, "title": "Score"}
    },
    "required": ["name", "age", "addresses"], "title": "User", "type": "object"})",
                  {R"({"name": "Ann", "age": 30, "addresses": []})",
                   R"({"name": "Ann", "age": 30, "role": "admin", "addresses": [{"street": "Main"}, {"street": "B", "zip": "12345"}], "score": null})",
                   R"({"name": "Ann", "age": 150, "addresses": [{"street": "x", "zip": null}], "score": 1.5})"},
                  {R"({"name": "", "age": 30, "addresses": []})", R"({"name": "Ann", "age": 151, "addresses": []})",
                   R"({"name": "Ann", "age": 30, "role": "root", "addresses": []})",
                   R"({"name": "Ann", "age": 30, "addresses": [{"street": "x", "zip": "1234"}]})",
                   R"({"age": 30, "name": "Ann", "addresses": []})"});
}

}  // namespace
}  // namespace zen::grammar
