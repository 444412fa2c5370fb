#include "model/mlp.h"

#include "kernels/cpu/ops.h"

namespace zen {

namespace {
// gate = silu(gate) * up over n rows of `width`, rows shared out over the pool for a batch.
void silu_mul_rows(float* gate, const float* up, int64_t n, int64_t width, ThreadPool& pool) {
  const auto rows = [&](int64_t r0, int64_t r1, int) {
    kernels::silu_mul(gate + r0 * width, up + r0 * width, (r1 - r0) * width, gate + r0 * width);
  };
  if (n >= 4 && pool.size() > 1) pool.parallel_for(n, rows);
  else rows(0, n, 0);
}
}  // namespace

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
  silu_mul_rows(scratch.gate.data(), scratch.up.data(), n, f.w_gate.rows, pool);
  f.w_down.matmul(scratch.gate.data(), n, out, pool);
}

}  // namespace zen
