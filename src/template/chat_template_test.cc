// Chat templates rendered byte for byte as HF transformers does. Expected strings come from
// tests/fixtures/chat/*.json, written by tools/make_chat_fixtures.py.
#include "template/chat_template.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "base/error.h"
#include "io/gguf.h"
#include "template/jinja_parser.h"
#include "template/jinja_render.h"

namespace zen {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

fs::path fixture_dir() { return fs::path(ZEN_SOURCE_DIR) / "tests" / "fixtures" / "chat"; }

Json load_fixture(const std::string& name) {
  const fs::path path = fixture_dir() / (name + ".json");
  if (!fs::exists(path)) throw std::runtime_error("missing fixture " + path.string());
  return Json::parse(read_text(path));
}

// Renders one fixture case; returns "" on success or a failure description.
std::string check_case(const ChatTemplate& tmpl, const Json& c) {
  if (c.contains("expected_error")) {
    try {
      const std::string out = tmpl.render(c["context"]);
      return "expected an error (" + c["expected_error"].get<std::string>() + ") but got: " + out;
    } catch (const Error&) {
      return "";
    }
  }
  std::string out;
  try {
    out = tmpl.render(c["context"]);
  } catch (const Error& e) {
    return std::string("unexpected error: ") + e.what();
  }
  const std::string expected = c["expected"].get<std::string>();
  if (out == expected) return "";
  size_t i = 0;
  while (i < out.size() && i < expected.size() && out[i] == expected[i]) ++i;
  return "differs at byte " + std::to_string(i) + "\n--- expected ---\n" + expected + "\n--- got ---\n" + out;
}

class ChatTemplateFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatTemplateFixture, RendersLikeTransformers) {
  const Json fixture = load_fixture(GetParam());
  const ChatTemplate tmpl(fixture["template"].get<std::string>());
  ASSERT_GE(fixture["cases"].size(), 12u);
  for (const auto& c : fixture["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    EXPECT_EQ(check_case(tmpl, c), "");
  }
}

INSTANTIATE_TEST_SUITE_P(Templates, ChatTemplateFixture,
                         ::testing::Values("qwen3", "qwen2_5", "qwen2_5_coder_gguf", "smollm2_gguf"));

TEST(ChatTemplate, JinjaSemanticsMatchTransformers) {
  const Json fixture = load_fixture("jinja_semantics");
  for (const auto& c : fixture["cases"]) {
    const std::string source = c["template"].get<std::string>();
    SCOPED_TRACE(source);
    std::unique_ptr<ChatTemplate> tmpl;
    try {
      tmpl = std::make_unique<ChatTemplate>(source);
    } catch (const Error& e) {
      EXPECT_TRUE(c.contains("expected_error")) << "parse failed: " << e.what();
      continue;
    }
    EXPECT_EQ(check_case(*tmpl, c), "");
  }
}

// The embedded templates are the real ones (when the shared files are present).
TEST(ChatTemplate, FixtureTemplatesMatchSharedTokenizerConfigs) {
  const fs::path shared = fs::path(ZEN_SOURCE_DIR) / ".." / "shared" / "data" / "tokenizers";
  if (!fs::exists(shared)) GTEST_SKIP() << "no " << shared << " (shared data not present)";
  for (const std::string name : {"qwen3", "qwen2_5"}) {
    const fs::path config = shared / name / "tokenizer_config.json";
    if (!fs::exists(config)) GTEST_SKIP() << "no " << config;
    const Json parsed = Json::parse(read_text(config));
    EXPECT_EQ(parsed["chat_template"].get<std::string>(), load_fixture(name)["template"].get<std::string>()) << name;
  }
}

TEST(ChatTemplate, FixtureTemplatesMatchModelGgufs) {
  const std::pair<const char*, const char*> models[] = {
      {"qwen2_5_coder_gguf", ZEN_SOURCE_DIR "/models/default/model.gguf"},
      {"smollm2_gguf", ZEN_SOURCE_DIR "/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"}};
  int checked = 0;
  for (const auto& [name, path] : models) {
    if (!fs::exists(path)) continue;
    const GgufFile gguf(path);
    EXPECT_EQ(gguf.get_string("tokenizer.chat_template").value_or(""),
              load_fixture(name)["template"].get<std::string>()) << path;
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "no model GGUF files (models/default/model.gguf, models/smollm2/...) present; run ./setup.sh";
}

Json simple_context() {
  return Json{{"messages", Json::array({Json{{"role", "user"}, {"content", "hi"}}})},
              {"add_generation_prompt", true}};
}

std::string error_of(const std::string& source, const Json& context = simple_context()) {
  try {
    ChatTemplate(source).render(context);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ChatTemplate, SyntaxErrorsNameLineAndColumn) {
  const std::string message = error_of("line one\n{% if x %}\n  {{ 1 + }}\n{% endif %}");
  EXPECT_NE(message.find("syntax error at line 3, column 10"), std::string::npos) << message;
  for (const char* bad : {"{% if x %}", "{% for %}", "{{ 1 ", "{# open", "{% endif %}", "{{ ) }}",
                          "{% foo %}", "{{ 'unterminated }}", "{% macro m(a=1, b) %}{% endmacro %}",
                          "{% include 'x' %}", "{% break %}", "{{ x|no_such_filter }}", "{{ x is no_such_test }}",
                          "{% set %}", "{{ [1, 2 }}", "{{ {'a' 1} }}", "{% for x in y %}{% endif %}"}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW(ChatTemplate{bad}, Error);
  }
}

TEST(ChatTemplate, RuntimeErrorsAreClear) {
  EXPECT_NE(error_of("{{ raise_exception('System role not supported') }}").find("System role not supported"),
            std::string::npos);
  EXPECT_NE(error_of("{% if true %}{{ 1|no_such_filter }}{% endif %}").find("No filter named 'no_such_filter'"),
            std::string::npos);
  EXPECT_NE(error_of("{{ 1|xmlattr }}").find("not supported"), std::string::npos);
  EXPECT_NE(error_of("\n{{ messages[0].nope.deeper }}").find("line 2"), std::string::npos);
  EXPECT_NE(error_of("{{ messages[0].nope.deeper }}").find("'dict object' has no attribute 'nope'"),
            std::string::npos);
  EXPECT_NE(error_of("{{ 1 / 0 }}").find("division by zero"), std::string::npos);
  EXPECT_NE(error_of("{{ undefined_thing.x }}").find("'undefined_thing' is undefined"), std::string::npos);
  EXPECT_NE(error_of("{{ 'a' }}", Json::array()).find("must be a JSON object"), std::string::npos);
  // Floats past 64-bit integers (Python's ints are unbounded): refused, not undefined behaviour.
  EXPECT_NE(error_of("{{ '%d' % (3.14 ** 159) }}").find("too large for a 64-bit integer"), std::string::npos);
  EXPECT_NE(error_of("{{ (2.0 ** 70)|int }}").find("too large for a 64-bit integer"), std::string::npos);
}

TEST(ChatTemplate, ContextDefaultsAndMessageNormalization) {
  const ChatTemplate tmpl(
      "{{ tools is none }} {{ documents is none }} {{ add_generation_prompt }} "
      "{% for m in messages %}{{ m|tojson }}{% endfor %}");
  const Json context = Json::parse(R"({"messages": [
      {"role": "assistant", "content": null, "reasoning": "r", "tool_calls": null}]})");
  EXPECT_EQ(tmpl.render(context),
            R"(True True False {"thinking": "r", "role": "assistant", "reasoning": "r", "reasoning_content": "r"})");
  // nlohmann::json (sorted keys) is accepted too.
  EXPECT_EQ(tmpl.render(nlohmann::json::parse(R"({"messages": [], "tools": [1]})")), "False True False ");
}

TEST(ChatTemplate, StrftimeNowUsesTheClock) {
  const std::string year = ChatTemplate("{{ strftime_now('%Y') }}").render(simple_context());
  ASSERT_EQ(year.size(), 4u);
  EXPECT_GE(std::stoi(year), 2024);
}

TEST(ChatTemplate, GenerationBlocksRenderTheirBody) {
  EXPECT_EQ(ChatTemplate("a{% generation %}b{{ 1 }}{% endgeneration %}c").render(simple_context()), "ab1c");
}

TEST(ChatTemplate, RunawayTemplatesStopWithAnError) {
  const auto parsed = jinja::parse_template(
      "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}");
  jinja::RenderLimits limits;
  limits.max_loop_iterations = 10000;
  EXPECT_THROW(jinja::render(*parsed, jinja::Value::dict(), limits), Error);
  EXPECT_NE(error_of("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").find("nested deeper"), std::string::npos);
  EXPECT_NE(error_of("{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}").find("output exceeds"),
            std::string::npos);
  EXPECT_NE(error_of("{{ 'x' * 10000000000 }}").find("too large"), std::string::npos);
}

TEST(ChatTemplate, DeepNestingIsRefusedNotOverflowed) {
  for (const std::string& piece : {std::string("("), std::string("["), std::string("not "), std::string("-")}) {
    std::string source = "{{ ";
    for (int i = 0; i < 100000; ++i) source += piece;
    source += "1 }}";
    EXPECT_THROW(ChatTemplate{source}, Error) << piece;
  }
  std::string chain = "{{ a";
  for (int i = 0; i < 100000; ++i) chain += ".b";
  EXPECT_THROW(ChatTemplate{chain + " }}"}, Error);
  std::string sum = "{{ 1";
  for (int i = 0; i < 100000; ++i) sum += "+1";
  EXPECT_THROW(ChatTemplate{sum + " }}"}, Error);
  std::string ifs;
  for (int i = 0; i < 10000; ++i) ifs += "{% if true %}";
  EXPECT_THROW(ChatTemplate{ifs}, Error);
  // Deep JSON in the context is refused too.
  const Json deep = Json::parse(std::string(5000, '[') + std::string(5000, ']'));
  EXPECT_THROW(ChatTemplate("{{ x }}").render(Json{{"x", deep}}), Error);
}

// Every prefix of the real templates, and random byte edits of them, either renders or throws
// zen::Error: never crashes, hangs or trips a sanitizer.
TEST(ChatTemplate, TruncatedAndMutatedSourcesNeverCrash) {
  Json context;
  const Json qwen3 = load_fixture("qwen3");
  for (const auto& c : qwen3["cases"])
    if (c["name"] == "parallel_tool_calls_and_results") context = c["context"];
  ASSERT_FALSE(context.is_null());
  std::mt19937 rng(1234);
  size_t parsed = 0, rendered = 0;
  for (const std::string name : {"qwen3", "qwen2_5", "smollm2_gguf"}) {
    const std::string source = load_fixture(name)["template"].get<std::string>();
    auto attempt = [&](const std::string& text) {
      try {
        const ChatTemplate tmpl(text);
        ++parsed;
        tmpl.render(context);
        ++rendered;
      } catch (const Error&) {
      }
    };
    for (size_t len = 0; len <= source.size(); len += (name == "qwen3" ? 1 : 7)) attempt(source.substr(0, len));
    static constexpr char kAlphabet[] = "{}%#-+()[]'\"|.,:=~!<>*/ \nabcxyz0129_";
    for (int i = 0; i < 1500; ++i) {
      std::string text = source;
      for (int edits = 1 + static_cast<int>(rng() % 4); edits > 0; --edits) {
        const size_t pos = rng() % text.size();
        const char c = kAlphabet[rng() % (sizeof(kAlphabet) - 1)];
        switch (rng() % 3) {
          case 0: text[pos] = c; break;
          case 1: text.insert(text.begin() + static_cast<std::ptrdiff_t>(pos), c); break;
          default: text.erase(pos, 1 + rng() % 8); break;
        }
        if (text.empty()) text = "x";
      }
      attempt(text);
    }
  }
  EXPECT_GT(parsed, 100u);
  EXPECT_GT(rendered, 10u);
}

}  // namespace
}  // namespace zen
