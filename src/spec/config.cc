#include "spec/config.h"

#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.h"
#include "spec/controller.h"

namespace zen::spec {

int32_t SpeculativeConfig::k() const {
  if (num_speculative_tokens > 0) return num_speculative_tokens;
  if (method == "dflash") return 15;  // the Qwen drafts' block of 16 (the engine takes the drafter's own)
  if (method == "suffix") return 16;
  if (method == "mtp") return 3;
  return 5;
}

SpeculativeConfig SpeculativeConfig::parse(std::string_view text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    fail("--speculative-config is not valid JSON: ", e.what());
  }
  if (!j.is_object()) fail("--speculative-config must be a JSON object, e.g. '{\"method\": \"ngram\"}'");
  SpeculativeConfig c;
  auto integer = [](const nlohmann::json& v, const std::string& key, int64_t lo, int64_t hi) {
    if (!v.is_number_integer()) fail("--speculative-config: \"", key, "\" must be an integer");
    const auto x = v.get<int64_t>();
    if (x < lo || x > hi) fail("--speculative-config: \"", key, "\" must be in [", lo, ", ", hi, "], got ", x);
    return x;
  };
  auto real = [](const nlohmann::json& v, const std::string& key, double lo, double hi) {
    if (!v.is_number()) fail("--speculative-config: \"", key, "\" must be a number");
    const auto x = v.get<double>();
    if (!(x >= lo && x <= hi)) fail("--speculative-config: \"", key, "\" must be in [", lo, ", ", hi, "], got ", x);
    return x;
  };
  for (const auto& [key, v] : j.items()) {
    if (key == "method") {
      if (!v.is_string()) fail("--speculative-config: \"method\" must be a string");
      c.method = v.get<std::string>();
    } else if (key == "model") {
      if (!v.is_string()) fail("--speculative-config: \"model\" must be a path");
      c.model = v.get<std::string>();
    } else if (key == "num_speculative_tokens") {
      c.num_speculative_tokens = static_cast<int32_t>(integer(v, key, 1, kMaxDraftTokens));
    } else if (key == "prompt_lookup_min") {
      c.prompt_lookup_min = static_cast<int32_t>(integer(v, key, 1, 64));
    } else if (key == "prompt_lookup_max") {
      c.prompt_lookup_max = static_cast<int32_t>(integer(v, key, 1, 64));
    } else if (key == "adaptive") {
      if (!v.is_boolean()) fail("--speculative-config: \"adaptive\" must be true or false");
      c.adaptive = v.get<bool>();
    } else if (key == "suffix_decoding_max_tree_depth") {
      c.suffix_max_tree_depth = static_cast<int32_t>(integer(v, key, 1, 64));
    } else if (key == "suffix_decoding_max_cached_tokens") {
      c.suffix_max_cached_tokens = integer(v, key, 0, int64_t{1} << 24);
    } else if (key == "suffix_decoding_max_spec_factor") {
      c.suffix_max_spec_factor = real(v, key, 0, 64);
    } else if (key == "suffix_decoding_min_token_prob") {
      c.suffix_min_token_prob = real(v, key, 0, 1);
    } else if (key == "quantization") {
      if (!v.is_string() || (v != "q8_0" && v != "none"))
        fail("--speculative-config: \"quantization\" must be \"q8_0\" or \"none\"");
      c.quantization = v == "none" ? "" : v.get<std::string>();
    } else if (key == "rejection_sample_method") {
      if (!v.is_string() || (v != "standard" && v != "synthetic"))
        fail("--speculative-config: \"rejection_sample_method\" must be \"standard\" or \"synthetic\"");
      c.rejection_sample_method = v.get<std::string>();
    } else if (key == "synthetic_acceptance_rates") {
      if (!v.is_array() || v.empty() || v.size() > kMaxDraftTokens)
        fail("--speculative-config: \"synthetic_acceptance_rates\" must be a list of 1 to ", kMaxDraftTokens, " rates");
      for (const auto& r : v) c.synthetic_acceptance_rates.push_back(real(r, key, 0, 1));
    } else {
      fail("--speculative-config: unknown key \"", key,
           "\" (known: method, model, num_speculative_tokens, prompt_lookup_min, prompt_lookup_max, adaptive, "
           "suffix_decoding_max_tree_depth, suffix_decoding_max_cached_tokens, suffix_decoding_max_spec_factor, "
           "suffix_decoding_min_token_prob, quantization, rejection_sample_method, synthetic_acceptance_rates)");
    }
  }
  c.validate();
  return c;
}

void SpeculativeConfig::validate() const {
  if (method.empty()) fail("--speculative-config: \"method\" is required (ngram, suffix, draft_model, dflash or mtp)");
  if (method != "ngram" && method != "suffix" && method != "draft_model" && method != "dflash" && method != "mtp")
    fail("--speculative-config: unknown method \"", method, "\" (ngram, suffix, draft_model, dflash or mtp)");
  if (method == "draft_model" && model.empty()) fail("--speculative-config: method draft_model needs \"model\": PATH");
  // dflash without a model: the target's folder's dflash2/ or dflash/ (the CLI looks).
  if (method != "draft_model" && method != "dflash" && !model.empty())
    fail("--speculative-config: \"model\" is only for methods draft_model and dflash, not ", method);
  // The global trie holds up to depth x cached tokens nodes of 16 bytes.
  if (int64_t{suffix_max_tree_depth} * suffix_max_cached_tokens > (int64_t{1} << 27))
    fail("--speculative-config: suffix_decoding_max_tree_depth x suffix_decoding_max_cached_tokens may be at most 2^27 (",
         "2 GiB of trie), got ", suffix_max_tree_depth, " x ", suffix_max_cached_tokens);
  if (!quantization.empty() && method != "dflash")
    fail("--speculative-config: \"quantization\" is only for method dflash, not ", method);
  if ((rejection_sample_method == "synthetic") != !synthetic_acceptance_rates.empty())
    fail("--speculative-config: \"rejection_sample_method\": \"synthetic\" and \"synthetic_acceptance_rates\" go together");
  for (size_t i = 1; i < synthetic_acceptance_rates.size(); ++i)
    if (synthetic_acceptance_rates[i] > synthetic_acceptance_rates[i - 1])
      fail("--speculative-config: \"synthetic_acceptance_rates\" must be non-increasing (entry i: drafts 0..i all accepted)");
  if (prompt_lookup_max < prompt_lookup_min)
    fail("--speculative-config: prompt_lookup_max (", prompt_lookup_max, ") is below prompt_lookup_min (",
         prompt_lookup_min, ")");
}

std::string SpeculativeConfig::describe() const {
  std::ostringstream s;
  s << "Speculative decoding: " << method << ", k up to " << k() << (adaptive ? ", adaptive" : ", fixed");
  if (method == "ngram") s << ", n-gram " << prompt_lookup_min << ".." << prompt_lookup_max;
  if (method == "draft_model" || method == "dflash") s << ", draft " << model;
  if (!quantization.empty()) s << " (requantized to " << quantization << ")";
  if (!synthetic_acceptance_rates.empty()) {
    s << ", SYNTHETIC acceptance (benchmarking only, output is not the model's):";
    for (double r : synthetic_acceptance_rates) s << " " << r;
  }
  return s.str();
}

}  // namespace zen::spec
