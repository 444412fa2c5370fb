#include "cli/commands.h"

#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <functional>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include "base/error.h"
#include "base/mmap.h"
#include "cli/flags.h"
#include "cli/parallel_flags.h"
#include "cli/speculative_flags.h"
#include "cli/weights_flags.h"
#include "engine/generate.h"
#include "model/footprint.h"
#include "model/hybrid.h"
#include "model/linear.h"
#include "model/model.h"
#include "spec/dflash/drafter.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace zen::cli {
namespace {

namespace fs = std::filesystem;

const FlagSpec kModelFlag{"model", FlagKind::String, "model path: HF folder, .safetensors, or .gguf (default: the installed default model)", {}};
const FlagSpec kThreadsFlag{"threads", FlagKind::Int, "worker threads (default: all cores)", {}};
const FlagSpec kKvQuantFlag{"kv-cache-quant", FlagKind::Choice, "KV cache precision (auto = f32 on the CPU)",
                            {"auto", "f32", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2"}};
const FlagSpec kNvfp4ExactFlag{"nvfp4-exact", FlagKind::Bool, "NVFP4 with f32 activations (exact, slower; default int8 per block of 32)", {}};

std::string executable_dir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : exe.parent_path().string();
}

// Reads a whole file; "-" reads standard input.
std::string read_input_file(const std::string& path) {
  if (path == "-") {
    std::ostringstream os;
    os << std::cin.rdbuf();
    return os.str();
  }
  return read_text_file(path);
}

}  // namespace

int threads_flag(const Flags& f) {
  if (!f.has("threads")) return 0;
  const int64_t n = f.integer("threads", 0);
  const int64_t cores = std::max(1u, std::thread::hardware_concurrency());
  const int64_t most = std::max<int64_t>(4, 4 * cores);
  if (n < 1 || n > most)
    fail("--threads must be in [1, ", most, "] (4 x the ", cores, " cores here; omit it to use every core), got ", n);
  return static_cast<int>(n);
}

std::string resolve_model_path(const std::string& flag_value) {
  if (!flag_value.empty()) return flag_value;
  if (const char* env = std::getenv("ZEN_MODEL"); env != nullptr && *env != '\0') return env;
  const fs::path exe = executable_dir();
  for (const fs::path& base : {exe / "..", exe / ".." / "..", exe}) {
    const fs::path candidate = base / "models" / "default" / "model.gguf";
    if (fs::exists(candidate)) return fs::weakly_canonical(candidate).string();
  }
  fail("no --model given and the default model is not installed (run ./setup.sh, or set ZEN_MODEL)");
}

namespace {

// zen run through the serving engine (one request), which owns the verifier, proposers and
// controller, and the window pool of sliding layers; timings match generate()'s: prefill up to
// the first token, decode after it.
GenerateResult generate_with_engine(Model& model, const std::vector<int32_t>& ids, const GenerateOptions& opts,
                                    EngineOptions eo, const std::function<void(int32_t)>& on_token, std::string& summary) {
  eo.kv_dtype = opts.kv_dtype;
  eo.max_num_seqs = 1;
  eo.context_window = std::min<int64_t>(model.config().max_position_embeddings,
                                        static_cast<int64_t>(ids.size()) + std::max<int64_t>(opts.max_tokens, 1));
  // The default budget (a fraction of the RAM; pages are committed only as the cache fills),
  // so a draft model's share never shrinks the window below this request.
  Engine engine(model, eo);
  std::fprintf(stderr, "%s\n", engine.describe().c_str());
  RequestParams params;
  params.max_tokens = std::max<int64_t>(opts.max_tokens, 1);
  params.ignore_eos = opts.ignore_eos;
  params.sampling = opts.sampling;
  // The tokenizer's end-of-turn tokens stop it too, as they stop generate() and the server.
  if (!opts.ignore_eos && model.tokenizer() != nullptr) params.stop_token_ids = model.tokenizer()->stop_ids();
  GenerateResult r;
  r.prompt_tokens = static_cast<int64_t>(ids.size());
  const auto start = std::chrono::steady_clock::now();
  double first = -1;
  const AddResult added = engine.add(ids, params, [&](const RequestUpdate& u) {
    for (size_t i = 0; i < u.tokens.size(); ++i) {
      const int32_t token = u.tokens[i].token;
      if (first < 0) first = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      // The stop token ends the output without being part of it, as in generate().
      if (u.finished && u.finish_reason == "stop" && i + 1 == u.tokens.size() && is_stop_token(model, token)) break;
      r.tokens.push_back(token);
      on_token(token);
    }
    if (u.finished) r.finish_reason = u.finish_reason == "error" ? "error: " + u.error : u.finish_reason;
  });
  if (added.status != AddStatus::Ok) fail(added.message);
  engine.run_until_idle();
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.prefill_seconds = std::max(first, 0.0);
  r.decode_seconds = total - r.prefill_seconds;
  if (eo.speculative.enabled()) summary = speculation_summary(engine.stats());
  if (const spec::Controller* c = engine.controller()) {
    summary += "step time by tokens (forward, sampling, verification; measured): " + c->cost().describe() + "\n";
    char line[128];
    std::snprintf(line, sizeof line, "controller calibration: %.2f (accepted drafts realised over expected, at most 1)\n",
                  c->calibration());
    summary += line;
  }
  return r;
}

// zen run goes through the engine when it speculates, and when the model has sliding-window
// layers: the engine keeps those layers' K/V in a pool bounded by the window, where
// generate()'s one-sequence cache keeps every position.
bool run_through_engine(const Model& model, const GenerateOptions& opts, const EngineOptions& eo) {
  const ModelConfig& c = model.config();  // a pipeline stage's: kv_budget_window_layers covers the others
  return opts.max_tokens > 0 && (eo.speculative.enabled() || c.num_window_kv_layers() > 0 || c.kv_budget_window_layers > 0);
}

// "1,2,3" or "1 2 3" -> ids, each checked against the vocabulary.
std::vector<int32_t> parse_token_ids(const std::string& text, int64_t vocab) {
  std::vector<int32_t> ids;
  std::string word;
  auto flush = [&] {
    if (word.empty()) return;
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size() || v < 0 || v >= vocab)
      fail("--prompt-ids: '", word, "' is not a token id of this model (0 to ", vocab - 1, ")");
    ids.push_back(static_cast<int32_t>(v));
    word.clear();
  };
  for (char ch : text) {
    if (ch == ',' || ch == ' ') flush();
    else word += ch;
  }
  flush();
  if (ids.empty()) fail("--prompt-ids: no token ids given");
  return ids;
}

// zen run --prompt-ids: generates and prints the ids (for models without a tokenizer), through
// the engine or generate() as with a text prompt.
int run_on_ids(Model& model, const std::vector<int32_t>& ids, const GenerateOptions& opts, const LoadOptions& load,
               const EngineOptions& engine_options) {
  std::string spec_summary;
  const GenerateResult r = run_through_engine(model, opts, engine_options)
                               ? generate_with_engine(model, ids, opts, engine_options, [](int32_t) {}, spec_summary)
                               : generate(model, ids, opts);
  std::string line;
  for (size_t i = 0; i < r.tokens.size(); ++i) line += (i ? " " : "") + std::to_string(r.tokens[i]);
  std::printf("%s\n", line.c_str());
  std::fprintf(stderr, "finish: %s\n", r.finish_reason.c_str());
  std::fputs(spec_summary.c_str(), stderr);
  std::fputs(tensor_parallel_summary(load).c_str(), stderr);
  return 0;
}

}  // namespace

int run_command(int argc, char** argv) {
  Flags f("run", with_parallel_flags(with_weights_flags(with_speculative_flags({kModelFlag,
                  {"prompt", FlagKind::String, "the prompt text (or use --prompt-file)", {}},
                  {"prompt-file", FlagKind::String, "read the prompt from a file ('-' for stdin)", {}},
                  {"prompt-ids", FlagKind::String,
                   "the prompt as token ids (\"1,2,3\"); the output is printed as ids (no tokenizer needed)", {}},
                  {"chat", FlagKind::Bool, "format the prompt as a user turn with the model's chat template", {}},
                  {"system", FlagKind::String, "system message for --chat", {}},
                  {"no-think", FlagKind::Bool, "--chat: pass enable_thinking=false to the template (Qwen3)", {}},
                  {"max-tokens", FlagKind::Int, "tokens to generate at most (default 256)", {}},
                  {"temperature", FlagKind::Float, "sampling temperature; 0 = greedy (default 0)", {}},
                  {"top-k", FlagKind::Int, "keep the k most likely tokens; 0 = off", {}},
                  {"top-p", FlagKind::Float, "nucleus sampling mass in (0, 1]; 1 = off", {}},
                  {"min-p", FlagKind::Float, "drop tokens below min-p x the top probability", {}},
                  {"repetition-penalty", FlagKind::Float, "> 1 discourages repeats (prompt and output)", {}},
                  {"presence-penalty", FlagKind::Float, "OpenAI presence penalty in [-2, 2]", {}},
                  {"frequency-penalty", FlagKind::Float, "OpenAI frequency penalty in [-2, 2]", {}},
                  {"seed", FlagKind::Int, "random seed (same seed, same output)", {}},
                  {"ignore-eos", FlagKind::Bool, "keep generating to --max-tokens past end-of-sequence", {}},
                  kKvQuantFlag, kNvfp4ExactFlag, kThreadsFlag, kHelpFlag}))));
  f.parse(argc, argv, 2);
  if (wants_help(f)) return 0;
  if (!f.positional().empty()) fail("unexpected argument '", f.positional()[0], "' (the prompt goes in --prompt)");
  EngineOptions engine_options;
  apply_speculative_flags(f, engine_options);
  const bool by_ids = f.has("prompt-ids");
  if (f.has("prompt") + f.has("prompt-file") + by_ids != 1)
    fail("give exactly one of --prompt TEXT, --prompt-file PATH or --prompt-ids IDS");
  if (by_ids && f.flag("chat")) fail("--chat needs a text prompt, not --prompt-ids");
  const std::string prompt_text =
      f.has("prompt") ? f.str("prompt") : f.has("prompt-file") ? read_input_file(f.str("prompt-file")) : "";

  GenerateOptions opts;
  opts.max_tokens = f.integer("max-tokens", 256);
  if (opts.max_tokens < 0) fail("--max-tokens must be >= 0, got ", opts.max_tokens);
  opts.ignore_eos = f.flag("ignore-eos");
  opts.kv_dtype = parse_kv_cache_quant(f.str("kv-cache-quant", "auto"));
  SamplingParams& s = opts.sampling;
  s.temperature = static_cast<float>(f.number("temperature", 0.0));
  s.top_k = static_cast<int32_t>(f.integer("top-k", 0));
  s.top_p = static_cast<float>(f.number("top-p", 1.0));
  s.min_p = static_cast<float>(f.number("min-p", 0.0));
  s.repetition_penalty = static_cast<float>(f.number("repetition-penalty", 1.0));
  s.presence_penalty = static_cast<float>(f.number("presence-penalty", 0.0));
  s.frequency_penalty = static_cast<float>(f.number("frequency-penalty", 0.0));
  s.has_seed = f.has("seed");
  s.seed = static_cast<uint64_t>(f.integer("seed", 0));
  s.validate();  // its messages name the parameter (flags spell it with '-')

  LoadOptions load;
  load.n_threads = threads_flag(f);
  load.nvfp4_exact_activations = f.flag("nvfp4-exact");
  load.load_tokenizer = !by_ids;
  apply_parallel_flags(f, load);
  const std::string model_path = resolve_model_path(f.str("model"));
  verify_weights_flag(f, model_path, load.n_threads);
  auto model = Model::load(model_path, load);
  if (serve_as_worker(*model, load)) return 0;
  if (by_ids)
    return run_on_ids(*model, parse_token_ids(f.str("prompt-ids"), model->config().vocab_size), opts, load,
                      engine_options);
  const Tokenizer& tok = *model->tokenizer();

  std::string text = prompt_text;
  if (f.flag("chat")) {
    if (tok.chat_template().empty()) fail("--chat: this model has no chat template");
    nlohmann::json messages = nlohmann::json::array();
    if (f.has("system")) messages.push_back({{"role", "system"}, {"content", f.str("system")}});
    messages.push_back({{"role", "user"}, {"content", prompt_text}});
    nlohmann::json ctx = {{"messages", messages},
                          {"add_generation_prompt", true},
                          {"bos_token", tok.bos_token()},
                          {"eos_token", tok.eos_token()}};
    if (f.flag("no-think")) ctx["enable_thinking"] = false;
    text = ChatTemplate(tok.chat_template()).render(ctx);
  }
  const bool chat = f.flag("chat");
  const std::vector<int32_t> ids = tok.encode(text, /*parse_special=*/chat, !(chat && tok.starts_with_bos_text(text)));

  StreamingDetokenizer detok(tok);
  auto print_token = [&](int32_t id) {
    const std::string piece = detok.push(id);
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  };
  GenerateResult r;
  std::string spec_summary;
  if (run_through_engine(*model, opts, engine_options)) {
    r = generate_with_engine(*model, ids, opts, engine_options, print_token, spec_summary);
  } else {
    r = generate(*model, ids, opts, [&](int32_t id) {
      print_token(id);
      return true;
    });
  }
  const std::string rest = detok.flush();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  const auto n_gen = static_cast<int64_t>(r.tokens.size());
  std::fprintf(stderr, "prefill: %" PRId64 " tokens in %.3f s (%.2f tok/s)\n", r.prompt_tokens, r.prefill_seconds,
               static_cast<double>(r.prompt_tokens) / std::max(1e-9, r.prefill_seconds));
  const int64_t decoded = std::max<int64_t>(0, n_gen - 1);
  std::fprintf(stderr, "decode: %" PRId64 " tokens in %.3f s (%.2f tok/s), finish: %s\n", n_gen, r.decode_seconds,
               static_cast<double>(decoded) / std::max(1e-9, r.decode_seconds), r.finish_reason.c_str());
  std::fputs(spec_summary.c_str(), stderr);
  std::fputs(tensor_parallel_summary(load).c_str(), stderr);
  return 0;
}

int tokenize_command(int argc, char** argv) {
  Flags f("tokenize", {{"tokenizer", FlagKind::String, "tokenizer.json, a model folder, or a .gguf", {}},
                       {"no-special", FlagKind::Bool, "treat special-token text as plain text", {}},
                       {"add-bos", FlagKind::Bool, "prepend BOS when the model adds one", {}},
                       kHelpFlag});
  f.parse(argc, argv, 2);
  if (wants_help(f)) return 0;
  if (f.positional().size() != 1) fail("give the text as one argument: zen tokenize --tokenizer PATH TEXT");
  auto tok = Tokenizer::load(resolve_model_path(f.str("tokenizer")));
  const std::vector<int32_t> ids = tok->encode(f.positional()[0], !f.flag("no-special"), f.flag("add-bos"));
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
  std::printf("%s\n", line.c_str());
  return 0;
}

int perplexity_command(int argc, char** argv) {
  Flags f("perplexity", {kModelFlag,
                         {"file", FlagKind::String, "text file to score", {}},
                         {"ctx", FlagKind::Int, "window size in tokens (default 512)", {}},
                         {"chunks", FlagKind::Int, "score only the first N windows (default: all)", {}},
                         {"batch", FlagKind::Int, "tokens per forward pass (default 256)", {}},
                         {"dump-logits", FlagKind::String, "write the f32 logits [tokens x vocab] to this .npy", {}},
                         kKvQuantFlag, kNvfp4ExactFlag, kThreadsFlag, kHelpFlag});
  f.parse(argc, argv, 2);
  if (wants_help(f)) return 0;
  if (!f.has("file")) fail("--file is required (the text to score)");
  const int64_t batch = f.integer("batch", 256);
  if (batch <= 0) fail("--batch must be positive, got ", batch);
  LoadOptions load;
  load.n_threads = threads_flag(f);
  load.nvfp4_exact_activations = f.flag("nvfp4-exact");
  auto model = Model::load(resolve_model_path(f.str("model")), load);
  const Tokenizer& tok = *model->tokenizer();
  const std::vector<int32_t> ids = tok.encode(read_input_file(f.str("file")), /*parse_special=*/false);
  const PerplexityResult r =
      perplexity(*model, ids, f.integer("ctx", 512), f.integer("chunks", 0), f.str("dump-logits"), batch,
                 parse_kv_cache_quant(f.str("kv-cache-quant", "auto")));
  std::fprintf(stderr, "scored %" PRId64 " tokens in %.2f s (%.1f tok/s)\n", r.tokens_scored, r.seconds,
               static_cast<double>(r.tokens_scored) / std::max(1e-9, r.seconds));
  std::printf("mean nll: %.6f\nperplexity: %.4f\n", r.mean_nll, r.perplexity);
  return 0;
}

std::string human_count(int64_t n) {
  const double p = static_cast<double>(n);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f %s", p >= 1e9 ? p / 1e9 : p / 1e6, p >= 1e9 ? "B" : "M");
  return buf;
}

void print_experts(const ModelConfig& c) {
  if (c.num_experts <= 0) return;
  int64_t sparse = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) sparse += c.is_sparse_layer(l) ? 1 : 0;
  std::printf("experts: %" PRId64 ", top-%" PRId64 " (%s), expert intermediate %" PRId64 ", shared expert %" PRId64
              ", sparse layers %" PRId64 " of %" PRId64 "\n",
              c.num_experts, c.num_experts_per_tok, c.norm_topk_prob ? "renormalised" : "raw",
              c.moe_intermediate_size, c.shared_expert_intermediate_size, sparse, c.num_layers);
}

// Layer schedule, KV and recurrent-state sizes: what serving this config costs per token and
// per sequence.
void print_footprint(const ModelConfig& c) {
  if (c.num_linear_layers() > 0)
    std::printf("layer schedule: %" PRId64 " linear attention (Gated DeltaNet) + %" PRId64 " full attention\n",
                c.num_linear_layers(), c.num_kv_layers());
  std::printf("KV cache bytes per token (f32): %" PRId64 " (%" PRId64 " attention layers)\n", kv_bytes_per_token_f32(c),
              c.num_kv_layers());
  std::string sliding;
  for (int64_t l = 0; l < c.num_layers; ++l)
    if (c.attention_window(l) > 0)
      sliding += (sliding.empty() ? "" : ", ") + std::to_string(l) + ":" + std::to_string(c.attention_window(l));
  // The KV pool still keeps every position of a sliding layer; the window bounds the attention.
  if (!sliding.empty()) std::printf("sliding-window attention (layer:window): %s\n", sliding.c_str());
  if (c.num_linear_layers() > 0) {
    const int64_t state = recurrent_state_bytes(c);
    std::printf("recurrent state bytes per sequence (f32): %" PRId64 " (%.2f MiB)\n", state,
                static_cast<double>(state) / (1 << 20));
  }
}

// A folder with config.json and no weights: describe the model from its config alone.
bool is_config_only_folder(const std::string& path) {
  if (!fs::is_directory(path) || !fs::exists(fs::path(path) / "config.json")) return false;
  for (const auto& entry : fs::directory_iterator(path))
    if (entry.path().extension() == ".safetensors" || entry.path().filename() == "model.safetensors.index.json")
      return false;
  return true;
}

int inspect_config_only(const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text_file((fs::path(path) / "config.json").string()));
  } catch (const nlohmann::json::exception& e) {
    fail(path, "/config.json: invalid JSON: ", e.what());
  }
  const ModelConfig c = ModelConfig::from_hf(j);
  const ParameterCount params = count_parameters(c);
  std::printf("path: %s\n", path.c_str());
  std::printf("format: config only (no weights)\n");
  std::printf("architecture: %s\n", c.architecture.c_str());
  std::printf("parameters: %" PRId64 " (%s)", params.total, human_count(params.total).c_str());
  if (params.active != params.total)
    std::printf(", active per token %" PRId64 " (%s)", params.active, human_count(params.active).c_str());
  std::printf("\n");
  std::printf("layers: %" PRId64 ", hidden: %" PRId64 ", intermediate: %" PRId64 ", heads: %" PRId64 " (kv %" PRId64
              ", dim %" PRId64 "), vocab: %" PRId64 "\n",
              c.num_layers, c.hidden_size, c.intermediate_size, c.num_heads, c.num_kv_heads, c.head_dim, c.vocab_size);
  print_experts(c);
  std::printf("context length: %" PRId64 "\n", c.max_position_embeddings);
  print_footprint(c);
  return 0;
}

// A DFlash drafter folder: config.json with dflash_config, or a DFlash architecture.
bool is_dflash_folder(const std::string& path) {
  if (!fs::is_directory(path) || !fs::exists(fs::path(path) / "config.json")) return false;
  try {
    const auto j = nlohmann::json::parse(read_text_file((fs::path(path) / "config.json").string()));
    if (j.contains("dflash_config")) return true;
    const auto a = j.find("architectures");
    return a != j.end() && a->is_array() && !a->empty() && a->front().is_string() &&
           a->front().get<std::string>().find("DFlash") != std::string::npos;
  } catch (const nlohmann::json::exception&) {
    return false;  // inspect's own load reports the bad JSON
  }
}

int inspect_drafter(const std::string& path) {
  auto ckpt = Checkpoint::open(path);
  const spec::dflash::DrafterConfig c = spec::dflash::DrafterConfig::from_json(ckpt->hf_config());
  const ModelConfig& d = c.decoder;
  int64_t params = 0;
  for (const std::string& name : ckpt->tensor_names()) params += ckpt->peek(name)->numel();
  std::printf("path: %s\n", path.c_str());
  std::printf("format: %s block drafter (borrows the target's embedding and output head)\n", c.v2() ? "DFlash 2" : "DFlash");
  if (c.v2())
    std::printf("DFlash 2: dynamic causal convolutions of %" PRId64 " taps in groups of %" PRId64
                " channels around attention and MLP; candidate selector over the top %" PRId64 " logits, rank %" PRId64 "\n",
                c.conv_kernel, c.conv_group, c.selector_top_k, c.selector_rank);
  std::printf("draft parameters: %" PRId64 " (%s)\n", params, human_count(params).c_str());
  std::printf("draft layers: %" PRId64 ", hidden: %" PRId64 ", intermediate: %" PRId64 ", heads: %" PRId64
              " (kv %" PRId64 ", dim %" PRId64 "), vocab: %" PRId64 "\n",
              d.num_layers, d.hidden_size, d.intermediate_size, d.num_heads, d.num_kv_heads, d.head_dim, d.vocab_size);
  for (int64_t l = 0; l < d.num_layers; ++l) {
    const int64_t w = d.attention_window(l);
    std::printf("  layer %" PRId64 ": %s, %s", l, w > 0 ? "sliding_attention" : "full_attention",
                c.causal[static_cast<size_t>(l)] ? "causal" : "bidirectional in the block");
    if (w > 0) std::printf(", window %" PRId64, w);
    std::printf("\n");
  }
  std::string taps;
  for (int32_t id : c.target_layer_ids) taps += (taps.empty() ? "" : ", ") + std::to_string(id);
  std::printf("taps: target layers %s (fc %" PRId64 " -> %" PRId64 ")\n", taps.c_str(), c.tap_width(), d.hidden_size);
  std::printf("block size: %" PRId64 " (anchor + %" PRId64 " drafted), mask token %d\n", c.block_size, c.block_size - 1,
              c.mask_token_id);
  // As the engine stores them: the full layers beside the target's KV, the sliding ones in a
  // window store of whole blocks (spec/dflash/window_store.h).
  const int64_t block = KvPool::kDefaultBlockSize;
  const auto window_bytes = static_cast<int64_t>(
      c.max_window() > 0 ? spec::dflash::WindowStore::bytes(c.kv_config(true), c.max_window(), block, 1) : 0);
  std::printf("draft KV (f32): %" PRId64 " bytes per context token for the full layers (beside the target's KV); the "
              "sliding layers read at most %" PRId64 " bytes per sequence, kept in %" PRId64
              " bytes (blocks of %" PRId64 "), whatever the context length\n",
              c.kv_bytes_per_token(), c.kv_bytes_sliding(), window_bytes, block);
  return 0;
}

int inspect_command(int argc, char** argv) {
  Flags f("inspect", {kHelpFlag});
  f.parse(argc, argv, 2);
  if (wants_help(f)) return 0;
  if (f.positional().size() != 1) fail("give one checkpoint path: zen inspect PATH");
  if (is_config_only_folder(f.positional()[0])) return inspect_config_only(f.positional()[0]);
  if (is_dflash_folder(f.positional()[0])) return inspect_drafter(f.positional()[0]);
  LoadOptions load;
  load.load_tokenizer = false;
  load.strict = false;
  load.n_threads = 1;
  auto model = Model::load(f.positional()[0], load);
  const ModelConfig& c = model->config();
  const Checkpoint& ck = model->checkpoint();
  int64_t params = 0;
  std::map<std::string, std::pair<int64_t, size_t>> by_dtype;  // dtype -> tensors, bytes
  auto ends_with = [](const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  for (const auto& name : ck.tensor_names()) {
    const TensorView* t = ck.peek(name);
    // Parameters are logical weights: scale tensors are metadata, NVFP4 packs two per byte.
    const bool is_scale = ends_with(name, "_scale") || ends_with(name, "_scale_2") || ends_with(name, "_scale_inv");
    const bool packed_fp4 = t->dtype == DType::U8 && ck.has(name + "_scale");
    if (!is_scale) params += packed_fp4 ? 2 * t->numel() : t->numel();
    auto& e = by_dtype[dtype_name(t->dtype)];
    ++e.first;
    e.second += t->nbytes;
  }
  std::printf("path: %s\n", ck.path().c_str());
  std::printf("format: %s\n", ck.format() == CheckpointFormat::Gguf ? "gguf"
                              : ck.format() == CheckpointFormat::HfFolder ? "hf-folder" : "safetensors");
  std::printf("architecture: %s\n", c.architecture.c_str());
  const double p = static_cast<double>(params);
  std::printf("parameters: %" PRId64 " (%.3f %s)\n", params, p >= 1e9 ? p / 1e9 : p / 1e6, p >= 1e9 ? "B" : "M");
  std::printf("layers: %" PRId64 ", hidden: %" PRId64 ", intermediate: %" PRId64 ", heads: %" PRId64 " (kv %" PRId64
              ", dim %" PRId64 "), vocab: %" PRId64 "\n",
              c.num_layers, c.hidden_size, c.intermediate_size, c.num_heads, c.num_kv_heads, c.head_dim, c.vocab_size);
  print_experts(c);
  std::printf("context length: %" PRId64 "\n", c.max_position_embeddings);
  const char* scaling = c.rope_scaling == RopeScaling::Yarn ? "yarn" : c.rope_scaling == RopeScaling::Linear ? "linear" : "none";
  std::printf("rope: theta %g, scaling %s (factor %g)\n", c.rope_theta, scaling, c.rope_factor);
  // GGUF has no tie flag: llama.cpp ties when output.weight is absent.
  const bool tied = ck.format() == CheckpointFormat::Gguf ? !ck.has("output.weight") : c.tie_word_embeddings;
  std::printf("tied embeddings: %s\n", tied ? "yes" : "no");
  std::printf("dtypes:");
  for (const auto& [name, e] : by_dtype)
    std::printf(" %s x%" PRId64 " (%.1f MiB)", name.c_str(), e.first, static_cast<double>(e.second) / (1 << 20));
  std::printf("\n");
  const QuantConfig quant = QuantConfig::from_checkpoint(ck);
  if (quant.algo != QuantAlgo::None || !quant.layers.empty())
    std::printf("quantization: %s (%zu per-module entries, %zu excluded patterns; from %s)\n",
                quant.layers.empty() ? quant_algo_name(quant.algo) : "mixed", quant.layers.size(),
                quant.exclude.size(), quant.source.c_str());
  if (const GgufFile* g = ck.gguf()) {
    if (auto ft = g->get_int("general.file_type")) std::printf("gguf file_type: %" PRId64 "\n", *ft);
    if (auto name = g->get_string("general.name")) std::printf("name: %s\n", name->c_str());
  }
  print_footprint(c);
  if (const auto* hybrid = dynamic_cast<const HybridModel*>(model.get()))
    std::printf("MTP: %s\n", hybrid->mtp_status().c_str());
  const LoadVerdict v = ck.verdict();
  std::printf("strict load: %s\n", v.ok() ? "ok" : "FAILED");
  if (!v.ok() || !v.ignored.empty()) std::printf("%s", v.to_string().c_str());
  return v.ok() ? 0 : 1;
}

}  // namespace zen::cli
