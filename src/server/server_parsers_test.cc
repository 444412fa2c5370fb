// Unit tests of the server's text parsers: stop strings, reasoning split, both tool-call
// formats. Streaming cases feed the same text split at every byte boundary and require the
// same result as one piece: a tag split across tokens must never change the outcome.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/reasoning_parser.h"
#include "server/stop_strings.h"
#include "server/tool_parser.h"

namespace zen::server {
namespace {

using nlohmann::json;

// Text fed as pieces: every split of text into two, and byte by byte.
std::vector<std::vector<std::string>> splits_of(const std::string& text) {
  std::vector<std::vector<std::string>> out;
  out.push_back({text});
  for (size_t i = 1; i < text.size(); ++i) out.push_back({text.substr(0, i), text.substr(i)});
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  out.push_back(bytes);
  return out;
}

struct StopResult {
  std::string text;
  bool stopped;
};

StopResult run_stops(const std::vector<std::string>& pieces, std::vector<std::string> stops) {
  StopStringMatcher m(std::move(stops));
  StopResult r{"", false};
  for (const auto& p : pieces) r.text += m.push(p);
  r.text += m.flush();
  r.stopped = m.stopped();
  return r;
}

TEST(StopStrings, CutsBeforeTheEarliestStopAtEverySplit) {
  const std::string text = "Hello wor<END>ld and more";
  for (const auto& pieces : splits_of(text)) {
    const StopResult r = run_stops(pieces, {"<END>", "more"});
    EXPECT_EQ(r.text, text.substr(0, text.find("<END>")));
    EXPECT_TRUE(r.stopped);
  }
}

TEST(StopStrings, HoldsOnlyWhatCouldStartAStop) {
  StopStringMatcher m({"abc"});
  EXPECT_EQ(m.push("xxa"), "xx");  // "a" may begin "abc"
  EXPECT_EQ(m.push("bd"), "abd");  // it did not
  EXPECT_EQ(m.push("ab"), "");
  EXPECT_EQ(m.flush(), "ab");      // end of stream: held text was not a stop
  EXPECT_FALSE(m.stopped());
}

TEST(StopStrings, NoStopPassesEverythingThrough) {
  for (const auto& pieces : splits_of("plain text, no stops")) {
    const StopResult r = run_stops(pieces, {});
    EXPECT_EQ(r.text, "plain text, no stops");
    EXPECT_FALSE(r.stopped);
  }
}

TEST(StopStrings, TheStopCompletedFirstWinsAsTokenByToken) {
  for (const auto& pieces : splits_of("one two three")) EXPECT_EQ(run_stops(pieces, {"three", "o t", "two"}).text, "one ");
  for (const auto& pieces : splits_of("xabcd")) EXPECT_EQ(run_stops(pieces, {"abcd", "bc"}).text, "xa");
}

TEST(StopStrings, MultiByteCharactersStayWhole) {
  const std::string text = "é€😀 stop";
  for (const auto& pieces : splits_of(text)) EXPECT_EQ(run_stops(pieces, {" stop"}).text, "é€😀");
}

ReasoningSplit run_reasoning(const std::vector<std::string>& pieces, bool starts_inside) {
  ReasoningParser p(starts_inside);
  ReasoningSplit all;
  for (const auto& piece : pieces) {
    ReasoningSplit s = p.push(piece);
    all.reasoning += s.reasoning;
    all.content += s.content;
  }
  ReasoningSplit s = p.flush();
  all.reasoning += s.reasoning;
  all.content += s.content;
  return all;
}

TEST(ReasoningParser, SplitsThinkBlockAtEveryByteBoundary) {
  const std::string text = "<think>\nLet me think: 2+2.\n</think>\n\nThe answer is 4.";
  for (const auto& pieces : splits_of(text)) {
    const ReasoningSplit r = run_reasoning(pieces, false);
    EXPECT_EQ(r.reasoning, "\nLet me think: 2+2.\n");
    EXPECT_EQ(r.content, "The answer is 4.");
  }
}

TEST(ReasoningParser, PromptOpenedBlockStartsInReasoning) {
  const std::string text = "thinking...</think>\n\nanswer";
  for (const auto& pieces : splits_of(text)) {
    const ReasoningSplit r = run_reasoning(pieces, true);
    EXPECT_EQ(r.reasoning, "thinking...");
    EXPECT_EQ(r.content, "answer");
  }
}

TEST(ReasoningParser, NoThinkTagIsAllContent) {
  const std::string text = "\nJust an answer with </think> inside";
  for (const auto& pieces : splits_of(text)) {
    const ReasoningSplit r = run_reasoning(pieces, false);
    EXPECT_EQ(r.reasoning, "");
    EXPECT_EQ(r.content, text);
  }
}

TEST(ReasoningParser, UnfinishedReasoningStaysReasoning) {
  for (const auto& pieces : splits_of("<think>still going </thi")) {
    const ReasoningSplit r = run_reasoning(pieces, false);
    EXPECT_EQ(r.reasoning, "still going </thi");
    EXPECT_EQ(r.content, "");
  }
}

TEST(ReasoningParser, DetectsAnOpenBlockInThePrompt) {
  EXPECT_TRUE(ReasoningParser::prompt_opens_reasoning("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(ReasoningParser::prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(ReasoningParser::prompt_opens_reasoning("<|im_start|>assistant\n"));
}

// A finished call: name and the concatenated argument pieces.
struct Call {
  std::string name;
  std::string arguments;
};

struct ToolRun {
  std::string content;
  std::vector<Call> calls;
};

ToolRun run_tools(ToolCallFormat format, const std::vector<std::string>& pieces, json tools = json(),
                  bool bare_json = false) {
  ToolCallParser parser(format, std::move(tools));
  parser.accept_bare_json_calls(bare_json);
  ToolRun run;
  auto take = [&](ToolParse p) {
    run.content += p.content;
    for (const auto& d : p.calls) {
      if (d.index == static_cast<int>(run.calls.size())) {
        EXPECT_FALSE(d.name.empty()) << "the first delta of a call names it";
        run.calls.push_back({d.name, ""});
      }
      ASSERT_LT(d.index, static_cast<int>(run.calls.size()));
      EXPECT_TRUE(d.name.empty() || d.name == run.calls[d.index].name);
      run.calls[d.index].arguments += d.arguments;
    }
  };
  for (const auto& p : pieces) take(parser.push(p));
  take(parser.flush());
  return run;
}

TEST(ToolParser, HermesCallsAtEveryByteBoundary) {
  const std::string text =
      "Let me check.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
  for (const auto& pieces : splits_of(text)) {
    const ToolRun r = run_tools(ToolCallFormat::Hermes, pieces);
    EXPECT_EQ(r.content, "Let me check.");
    ASSERT_EQ(r.calls.size(), 2u);
    EXPECT_EQ(r.calls[0].name, "get_weather");
    EXPECT_EQ(json::parse(r.calls[0].arguments), json({{"city", "Paris"}, {"days", 3}}));
    EXPECT_EQ(r.calls[1].name, "get_time");
    EXPECT_EQ(json::parse(r.calls[1].arguments), json::object());
  }
}

TEST(ToolParser, HermesMalformedCallIsContent) {
  const std::string text = "<tool_call>\n{not json}\n</tool_call> after";
  for (const auto& pieces : splits_of(text)) {
    const ToolRun r = run_tools(ToolCallFormat::Hermes, pieces);
    EXPECT_EQ(r.content, text);
    EXPECT_TRUE(r.calls.empty());
  }
}

TEST(ToolParser, HermesUnclosedCompleteJsonStillCounts) {
  const ToolRun r = run_tools(ToolCallFormat::Hermes, {"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n"});
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(json::parse(r.calls[0].arguments), json({{"a", 1}}));
}

TEST(ToolParser, XmlCallsAtEveryByteBoundaryWithSchemaTypes) {
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather", "parameters":
      {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
       "zip": {"type": "string"}, "opts": {"type": "object"}}}}}])");
  const std::string text =
      "Checking.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n"
      "<parameter=days>\n3\n</parameter>\n<parameter=zip>\n10001\n</parameter>\n<parameter=opts>\n{\"metric\": true}\n"
      "</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=noargs>\n</function>\n</tool_call>";
  for (const auto& pieces : splits_of(text)) {
    const ToolRun r = run_tools(ToolCallFormat::Qwen3Xml, pieces, tools);
    EXPECT_EQ(r.content, "Checking.\n");
    ASSERT_EQ(r.calls.size(), 2u);
    EXPECT_EQ(r.calls[0].name, "get_weather");
    EXPECT_EQ(json::parse(r.calls[0].arguments),
              json({{"city", "New York"}, {"days", 3}, {"zip", "10001"}, {"opts", {{"metric", true}}}}));
    EXPECT_EQ(r.calls[1].name, "noargs");
    EXPECT_EQ(json::parse(r.calls[1].arguments), json::object());
  }
}

TEST(ToolParser, XmlStreamsNameBeforeArguments) {
  ToolCallParser p(ToolCallFormat::Qwen3Xml, json());
  ToolParse a = p.push("<tool_call>\n<function=f>\n<parameter=x>\n1");
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0].name, "f");
  EXPECT_EQ(a.calls[0].arguments, "");
  ToolParse b = p.push("\n</parameter>\n");
  ASSERT_EQ(b.calls.size(), 1u);
  EXPECT_EQ(b.calls[0].arguments, "{\"x\": \"1\"");  // no schema: text; the object closes at </function>
  ToolParse c = p.push("</function>");
  ASSERT_EQ(c.calls.size(), 1u);
  EXPECT_EQ(c.calls[0].arguments, "}");
}

TEST(ToolParser, XmlMissingCloseTagsStillGiveValidJson) {
  for (const auto& pieces : splits_of("<tool_call>\n<function=f>\n<parameter=a>\nx\n<parameter=b>\ny\n")) {
    const ToolRun r = run_tools(ToolCallFormat::Qwen3Xml, pieces);
    ASSERT_EQ(r.calls.size(), 1u);
    EXPECT_EQ(json::parse(r.calls[0].arguments), json({{"a", "x"}, {"b", "y"}}));
  }
}

TEST(ToolParser, TextWithoutCallsIsContentAtEveryBoundary) {
  const std::string text = "a < b and <tool is not a call";
  for (ToolCallFormat f : {ToolCallFormat::Hermes, ToolCallFormat::Qwen3Xml})
    for (const auto& pieces : splits_of(text)) {
      const ToolRun r = run_tools(f, pieces);
      EXPECT_EQ(r.content, text);
      EXPECT_TRUE(r.calls.empty());
    }
}

TEST(ToolParser, BareJsonCallOfAKnownToolAtEveryByteBoundary) {
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather"}}])");
  const std::string text = "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}";
  for (const auto& pieces : splits_of(text)) {
    const ToolRun r = run_tools(ToolCallFormat::Hermes, pieces, tools, true);
    EXPECT_EQ(r.content, "");
    ASSERT_EQ(r.calls.size(), 1u);
    EXPECT_EQ(json::parse(r.calls[0].arguments), json({{"city", "Paris"}}));
  }
  // Unknown tool names and other JSON stay content; so does everything with bare JSON off.
  const std::string other = "{\"name\": \"nope\", \"arguments\": {}}";
  EXPECT_EQ(run_tools(ToolCallFormat::Hermes, {other}, tools, true).content, other);
  EXPECT_EQ(run_tools(ToolCallFormat::Hermes, {"{\"a\": 1} and text"}, tools, true).content, "{\"a\": 1} and text");
  EXPECT_EQ(run_tools(ToolCallFormat::Hermes, {text}, tools, false).content, text);
  const ToolRun tagged = run_tools(ToolCallFormat::Hermes, {"{x} <tool_call>\n", text, "\n</tool_call>"}, tools, true);
  EXPECT_EQ(tagged.content, "{x} ");
  EXPECT_EQ(tagged.calls.size(), 1u);
}

TEST(ToolParser, DetectsTheTemplatesFormat) {
  EXPECT_EQ(detect_tool_call_format("... <tool_call>\\n{\"name\": ...").value(), ToolCallFormat::Hermes);
  EXPECT_EQ(detect_tool_call_format("<tool_call>\\n<function=example>").value(), ToolCallFormat::Qwen3Xml);
  EXPECT_FALSE(detect_tool_call_format("{{ messages }}").has_value());
  EXPECT_EQ(parse_tool_call_format("qwen3_xml").value(), ToolCallFormat::Qwen3Xml);
  EXPECT_FALSE(parse_tool_call_format("nope").has_value());
}

}  // namespace
}  // namespace zen::server
