#include "server/http_server.h"

#include <httplib.h>
#include <malloc.h>

#include <algorithm>
#include <ctime>

#include "attest/digest.h"
#include "base/error.h"
#include "server/api_error.h"
#include "server/chat_page.h"
#include "server/generation.h"
#include "server/http_connection.h"
#include "server/metrics.h"
#include "server/prompt.h"
#include "server/request.h"
#include "server/responses.h"

namespace zen::server {

struct Server::Impl {
  Engine& engine;
  const Tokenizer& tok;
  ServerOptions opt;
  PromptBuilder prompts;
  // Compiled grammars by request text, over the model's (padded) vocabulary.
  grammar::GrammarCache grammars;
  Metrics metrics;
  PipeliningServer http;
  int bound_port = -1;
  const int64_t started = static_cast<int64_t>(std::time(nullptr));

  Impl(Engine& e, const Tokenizer& t, ServerOptions o)
      : engine(e),
        tok(t),
        opt(std::move(o)),
        prompts(t, opt.tool_format),
        grammars(grammar::Vocabulary::from_tokenizer(t, static_cast<int32_t>(e.model().config().vocab_size))) {
    // Token classes of free JSON's states (strings, numbers, literals) are shared by every
    // JSON Schema's equal states: computed now (~0.1 s), the first schema's masks are fast.
    grammar::GrammarSpec json;
    grammar::CompiledGrammar(grammar::build_grammar(json), grammars.vocab_ptr()).precompute();
  }

  void routes();
  void send_error(httplib::Response& res, const ApiError& e);
  // Runs a handler; every exception becomes an OpenAI error response.
  template <typename F>
  void guarded(httplib::Response& res, F&& handler);
  bool authorized(const httplib::Request& req) const;
  // A POST route whose handler gets the body, read here within max_body_bytes however it
  // arrives (Content-Length or chunked: httplib's own limit covers only the former).
  template <typename F>
  void post(const char* path, F handler);
  std::string read_body(const httplib::ContentReader& read, httplib::Response& res) const;
  void generate(std::string_view body, httplib::Response& res, bool chat);
  void tokenize(std::string_view body, httplib::Response& res);
  void detokenize(std::string_view body, httplib::Response& res);
  void check_model(const std::string& model) const;
  // The request's output constraint (response_format & co., or forced / lazy tool calls),
  // compiled; null for free text. Throws ApiError 400 for what cannot be compiled.
  std::shared_ptr<const grammar::CompiledGrammar> output_grammar(const GenerationRequest& r, const BuiltPrompt& prompt);
};

namespace {

constexpr size_t kTrimAfterBodyBytes = size_t{1} << 20;

void send_json(httplib::Response& res, const ojson& j, int status = 200) {
  res.status = status;
  res.set_content(to_text(j), "application/json");
}

const char* error_type(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

}  // namespace

void Server::Impl::send_error(httplib::Response& res, const ApiError& e) {
  metrics.http_error(e.status());
  send_json(res, e.to_json(), e.status());
}

template <typename F>
void Server::Impl::guarded(httplib::Response& res, F&& handler) {
  try {
    handler();
  } catch (const ApiError& e) {
    send_error(res, e);
  } catch (const Error& e) {
    send_error(res, ApiError(400, "invalid_request_error", e.what()));
  } catch (const std::exception& e) {
    send_error(res, ApiError(500, "server_error", std::string("internal error: ") + e.what()));
  }
}

std::string Server::Impl::read_body(const httplib::ContentReader& read, httplib::Response& res) const {
  std::string body;
  bool too_large = false;
  const bool complete = read([&](const char* data, size_t n) {
    too_large = body.size() + n > opt.max_body_bytes;
    if (!too_large) body.append(data, n);
    return !too_large;
  });
  if (too_large || res.status == 413) {
    res.set_header("Connection", "close");  // the rest of the body is never read
    throw ApiError(413, "request_too_large", "request body larger than " + std::to_string(opt.max_body_bytes) + " bytes");
  }
  if (!complete) throw ApiError(400, "invalid_request_error", "the request body ended early or could not be read");
  return body;
}

template <typename F>
void Server::Impl::post(const char* path, F handler) {
  http.Post(path, [this, handler](const httplib::Request&, httplib::Response& res, const httplib::ContentReader& read) {
    size_t body_bytes = 0;
    guarded(res, [&] {
      std::string body = read_body(read, res);
      body_bytes = body.size();
      handler(body, res);
    });
    // A large body (and what was built from it: a 4 MiB prompt is a million token ids) leaves
    // freed pages in this worker thread's malloc arena, which glibc keeps: thirty 4 MiB
    // /tokenize calls left the server at 1,268 MiB without this, 431 MiB with it (398 at start).
    if (body_bytes >= kTrimAfterBodyBytes) malloc_trim(0);
  });
}

bool Server::Impl::authorized(const httplib::Request& req) const {
  if (opt.api_key.empty()) return true;
  return req.get_header_value("Authorization") == "Bearer " + opt.api_key;
}

void Server::Impl::check_model(const std::string& model) const {
  if (!model.empty() && model != opt.model_name)
    throw ApiError(404, "not_found_error", "The model `" + model + "` does not exist (this server serves `" + opt.model_name + "`).", "model");
}

void Server::Impl::generate(std::string_view body_text, httplib::Response& res, bool chat) {
  const ojson body = parse_json_body(body_text);
  GenerationRequest r = chat ? parse_chat_request(body) : parse_completion_request(body);
  check_model(r.model);
  const BuiltPrompt prompt = chat ? prompts.chat(r) : prompts.completion(r);
  const auto n_prompt = static_cast<int64_t>(prompt.ids.size());
  if (!r.max_tokens_given) r.params.max_tokens = std::max<int64_t>(1, engine.context_window() - n_prompt);
  // The model's end-of-turn tokens (<|im_end|>) end generation even when its config names
  // only <|endoftext|> as EOS. They are end-of-sequence tokens too, so ignore_eos (as in vLLM)
  // skips them: its caller wants exactly max_tokens (benchmarks, long-running requests).
  if (!r.params.ignore_eos) r.params.stop_token_ids = tok.stop_ids();

  OutputOptions out;
  out.stop = r.stop;
  if (chat) {
    out.parse_reasoning = opt.parse_reasoning;
    out.starts_in_reasoning = prompt.starts_in_reasoning;
    if (!r.tools.is_null() && r.tool_choice != ToolChoice::None) {
      out.tool_format = opt.tool_format;
      out.tools = r.tools;
      out.tool_prefill = prompt.tool_prefill;
    }
  }
  r.params.grammar = output_grammar(r, prompt);
  auto gen = std::make_shared<Generation>(r, prompt, std::move(out), tok, metrics, opt.model_name);
  // n choices: independent samples (seed + i when seeded), each its own engine request.
  std::vector<uint64_t> ids;
  for (int i = 0; i < gen->num_choices(); ++i) {
    RequestParams params = r.params;
    if (params.sampling.has_seed) params.sampling.seed += static_cast<uint64_t>(i);
    const AddResult added = engine.add(prompt.ids, params, [gen, i](const RequestUpdate& u) { gen->on_update(u, i); });
    if (added.status != AddStatus::Ok)
      for (uint64_t id : ids) engine.abort(id);  // all choices or none
    switch (added.status) {
      case AddStatus::Ok: break;
      case AddStatus::Invalid: throw ApiError(400, "invalid_request_error", added.message);
      case AddStatus::TooLong: throw ApiError(400, "invalid_request_error", added.message, chat ? "messages" : "prompt");
      case AddStatus::QueueFull: throw ApiError(429, "rate_limit_error", added.message);
      case AddStatus::Stopped: throw ApiError(503, "service_unavailable", added.message);
    }
    ids.push_back(added.id);
    Engine* engine_ptr = &engine;
    const uint64_t id = added.id;
    gen->set_abort([engine_ptr, id] { engine_ptr->abort(id); }, i);
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      r.stream ? "text/event-stream" : "application/json",
      [gen](size_t, httplib::DataSink& sink) {
        // Runs outside the handler's guard: nothing may escape into httplib's worker thread.
        try {
          const bool ok = gen->pump([&sink](const std::string& text) { return sink.write(text.data(), text.size()); },
                                    std::chrono::milliseconds(100));
          if (!ok) return false;
          if (gen->done()) sink.done();
          return true;
        } catch (const std::exception&) {
          return false;  // the connection ends; the releaser aborts the engine request
        }
      },
      [gen](bool) {
        if (!gen->done()) gen->client_gone();
      });
}

std::shared_ptr<const grammar::CompiledGrammar> Server::Impl::output_grammar(const GenerationRequest& r,
                                                                            const BuiltPrompt& prompt) {
  using grammar::GrammarSpec;
  using grammar::ToolGrammarSpec;
  std::optional<GrammarSpec> spec = r.grammar;
  std::string param = r.grammar_param;
  const bool tools = r.chat && !r.tools.is_null() && r.tool_choice != ToolChoice::None && opt.tool_format;
  // A forced call is constrained whatever else was asked; with "auto", calls are constrained
  // once opened unless response_format constrains the whole answer.
  if (tools && (r.tool_choice != ToolChoice::Auto || !spec)) {
    GrammarSpec t;
    t.kind = GrammarSpec::Kind::ToolCalls;
    t.tools.format = *opt.tool_format == ToolCallFormat::Hermes ? ToolGrammarSpec::Format::Hermes : ToolGrammarSpec::Format::Qwen3Xml;
    t.tools.mode = r.tool_choice == ToolChoice::Required ? ToolGrammarSpec::Mode::Required
                   : r.tool_choice == ToolChoice::Named  ? ToolGrammarSpec::Mode::Named
                                                         : ToolGrammarSpec::Mode::Auto;
    t.tools.name = r.tool_name;
    t.tools.tools = r.tools;
    spec = std::move(t);
    param = "tools";
  }
  if (!spec) return nullptr;
  // The grammar begins after the reasoning (a forced call's prompt already closed it).
  if (r.chat && opt.parse_reasoning && prompt.tool_prefill.empty())
    spec->reasoning = prompt.starts_in_reasoning ? GrammarSpec::Reasoning::Open : GrammarSpec::Reasoning::Optional;
  try {
    return grammars.get(*spec);
  } catch (const grammar::SchemaError& e) {
    std::string message = e.what();
    if (param == "response_format")
      message = "Invalid schema for response_format '" + r.schema_name + "': " + message;
    throw ApiError(400, "invalid_request_error", message, param == "tools" && !e.path.empty() ? e.path : param);
  } catch (const Error& e) {
    throw ApiError(400, "invalid_request_error", "'" + param + "': " + e.what(), param);
  }
}

void Server::Impl::tokenize(std::string_view body_text, httplib::Response& res) {
  const ojson body = parse_json_body(body_text);
  if (!body.is_object()) throw ApiError(400, "invalid_request_error", "the request body must be a JSON object");
  std::vector<int32_t> ids;
  if (body.contains("messages")) {
    GenerationRequest r = parse_chat_request(body);
    check_model(r.model);
    ids = prompts.chat(r).ids;
  } else {
    auto p = body.find("prompt");
    if (p == body.end() || !p->is_string()) invalid_param("prompt", "must be a string (or send 'messages')");
    auto special = body.find("add_special_tokens");
    if (special != body.end() && !special->is_boolean()) invalid_param("add_special_tokens", "must be a boolean");
    if (auto m = body.find("model"); m != body.end()) {
      if (!m->is_string()) invalid_param("model", "must be a string");
      check_model(m->get<std::string>());
    }
    ids = prompts.tokenize(p->get<std::string>(), special == body.end() || special->get<bool>());
  }
  send_json(res, {{"count", ids.size()}, {"max_model_len", engine.context_window()}, {"tokens", ids}});
}

void Server::Impl::detokenize(std::string_view body_text, httplib::Response& res) {
  const ojson body = parse_json_body(body_text);
  if (!body.is_object()) throw ApiError(400, "invalid_request_error", "the request body must be a JSON object");
  auto t = body.find("tokens");
  if (t == body.end() || !t->is_array()) invalid_param("tokens", "must be an array of token ids");
  std::vector<int32_t> ids;
  for (const auto& id : *t) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= tok.vocab_size())
      invalid_param("tokens", "must hold token ids in [0, ", tok.vocab_size(), ")");
    ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  send_json(res, {{"prompt", tok.decode(ids)}});
}

void Server::Impl::routes() {
  http.set_payload_max_length(opt.max_body_bytes);
  // httplib closes a keep-alive connection after 5 requests by default; clients (and
  // pipelining ones above all) would reconnect all the time.
  http.set_keep_alive_max_count(1000);
  // Each open stream holds a thread; connections beyond these wait in httplib's queue.
  const int threads = opt.http_threads > 0 ? opt.http_threads
                                           : static_cast<int>(std::clamp<int64_t>(2 * engine.options().max_num_seqs + 32, 64, 512));
  http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };

  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    // /health and the chat page (static; its API calls need the key) stay open.
    const bool protected_path = req.path.rfind("/v1/", 0) == 0 || req.path == "/tokenize" || req.path == "/detokenize" ||
                                (req.path == "/metrics" && !opt.open_metrics);
    if (protected_path && !authorized(req)) {
      send_error(res, ApiError(401, "authentication_error", "missing or wrong API key (send 'Authorization: Bearer KEY')"));
      return httplib::Server::HandlerResponse::Handled;
    }
    // Before any body is read: a POST must say how long its body is (or send it chunked), else
    // it would be read to EOF; a declared length over the limit is refused unread.
    if (req.method == "POST") {
      const bool chunked = req.get_header_value("Transfer-Encoding").find("chunked") != std::string::npos;
      if (!chunked && !req.has_header("Content-Length")) {
        res.set_header("Connection", "close");
        send_error(res, ApiError(411, "invalid_request_error", "a POST needs Content-Length or chunked transfer encoding"));
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Statuses httplib sets itself (unknown route 404, oversized body 413, unparsable request
  // 400) get an OpenAI error body too.
  http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string message = "cannot process " + req.method + " " + req.path + " (status " + std::to_string(res.status) + ")";
    if (res.status == 404) message = "no route " + req.method + " " + req.path;
    if (res.status == 413) message = "request body larger than " + std::to_string(opt.max_body_bytes) + " bytes";
    metrics.http_error(res.status);
    send_json(res, ApiError(res.status, error_type(res.status), message).to_json(), res.status);
  });
  http.set_exception_handler([this](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    send_error(res, ApiError(500, "server_error", "internal error"));
  });

  post("/v1/chat/completions", [this](const std::string& body, httplib::Response& res) { generate(body, res, true); });
  post("/v1/completions", [this](const std::string& body, httplib::Response& res) { generate(body, res, false); });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    ojson model = {{"id", opt.model_name}, {"object", "model"}, {"created", started}, {"owned_by", "zen"},
                   {"max_model_len", engine.context_window()}};
    if (opt.weights) {
      std::lock_guard<std::mutex> lock(opt.weights->mu);
      model["weights"] = {{"canonicalization", attest::kCanonicalization},
                          {"root", opt.weights->root.empty() ? ojson() : ojson(opt.weights->root)},
                          {"verified", opt.weights->verified},
                          {"status", !opt.weights->error.empty() ? "error: " + opt.weights->error
                                     : opt.weights->root.empty() ? "computing" : "computed"}};
    }
    send_json(res, {{"object", "list"}, {"data", ojson::array({model})}});
  });
  http.Get("/health", [](const httplib::Request&, httplib::Response& res) { send_json(res, {{"status", "ok"}}); });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.render(engine.stats(), opt.model_name), "text/plain; version=0.0.4");
  });
  post("/tokenize", [this](const std::string& body, httplib::Response& res) { tokenize(body, res); });
  post("/detokenize", [this](const std::string& body, httplib::Response& res) { detokenize(body, res); });
  http.Get("/", [](const httplib::Request&, httplib::Response& res) {
    const std::string_view page = chat_page_html();
    res.set_content(page.data(), page.size(), "text/html; charset=utf-8");
  });
}

Server::Server(Engine& engine, const Tokenizer& tok, ServerOptions options)
    : impl_(std::make_unique<Impl>(engine, tok, std::move(options))) {
  impl_->routes();
}

Server::~Server() = default;

void Server::bind() {
  Impl& m = *impl_;
  if (m.opt.port == 0) {
    m.bound_port = m.http.bind_to_any_port(m.opt.host.c_str());
  } else if (m.http.bind_to_port(m.opt.host.c_str(), m.opt.port)) {
    m.bound_port = m.opt.port;
  }
  if (m.bound_port <= 0) fail("cannot listen on ", m.opt.host, ":", m.opt.port, " (in use, or not an address of this machine)");
}

int Server::port() const { return impl_->bound_port; }

void Server::run() {
  if (impl_->bound_port <= 0) bind();
  impl_->http.listen_after_bind();
}

void Server::stop() { impl_->http.stop(); }

}  // namespace zen::server
