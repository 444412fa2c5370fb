// Fuzz target: safetensors bytes (u64 LE header length + JSON header + data) through
// SafetensorsFile, and model.safetensors.index.json text through Checkpoint::open.
//
// SafetensorsFile only takes a path: the input is written to a per-process scratch file.
// The index has no parser of its own (Checkpoint::open_hf_folder reads it from a folder):
// when the input starts with '{' it is also written as the index of a scratch checkpoint
// folder holding a config.json and two valid shards (a.weight, b.weight), which the index
// may name correctly, wrongly, or not at all.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"

namespace {

// A valid safetensors file with one F32 tensor of 2 elements.
std::string tiny_safetensors(const std::string& name) {
  const std::string header =
      "{\"" + name + "\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"__metadata__\":{\"format\":\"pt\"}}";
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + header + std::string(8, '\x01');
}

const std::string& index_folder() {
  static const std::string folder = [] {
    zen::fuzz::write_scratch("ckpt/config.json", "{\"architectures\":[\"LlamaForCausalLM\"]}");
    zen::fuzz::write_scratch("ckpt/model-00001-of-00002.safetensors", tiny_safetensors("a.weight"));
    zen::fuzz::write_scratch("ckpt/model-00002-of-00002.safetensors", tiny_safetensors("b.weight"));
    return zen::fuzz::scratch_dir() + "/ckpt";
  }();
  return folder;
}

uint32_t exercise(const zen::SafetensorsFile& f) {
  uint32_t sum = 0;
  for (const zen::TensorView& t : f.tensors()) {
    sum += zen::fuzz::touch_ends(t.data, t.nbytes);
    sum += static_cast<uint32_t>(t.numel()) + static_cast<uint32_t>(t.shape_str().size());
  }
  for (const auto& [k, v] : f.metadata()) sum += static_cast<uint32_t>(k.size() + v.size());
  return sum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  volatile uint32_t sink = 0;
  const std::string path = zen::fuzz::write_scratch("input.safetensors", data, size);
  try {
    const zen::SafetensorsFile f(path);
    sink = sink + exercise(f);
  } catch (const zen::Error& e) {
    zen::fuzz::expected_error(e);
  }

  if (size > 0 && data[0] == '{') {
    const std::string& folder = index_folder();
    zen::fuzz::write_scratch("ckpt/model.safetensors.index.json", data, size);
    try {
      const auto ck = zen::Checkpoint::open(folder);
      for (const std::string& name : ck->tensor_names()) {
        const zen::TensorView* t = ck->take(name);
        if (t != nullptr) sink = sink + zen::fuzz::touch_ends(t->data, t->nbytes);
      }
      sink = sink + static_cast<uint32_t>(ck->verdict().to_string().size() + ck->total_bytes());
    } catch (const zen::Error& e) {
      zen::fuzz::expected_error(e);
    }
  }
  return 0;
}
