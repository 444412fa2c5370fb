// Fuzz target: a checkpoint folder's config.json text through ModelConfig::from_hf, as
// Checkpoint::open reads it (invalid JSON is refused before), then the per-layer queries the
// model builders make of a config that passed validation.
//
// (The sizing of `zen inspect`, model/footprint.h, is not linked in: it pulls the CPU kernels,
// two of which clang 14 cannot compile; see CMakeLists.txt.)
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "fuzz_common.h"
#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  volatile int64_t sink = 0;
  const nlohmann::json config =
      nlohmann::json::parse(std::string_view(reinterpret_cast<const char*>(data), size), nullptr,
                            /*allow_exceptions=*/false);
  if (config.is_discarded()) return 0;
  try {
    const zen::ModelConfig c = zen::ModelConfig::from_hf(config);
    int64_t n = c.num_kv_layers() + c.num_linear_layers() + c.rotary_dim();
    for (int64_t layer = 0; layer < c.num_layers; ++layer)
      n += c.kv_layer_index(layer) + (c.is_sparse_layer(layer) ? 1 : 0) + (c.is_full_attention(layer) ? 1 : 0);
    sink = sink + n;
  } catch (const zen::Error& e) {
    zen::fuzz::expected_error(e);
  }
  return 0;
}
