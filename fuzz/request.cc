// Fuzz target: an HTTP request body through parse_json_body, then parse_chat_request and
// parse_completion_request (both, whatever the body holds), as the /v1/chat/completions and
// /v1/completions routes do. A chat request that parses has its normalized messages, tools
// and template kwargs serialized, as the prompt builder reads them.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_common.h"
#include "server/api_error.h"
#include "server/request.h"

namespace {

// As the server writes an error (responses.cc's to_text): a message may quote the body's
// invalid UTF-8 (nlohmann's "last read: ..."), which is replaced, not thrown on.
std::string error_text(const zen::server::ApiError& e) {
  return e.to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace zen::server;
  volatile size_t sink = 0;
  ojson body;
  try {
    body = parse_json_body(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const ApiError& e) {
    zen::fuzz::expected_error(e);
    sink = sink + error_text(e).size();
    return 0;
  } catch (const zen::Error& e) {
    zen::fuzz::expected_error(e);
    return 0;
  }
  try {
    const GenerationRequest r = parse_chat_request(body);
    sink = sink + r.messages.dump().size() + r.tools.dump().size() + r.template_kwargs.dump().size() +
           r.stop.size() + r.params.sampling.logit_bias.size();
  } catch (const ApiError& e) {
    zen::fuzz::expected_error(e);
    sink = sink + error_text(e).size();
  } catch (const zen::Error& e) {
    zen::fuzz::expected_error(e);
  }
  try {
    const GenerationRequest r = parse_completion_request(body);
    sink = sink + r.prompt_text.size() + r.prompt_ids.size() + r.stop.size();
  } catch (const ApiError& e) {
    zen::fuzz::expected_error(e);
    sink = sink + error_text(e).size();
  } catch (const zen::Error& e) {
    zen::fuzz::expected_error(e);
  }
  return 0;
}
