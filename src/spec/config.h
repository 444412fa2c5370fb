// --speculative-config: vLLM's keys where vLLM has them. Parsed strictly: an unknown key, a
// wrong type or an out-of-range value is an error that names it.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zen::spec {

struct SpeculativeConfig {
  std::string method;                 // "" (off) | ngram | suffix | draft_model | dflash | mtp
  std::string model;                  // draft_model: the draft checkpoint; dflash: the drafter folder
  int32_t num_speculative_tokens = 0;  // k (the most the controller may pick); 0: the method's default
  int32_t prompt_lookup_min = 2;       // ngram
  int32_t prompt_lookup_max = 5;
  bool adaptive = true;                // false: always verify k drafts when there are any
  // suffix (vLLM's suffix_decoding_* keys)
  int32_t suffix_max_tree_depth = 24;
  int64_t suffix_max_cached_tokens = int64_t{1} << 20;
  double suffix_max_spec_factor = 1.0;
  double suffix_min_token_prob = 0.1;

  // dflash: "q8_0" requantizes the drafter's matrices to Q8_0 for the int8 kernels (faster
  // blocks, slightly different drafts; output stays exact); "": as stored.
  std::string quantization;
  // vLLM's benchmarking mode: "synthetic" accepts drafts by chance at these rates (rates[i]:
  // drafts 0..i all accepted; non-increasing) instead of by the target. Output is not the model's.
  std::string rejection_sample_method = "standard";  // standard | synthetic
  std::vector<double> synthetic_acceptance_rates;

  bool enabled() const { return !method.empty(); }
  // k after defaults: ngram 5, suffix 16, draft_model 5, dflash 15, mtp 3.
  int32_t k() const;
  // Throws zen::Error naming the offending key.
  static SpeculativeConfig parse(std::string_view json);
  void validate() const;
  std::string describe() const;  // one line for the start-up log
};

}  // namespace zen::spec
