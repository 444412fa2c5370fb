// Drives a loaded tokenizer (from fuzzed tokenizer.json or GGUF metadata) over a few short
// fixed texts: encode with and without special tokens, decode, stream-decode, lookups.
#pragma once
#include <cstdint>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace zen::fuzz {

inline uint32_t exercise_tokenizer(const zen::Tokenizer& tok) {
  static const char* const kTexts[] = {
      "Hello, world! 123 <|im_end|> <s></s>",
      " \xC3\xA9t\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\n\n\tx  y\xF0\x9F\x8D\x95",
      "\xFF\xC3 bad utf-8\xE2\x82",
  };
  uint32_t sum = static_cast<uint32_t>(tok.vocab_size() + tok.bos_id() + tok.eos_id());
  for (const char* text : kTexts) {
    for (bool special : {true, false}) {
      const std::vector<int32_t> ids = tok.encode(text, special, special);
      sum += static_cast<uint32_t>(tok.decode(ids, false).size() + tok.decode(ids, true).size());
      zen::StreamingDetokenizer detok(tok);
      for (int32_t id : ids) {
        sum += static_cast<uint32_t>(detok.push(id).size() + tok.token_bytes(id).size());
        sum += tok.is_special(id) ? 1 : 0;
      }
      sum += static_cast<uint32_t>(detok.flush().size());
    }
  }
  for (int32_t id : tok.stop_ids()) sum += static_cast<uint32_t>(tok.token_bytes(id).size());
  sum += static_cast<uint32_t>(tok.token_to_id("<|im_end|>").value_or(0) + tok.token_to_id("a").value_or(0));
  sum += static_cast<uint32_t>(tok.chat_template().size() + tok.bos_token().size() + tok.eos_token().size());
  return sum;
}

}  // namespace zen::fuzz
