#include "model/mlp.h"

#include "kernels/cpu/ops.h"

namespace zen {

void feed_forward(const FeedForward& f, const float* xn, int64_t n, float* out, ThreadPool& pool,
                  FeedForwardScratch& scratch) {
  if (f.sparse) return moe_forward(f.moe, xn, n, out, pool, scratch.moe);
  const auto size = static_cast<size_t>(n * f.w_gate.rows);
  if (scratch.gate.size() < size) {
    scratch.gate.resize(size);
    scratch.up.resize(size);
  }
  f.w_gate.matmul(xn, n, scratch.gate.data(), pool);
  f.w_up.matmul(xn, n, scratch.up.data(), pool);
  kernels::silu_mul(scratch.gate.data(), scratch.up.data(), static_cast<int64_t>(size), scratch.gate.data());
  f.w_down.matmul(scratch.gate.data(), n, out, pool);
}

}  // namespace zen
