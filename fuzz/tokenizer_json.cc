// Fuzz target: tokenizer files through Tokenizer::from_tokenizer_json. The input, split at its
// first NUL byte, is tokenizer.json text and tokenizer_config.json text (empty without a
// NUL); a tokenizer that loads encodes and decodes a few short fixed texts.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_common.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_exercise.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  volatile uint32_t sink = 0;
  const auto [tokenizer_json, config_json] = zen::fuzz::split_at_nul(data, size);
  try {
    const auto tok = zen::Tokenizer::from_tokenizer_json(std::string(tokenizer_json), std::string(config_json));
    sink = sink + zen::fuzz::exercise_tokenizer(*tok);
  } catch (const zen::Error& e) {
    zen::fuzz::expected_error(e);
  }
  return 0;
}
