// A generation request between engine updates and the client, without HTTP: SSE chunks and
// JSON bodies, stop strings across tokens (aborting the engine request), usage counts,
// reasoning and tool calls, over a small fake vocabulary.
#include "server/generation.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace zen::server {
namespace {

using nlohmann::json;

// Token id i is the text kPieces[i]; the last one is a control token.
class FakeTokenizer : public Tokenizer {
 public:
  explicit FakeTokenizer(std::vector<std::string> pieces) : pieces_(std::move(pieces)) {}
  std::vector<int32_t> encode(std::string_view, bool, bool) const override { return {}; }
  std::string token_bytes(int32_t id) const override { return pieces_.at(static_cast<size_t>(id)); }
  int32_t vocab_size() const override { return static_cast<int32_t>(pieces_.size()); }
  std::optional<int32_t> token_to_id(std::string_view) const override { return std::nullopt; }
  bool is_special(int32_t id) const override { return pieces_.at(static_cast<size_t>(id)) == "<|im_end|>"; }

 private:
  std::vector<std::string> pieces_;
};

struct Transcript {
  std::vector<json> events;  // SSE data payloads (stream) or the one body
  std::string raw;
  int aborts = 0;
};

// Feeds the tokens one update each (the last update finishes with engine_reason) and pumps.
Transcript run(const FakeTokenizer& tok, GenerationRequest req, OutputOptions out, const std::vector<int32_t>& tokens,
        const std::string& engine_reason = "stop") {
  Metrics metrics;
  BuiltPrompt prompt;
  prompt.ids = {0, 1, 2};
  Generation gen(req, prompt, std::move(out), tok, metrics, "m");
  Transcript r;
  gen.set_abort([&r] { ++r.aborts; });
  for (size_t i = 0; i < tokens.size(); ++i) {
    RequestUpdate u;
    u.tokens.push_back({tokens[i], -0.5f, {}});
    u.prompt_tokens = 3;
    u.cached_prompt_tokens = 2;
    u.completion_tokens = static_cast<int64_t>(i + 1);
    u.finished = i + 1 == tokens.size();
    if (u.finished) u.finish_reason = engine_reason;
    gen.on_update(u);
  }
  for (int i = 0; i < 1000 && !gen.done(); ++i)
    EXPECT_TRUE(gen.pump([&r](const std::string& s) { r.raw += s; return true; }, std::chrono::milliseconds(1)));
  EXPECT_TRUE(gen.done());
  if (!req.stream) {
    r.events.push_back(json::parse(r.raw));
    return r;
  }
  size_t at = 0;
  while ((at = r.raw.find("data: ", at)) != std::string::npos) {
    const size_t end = r.raw.find("\n\n", at);
    const std::string data = r.raw.substr(at + 6, end - at - 6);
    if (data != "[DONE]") r.events.push_back(json::parse(data));
    at = end;
  }
  EXPECT_NE(r.raw.find("data: [DONE]\n\n"), std::string::npos);
  return r;
}

std::string streamed(const Transcript& r, const char* field) {
  std::string text;
  for (const json& e : r.events)
    for (const json& c : e["choices"])
      if (c["delta"].contains(field)) text += c["delta"][field].get<std::string>();
  return text;
}

const FakeTokenizer kTok({"Hel", "lo", " wo", "rld", "<|im_end|>", "\xe2\x82", "\xac", "<think>", "hmm", "</think>",
                          "\n\n", "<tool_call>", "{\"name\": \"f\", ", "\"arguments\": {\"a\": 1}}", "</tool_call>"});

GenerationRequest chat(bool stream) {
  GenerationRequest r;
  r.stream = stream;
  r.include_usage = true;
  return r;
}

TEST(ServerGeneration, StreamsRoleFirstThenDeltasFinishAndUsage) {
  const Transcript r = run(kTok, chat(true), {}, {0, 1, 2, 3, 4});
  ASSERT_GE(r.events.size(), 3u);
  EXPECT_EQ(r.events[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(streamed(r, "content"), "Hello world");
  const json& last = r.events.back();
  EXPECT_TRUE(last["choices"].empty());
  EXPECT_EQ(last["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(last["usage"]["completion_tokens"], 5);
  EXPECT_EQ(last["usage"]["total_tokens"], 8);
  EXPECT_EQ(last["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
  EXPECT_EQ(r.events[r.events.size() - 2]["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(r.aborts, 0);
}

TEST(ServerGeneration, StopStringAcrossTokensEndsAndAbortsOnce) {
  for (bool stream : {true, false}) {
    GenerationRequest req = chat(stream);
    OutputOptions out;
    out.stop = {"o wo"};  // spans "lo" and " wo"
    const Transcript r = run(kTok, req, out, {0, 1, 2, 3, 4});
    EXPECT_EQ(r.aborts, 1);
    const json& usage = stream ? r.events.back()["usage"] : r.events[0]["usage"];
    EXPECT_EQ(usage["completion_tokens"], 3);  // up to the token that completed the stop
    if (stream) {
      EXPECT_EQ(streamed(r, "content"), "Hell");
    } else {
      EXPECT_EQ(r.events[0]["choices"][0]["message"]["content"], "Hell");
      EXPECT_EQ(r.events[0]["choices"][0]["finish_reason"], "stop");
    }
  }
}

TEST(ServerGeneration, SplitCharacterArrivesWhole) {
  const Transcript r = run(kTok, chat(true), {}, {5, 6, 4});
  for (const json& e : r.events)
    for (const json& c : e["choices"])
      if (c["delta"].contains("content")) {
        EXPECT_TRUE(c["delta"]["content"] == "" || c["delta"]["content"] == "\xe2\x82\xac");
      }
  EXPECT_EQ(streamed(r, "content"), "\xe2\x82\xac");
}

TEST(ServerGeneration, ReasoningAndToolCallsStreamedAndWhole) {
  OutputOptions out;
  out.parse_reasoning = true;
  out.tool_format = ToolCallFormat::Hermes;
  const std::vector<int32_t> tokens = {7, 8, 9, 10, 11, 12, 13, 14, 4};
  const Transcript s = run(kTok, chat(true), out, tokens);
  EXPECT_EQ(streamed(s, "reasoning_content"), "hmm");
  EXPECT_EQ(streamed(s, "content"), "");
  std::string name, args;
  for (const json& e : s.events)
    for (const json& c : e["choices"])
      for (const json& tc : c["delta"].value("tool_calls", json::array())) {
        if (tc["function"].contains("name")) name = tc["function"]["name"];
        args += tc["function"]["arguments"].get<std::string>();
      }
  EXPECT_EQ(name, "f");
  EXPECT_EQ(json::parse(args), json({{"a", 1}}));
  EXPECT_EQ(s.events[s.events.size() - 2]["choices"][0]["finish_reason"], "tool_calls");

  const Transcript w = run(kTok, chat(false), out, tokens);
  const json& m = w.events[0]["choices"][0]["message"];
  EXPECT_EQ(m["reasoning_content"], "hmm");
  EXPECT_TRUE(m["content"].is_null());
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(json::parse(m["tool_calls"][0]["function"]["arguments"].get<std::string>()), json({{"a", 1}}));
  EXPECT_EQ(w.events[0]["choices"][0]["finish_reason"], "tool_calls");
}

TEST(ServerGeneration, LengthAndCompletionsShape) {
  GenerationRequest req = chat(false);
  req.chat = false;
  req.params.top_logprobs = 0;
  const Transcript r = run(kTok, req, {}, {0, 1}, "length");
  const json& c = r.events[0]["choices"][0];
  EXPECT_EQ(r.events[0]["object"], "text_completion");
  EXPECT_EQ(c["text"], "Hello");
  EXPECT_EQ(c["finish_reason"], "length");
  EXPECT_EQ(c["logprobs"]["tokens"], json({"Hel", "lo"}));
  EXPECT_EQ(c["logprobs"]["text_offset"], json({0, 3}));
}

TEST(ServerGeneration, EngineErrorBecomesAnErrorObject) {
  const Transcript r = run(kTok, chat(false), {}, {0}, "error");
  EXPECT_TRUE(r.events[0].contains("error"));
}

}  // namespace
}  // namespace zen::server
