// The feed-forward half of a decoder layer, shared by the dense and hybrid models: SwiGLU,
//   out = down(silu(gate(x)) * up(x)),
// or, on sparse layers, a mixture of experts (model/moe.h).
#pragma once
#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "model/linear.h"
#include "model/moe.h"

namespace zen {

struct FeedForward {
  Linear w_gate;  // [I, H]   dense layers
  Linear w_up;    // [I, H]
  Linear w_down;  // [H, I]
  bool sparse = false;  // ModelConfig::is_sparse_layer: `moe` replaces the three above
  MoeWeights moe;
};

struct FeedForwardScratch {
  std::vector<float> gate, up;  // [n, I]
  MoeScratch moe;
};

// out[n, H] = ffn(xn[n, H]); out must not alias xn.
void feed_forward(const FeedForward& f, const float* xn, int64_t n, float* out, ThreadPool& pool,
                  FeedForwardScratch& scratch);

}  // namespace zen
