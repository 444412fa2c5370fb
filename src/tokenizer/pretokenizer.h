// Pre-tokenizers: split text into the pieces BPE runs on, exactly as the regexes of the model
// families do (hand-written matchers; Oniguruma/HF semantics, which llama.cpp reproduces).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace zen {

enum class PreTokenizerKind {
  // Qwen2 / Qwen3:
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|
  // \s*[\r\n]+|\s+(?!\S)|\s+
  kQwen2,
  // Qwen3.5: as kQwen2 with [\p{L}\p{M}]+ for letters and marks excluded from punctuation.
  kQwen35,
  // Llama 3 ("llama-bpe"): as kQwen2 with \p{N}{1,3}.
  kLlama3,
  // GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kGpt2,
  // Every \p{N} isolated first, then GPT-2 on the rest (SmolLM, StarCoder).
  kDigitsThenGpt2,
};

struct PreTokenizer {
  PreTokenizerKind kind = PreTokenizerKind::kQwen2;
  // Oniguruma's (?i) also folds U+017F (long s) to 's' (HF); llama.cpp's [sS] does not.
  bool fold_long_s = false;

  struct Piece {
    uint32_t begin, end;  // byte offsets into the text
  };
  // Appends the pieces of text (they tile it exactly, in order).
  void split(std::string_view text, std::vector<Piece>& out) const;
};

}  // namespace zen
