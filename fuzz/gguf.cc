// Fuzz target: GGUF bytes through GgufFile (header, metadata, tensor infos), then, when the
// file opens, ModelConfig::from_gguf and Tokenizer::from_gguf on its metadata; a tokenizer
// that loads encodes and decodes a short fixed text.
//
// GgufFile only takes a path: the input is written to a per-process scratch file.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "io/gguf.h"
#include "model/config.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_exercise.h"

namespace {

uint32_t exercise_metadata(const zen::GgufFile& g) {
  uint32_t sum = g.version() + static_cast<uint32_t>(g.alignment() + g.data_offset());
  for (const auto& [key, v] : g.metadata()) {
    sum += static_cast<uint32_t>(key.size() + v.s.size());
    if (v.type == zen::GgufType::ARRAY) {
      // Walk the in-place arrays: every string's length prefix and bytes, every number.
      for (std::string_view s : v.strings) sum += zen::fuzz::touch(s.data(), s.size());
      if (!v.strings.empty()) sum += static_cast<uint32_t>(v.strings.back().size() + v.strings.text_bytes());
      for (double d : v.numbers) sum += d > 0 ? 1 : 0;
    } else if (v.type != zen::GgufType::STRING) {
      sum += v.as_number() > 0 ? 1 : 0;
    }
    // The typed getters, each on a key of its own type (a mismatch throws zen::Error; that
    // path is taken once per file below, not per key: exceptions are slow under ASan).
    switch (v.type) {
      case zen::GgufType::STRING: sum += static_cast<uint32_t>(g.get_string(key).value_or("").size()); break;
      case zen::GgufType::BOOL: sum += g.get_bool(key).value_or(false) ? 1 : 0; break;
      case zen::GgufType::F32:
      case zen::GgufType::F64: sum += g.get_float(key).value_or(0) > 0 ? 1 : 0; break;
      case zen::GgufType::ARRAY: break;
      default:
        sum += static_cast<uint32_t>(g.get_int(key).value_or(0));
        sum += g.get_float(key).value_or(0) > 0 ? 1 : 0;
    }
  }
  if (!g.metadata().empty()) {
    const auto& [key, v] = *g.metadata().begin();
    try {
      sum += static_cast<uint32_t>(v.type == zen::GgufType::STRING ? g.get_int(key).value_or(0)
                                                                    : g.get_string(key).value_or("").size());
    } catch (const zen::Error& e) {
      zen::fuzz::expected_error(e);
    }
  }
  for (const zen::TensorView& t : g.tensors()) {
    sum += zen::fuzz::touch_ends(t.data, t.nbytes);
    sum += static_cast<uint32_t>(t.numel()) + static_cast<uint32_t>(t.shape_str().size());
  }
  return sum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  volatile uint32_t sink = 0;
  const std::string path = zen::fuzz::write_scratch("input.gguf", data, size);
  std::unique_ptr<zen::GgufFile> g;
  try {
    g = std::make_unique<zen::GgufFile>(path);
    sink = sink + exercise_metadata(*g);
  } catch (const zen::Error& e) {
    zen::fuzz::expected_error(e);
    return 0;
  }
  try {
    const zen::ModelConfig config = zen::ModelConfig::from_gguf(*g);
    config.validate();
    sink = sink + static_cast<uint32_t>(config.num_layers);
  } catch (const zen::Error& e) {
    zen::fuzz::expected_error(e);
  }
  try {
    const auto tok = zen::Tokenizer::from_gguf(*g);
    sink = sink + zen::fuzz::exercise_tokenizer(*tok);
  } catch (const zen::Error& e) {
    zen::fuzz::expected_error(e);
  }
  return 0;
}
