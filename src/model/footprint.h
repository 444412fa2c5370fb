// What a configuration costs, from the config alone (no weights needed): parameters as the
// architecture binds them, KV bytes per token and recurrent-state bytes per sequence. `zen
// inspect` prints these for full checkpoints and for config-only folders (sizing a model
// before downloading it).
#pragma once
#include <cstdint>

#include "model/config.h"

namespace zen {

struct ParameterCount {
  int64_t total = 0;   // every tensor the decoder binds (embeddings, lm_head unless tied)
  int64_t active = 0;  // per token: routed experts counted top-k times of E
};

// Counts the decoder's parameters (text part; vision towers and MTP heads excluded).
ParameterCount count_parameters(const ModelConfig& cfg);

// KV bytes per token at 4 bytes per value (full-attention layers only).
int64_t kv_bytes_per_token_f32(const ModelConfig& cfg);
// Recurrent-state bytes per sequence (f32 conv windows and delta-rule states); 0 without
// linear-attention layers.
int64_t recurrent_state_bytes(const ModelConfig& cfg);

}  // namespace zen
