// Request validation: every malformed or out-of-range field is a 400 naming the parameter.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "server/api_error.h"
#include "server/request.h"

namespace zen::server {
namespace {

// The parameter an invalid chat body is rejected for ("" when accepted).
std::string rejected_param(const std::string& body_text, bool chat = true) {
  try {
    const ojson body = parse_json_body(body_text);
    if (chat) parse_chat_request(body);
    else parse_completion_request(body);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    return e.param().empty() ? "<none>" : e.param();
  }
  return "";
}

std::string chat_with(const std::string& extra) {
  return R"({"messages": [{"role": "user", "content": "hi"}])" + (extra.empty() ? "" : ", " + extra) + "}";
}

TEST(ServerRequest, AcceptsAFullChatRequest) {
  const ojson body = parse_json_body(chat_with(
      R"("model": "m", "stream": true, "stream_options": {"include_usage": true}, "temperature": 0.5,
         "top_p": 0.9, "top_k": 40, "min_p": 0.05, "presence_penalty": 1, "frequency_penalty": -1, "seed": 7,
         "max_completion_tokens": 12, "stop": ["a", "b"], "logprobs": true, "top_logprobs": 3,
         "chat_template_kwargs": {"enable_thinking": false},
         "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
         "tool_choice": {"type": "function", "function": {"name": "f"}})"));
  const GenerationRequest r = parse_chat_request(body);
  EXPECT_TRUE(r.stream && r.include_usage);
  EXPECT_FLOAT_EQ(r.params.sampling.temperature, 0.5f);
  EXPECT_EQ(r.params.sampling.top_k, 40);
  EXPECT_TRUE(r.params.sampling.has_seed);
  EXPECT_EQ(r.params.max_tokens, 12);
  EXPECT_EQ(r.stop.size(), 2u);
  EXPECT_EQ(r.params.top_logprobs, 3);
  EXPECT_EQ(r.tool_choice, ToolChoice::Named);
  EXPECT_EQ(r.tool_name, "f");
  EXPECT_EQ(r.template_kwargs["enable_thinking"], false);
}

TEST(ServerRequest, NamesTheOffendingParameter) {
  EXPECT_EQ(rejected_param(chat_with(R"("temperature": "hot")")), "temperature");
  EXPECT_EQ(rejected_param(chat_with(R"("temperature": 3)")), "temperature");
  EXPECT_EQ(rejected_param(chat_with(R"("top_p": 0)")), "top_p");
  EXPECT_EQ(rejected_param(chat_with(R"("max_tokens": 0)")), "max_tokens");
  EXPECT_EQ(rejected_param(chat_with(R"("max_tokens": 1e300)")), "max_tokens");
  EXPECT_EQ(rejected_param(chat_with(R"("max_tokens": 99999999999999999999999)")), "max_tokens");
  EXPECT_EQ(rejected_param(chat_with(R"("max_tokens": 2.5)")), "max_tokens");
  EXPECT_EQ(rejected_param(chat_with(R"("n": 17)")), "n");
  EXPECT_EQ(rejected_param(chat_with(R"("stop": 5)")), "stop");
  EXPECT_EQ(rejected_param(chat_with(R"("stop": [""])")), "stop");
  EXPECT_EQ(rejected_param(chat_with(R"("stream": "yes")")), "stream");
  EXPECT_EQ(rejected_param(chat_with(R"("top_logprobs": 3)")), "top_logprobs");
  EXPECT_EQ(rejected_param(chat_with(R"("logprobs": true, "top_logprobs": 50)")), "top_logprobs");
  EXPECT_EQ(rejected_param(chat_with(R"("seed": "x")")), "seed");
  EXPECT_EQ(rejected_param(chat_with(R"("tool_choice": "auto")")), "tool_choice");
  EXPECT_EQ(rejected_param(chat_with(R"("tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "g"}})")),
            "tool_choice.function.name");
  EXPECT_EQ(rejected_param(chat_with(R"("tools": [{"type": "function"}])")), "tools[0].function");
  EXPECT_EQ(rejected_param(chat_with(R"("chat_template_kwargs": [])")), "chat_template_kwargs");
  EXPECT_EQ(rejected_param(R"({"messages": []})"), "messages");
  EXPECT_EQ(rejected_param(R"({"messages": [{"role": "wizard", "content": "x"}]})"), "messages[0].role");
  EXPECT_EQ(rejected_param(R"({"messages": [{"role": "user", "content": 5}]})"), "messages[0].content");
  EXPECT_EQ(rejected_param(R"({"messages": [{"role": "user"}]})"), "messages[0].content");
  EXPECT_EQ(rejected_param(R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]}]})"),
            "messages[0].tool_calls[].function.arguments");
  EXPECT_EQ(rejected_param(chat_with(R"("continue_final_message": true)")), "continue_final_message");  // last is user
  EXPECT_EQ(rejected_param(R"({"messages": [{"role": "assistant", "content": "x"}], "continue_final_message": true,
                               "add_generation_prompt": true})"), "continue_final_message");
  EXPECT_EQ(rejected_param(R"({"prompt": 5})", false), "prompt");
  EXPECT_EQ(rejected_param(R"({"prompt": ["a", "b"]})", false), "prompt");
  EXPECT_EQ(rejected_param(R"({"prompt": [1, -2]})", false), "prompt");
  EXPECT_EQ(rejected_param(R"({"prompt": "x", "logprobs": 99})", false), "logprobs");
  EXPECT_EQ(rejected_param(chat_with(R"("tools": [{"type": "function", "function": {"name": ")" + std::string(257, 'f') +
                                     R"("}}])")),
            "tools[0].function.name");
  std::string tools = R"("tools": [)";
  for (int i = 0; i <= 256; ++i) tools += std::string(i ? "," : "") + R"({"type": "function", "function": {"name": "f"}})";
  EXPECT_EQ(rejected_param(chat_with(tools + "]")), "tools");
  std::string messages = R"({"messages": [)";
  for (int i = 0; i <= 10000; ++i) messages += std::string(i ? "," : "") + R"({"role": "user", "content": "hi"})";
  EXPECT_EQ(rejected_param(messages + "]}"), "messages");
  for (const char* bias : {R"("logit_bias": [1])", R"("logit_bias": {"abc": 1})", R"("logit_bias": {"-3": 1})",
                           R"("logit_bias": {"12x": 1})", R"("logit_bias": {"5": 101})", R"("logit_bias": {"5": "x"})",
                           R"("logit_bias": {"99999999999": 1})"})
    EXPECT_EQ(rejected_param(chat_with(bias)), "logit_bias") << bias;
}

TEST(ServerRequest, LogitBiasMapsTokenIdsToBiases) {
  const GenerationRequest r = parse_chat_request(parse_json_body(chat_with(R"("logit_bias": {"7": -100, "42": 2.5})")));
  const std::vector<std::pair<int32_t, float>> want = {{7, -100.0f}, {42, 2.5f}};
  EXPECT_EQ(r.params.sampling.logit_bias, want);
  std::string many = R"("logit_bias": {)";
  for (int i = 0; i <= 1024; ++i) many += (i ? ", \"" : "\"") + std::to_string(i) + "\": 1";
  EXPECT_EQ(rejected_param(chat_with(many + "}")), "logit_bias");
}

TEST(ServerRequest, RejectsMalformedBodiesWithoutParsingThemDeeply) {
  EXPECT_EQ(rejected_param("{not json"), "<none>");
  EXPECT_EQ(rejected_param("[1, 2]"), "<none>");
  EXPECT_EQ(rejected_param(std::string(100000, '[')), "<none>");       // deep nesting
  EXPECT_EQ(rejected_param("{\"messages\": \"\xff\xfe\"}"), "<none>");  // invalid UTF-8
  EXPECT_EQ(rejected_param(""), "<none>");
  // Tool-call arguments arrive as JSON text inside a string, past the body's depth check: they
  // get the same limits. 300,000 levels (as fuzz/corpus/request/regress_deep_tool_arguments.json,
  // deeper) overflowed the stack while the request was normalized.
  const std::string deep = std::string(300000, '[') + std::string(300000, ']');
  EXPECT_EQ(rejected_param(R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": ")" +
                           deep + R"("}}]}]})"),
            "messages[0].tool_calls[].function.arguments");
}

TEST(ServerRequest, ContentPartsAndToolCallArgumentsAreNormalized) {
  const GenerationRequest r = parse_chat_request(parse_json_body(R"({"messages": [
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "f", "arguments": "{\"x\": 1}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "42"}]})"));
  EXPECT_EQ(r.messages[0]["content"], "ab");
  EXPECT_EQ(r.messages[1]["tool_calls"][0]["function"]["arguments"]["x"], 1);  // an object for the template
  EXPECT_EQ(r.messages[2]["tool_call_id"], "c1");
}

TEST(ServerRequest, CompletionPromptForms) {
  EXPECT_EQ(parse_completion_request(parse_json_body(R"({"prompt": "abc"})")).prompt_text, "abc");
  EXPECT_EQ(parse_completion_request(parse_json_body(R"({"prompt": ["abc"]})")).prompt_text, "abc");
  const GenerationRequest ids = parse_completion_request(parse_json_body(R"({"prompt": [1, 2, 3], "logprobs": 2})"));
  EXPECT_TRUE(ids.prompt_is_ids);
  EXPECT_EQ(ids.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(ids.params.top_logprobs, 2);
}

// Mutated bodies (byte flips, cuts, insertions of JSON punctuation) never escape as anything
// but an ApiError: no other exception, no crash.
TEST(ServerRequest, MutatedBodiesOnlyEverGiveApiErrors) {
  const std::vector<std::string> seeds = {
      chat_with(R"("temperature": 0.5, "stop": ["a"], "logprobs": true, "top_logprobs": 2, "max_tokens": 5)"),
      R"({"messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function",
          "function": {"name": "f", "arguments": "{\"x\": [1, 2]}"}}]}, {"role": "tool", "content": "1"}],
          "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
          "tool_choice": "required", "chat_template_kwargs": {"enable_thinking": true}})",
      R"({"prompt": [1, 2, 3], "echo": true, "logprobs": 3, "stream": true, "stream_options": {"include_usage": true}})"};
  const std::string alphabet = "{}[]\",:0123456789-.eE truefalsnul\\\x80\xff";
  std::mt19937 rng(1234);
  int accepted = 0, rejected = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string body = seeds[static_cast<size_t>(i) % seeds.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !body.empty(); ++e) {
      const size_t at = rng() % body.size();
      switch (rng() % 4) {
        case 0: body[at] = alphabet[rng() % alphabet.size()]; break;
        case 1: body.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
        case 2: body.erase(at, 1 + rng() % 8); break;
        default: body.resize(at); break;
      }
    }
    try {
      const ojson j = parse_json_body(body);
      if (j.is_object() && j.contains("prompt")) parse_completion_request(j);
      else parse_chat_request(j);
      ++accepted;
    } catch (const ApiError& err) {
      EXPECT_EQ(err.status(), 400);
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 10000);
  EXPECT_GT(accepted, 10);  // some mutations stay valid: the parser is not rejecting everything
}

// One object with a huge number of keys is refused while parsing (ordered_json's key lookup
// is linear, so 400k keys took 101 s); nested objects count their own keys; the limit itself
// passes.
TEST(JsonBody, ObjectsWithTooManyKeysAreRefusedWhileParsing) {
  auto object_of = [](int64_t n) {
    std::string s = "{";
    for (int64_t i = 0; i < n; ++i) s += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":0";
    return s + "}";
  };
  EXPECT_EQ(parse_json_body(object_of(kMaxObjectKeys)).size(), static_cast<size_t>(kMaxObjectKeys));
  try {
    parse_json_body(R"({"messages": [], "x": )" + object_of(400000) + "}");
    ADD_FAILURE() << "400k keys accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_NE(std::string(e.what()).find("more than 10000 keys"), std::string::npos) << e.what();
  }
  const std::string two = "{\"a\": " + object_of(kMaxObjectKeys) + ", \"b\": " + object_of(kMaxObjectKeys) + "}";
  EXPECT_EQ(parse_json_body(two).size(), 2u);
}

}  // namespace
}  // namespace zen::server
