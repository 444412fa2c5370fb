// matmul: every element equals one vec_dot of the weight row with the quantized activation
// row (bit-exact on the scalar path, within f32 rounding of the scalar reference on the SIMD
// path), and results are batch-invariant: independent of the token count and thread count.
#include "kernels/cpu/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/error.h"
#include "base/numeric.h"
#include "kernels/cpu/kernels_test_util.h"
#include "kernels/cpu/quant.h"

namespace zen::kernels {
namespace {

using testing::random_activations;

using Matrix = testing::RandomMatrix;

// y[t, r] = ref::vec_dot(row r, scalar-quantized activation t), plus the scale of each
// element's terms (sum |w| |x|) for tolerances.
void reference_matmul(const Matrix& m, const std::vector<float>& x, int64_t T, std::vector<float>* y,
                      std::vector<double>* magnitude) {
  const int64_t N = m.view.shape[0], K = m.view.shape[1];
  const size_t row_bytes = dtype_row_bytes(m.view.dtype, K);
  y->assign(static_cast<size_t>(T * N), 0.0f);
  magnitude->assign(static_cast<size_t>(T * N), 0.0);
  std::vector<float> wf(static_cast<size_t>(K));
  for (int64_t t = 0; t < T; ++t) {
    std::vector<uint8_t> act(activation_row_bytes(m.view.dtype, K));
    {
      testing::ScalarOnly off;
      quantize_activation(m.view.dtype, &x[static_cast<size_t>(t * K)], act.data(), K);
    }
    for (int64_t r = 0; r < N; ++r) {
      const uint8_t* row = m.bytes.data() + static_cast<size_t>(r) * row_bytes;
      (*y)[static_cast<size_t>(t * N + r)] = ref::vec_dot(m.view.dtype, row, act.data(), K);
      ref::dequantize_row(m.view.dtype, row, wf.data(), K);
      double mag = 0.0;
      for (int64_t i = 0; i < K; ++i) mag += std::fabs(wf[static_cast<size_t>(i)] * x[static_cast<size_t>(t * K + i)]);
      (*magnitude)[static_cast<size_t>(t * N + r)] = mag;
    }
  }
}

int64_t k_for(DType t, int variant) {
  const int64_t be = dtype_block_elems(t);
  if (be == 256) return variant == 0 ? 256 : 768;
  if (be == 32) return variant == 0 ? 32 * 7 : 32 * 19;
  return variant == 0 ? 37 : 256;
}

std::vector<float> run(const Matrix& m, const std::vector<float>& x, int64_t T, ThreadPool& pool) {
  std::vector<float> y(static_cast<size_t>(T * m.view.shape[0]), -1.0f);
  matmul(m.view, x.data(), T, y.data(), pool);
  return y;
}

bool bits_equal(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

TEST(Matmul, MatchesReferenceForEveryDtypeAndShape) {
  std::mt19937 rng(21);
  ThreadPool pool(2);
  for (DType t : testing::all_weight_dtypes()) {
    for (int variant = 0; variant < 2; ++variant) {
      const int64_t K = k_for(t, variant);
      for (int64_t N : {1, 3, 17, 45}) {
        const Matrix m(rng, t, N, K);
        for (int64_t T : {1, 2, 7, 33}) {
          const auto x = random_activations(rng, T * K);
          std::vector<float> want;
          std::vector<double> mag;
          reference_matmul(m, x, T, &want, &mag);
          {
            testing::ScalarOnly off;
            const auto y = run(m, x, T, pool);
            EXPECT_TRUE(bits_equal(y.data(), want.data(), y.size()))
                << "scalar path " << dtype_name(t) << " N=" << N << " K=" << K << " T=" << T;
          }
          const auto y = run(m, x, T, pool);
          for (size_t i = 0; i < y.size(); ++i) {
            // Q4_1/Q5_1 fold the block minimum in through the f16 activation sum s.
            const double rel = activation_format(t) == ActivationFormat::Q8_1 ? 2e-3 : 2e-5;
            ASSERT_NEAR(y[i], want[i], rel * mag[i] + 1e-30)
                << dtype_name(t) << " N=" << N << " K=" << K << " T=" << T << " element " << i;
          }
        }
      }
    }
  }
}

TEST(Matmul, BatchInvariantAcrossTokenCountsAndThreads) {
  std::mt19937 rng(22);
  ThreadPool pool1(1), pool2(2), pool3(3);
  for (DType t : testing::all_weight_dtypes()) {
    const int64_t K = k_for(t, 1);
    // T > 64 crosses a token tile; N = 45 leaves row tiles and block tiles with remainders.
    const int64_t N = 45, T = 70;
    const Matrix m(rng, t, N, K);
    const auto x = random_activations(rng, T * K);
    const auto batch = run(m, x, T, pool2);
    EXPECT_TRUE(bits_equal(batch.data(), run(m, x, T, pool1).data(), batch.size())) << dtype_name(t) << " 1 thread";
    EXPECT_TRUE(bits_equal(batch.data(), run(m, x, T, pool3).data(), batch.size())) << dtype_name(t) << " 3 threads";
    for (int64_t tok = 0; tok < T; ++tok) {
      const std::vector<float> one(x.begin() + tok * K, x.begin() + (tok + 1) * K);
      const auto y1 = run(m, one, 1, pool2);
      EXPECT_TRUE(bits_equal(y1.data(), &batch[static_cast<size_t>(tok * N)], static_cast<size_t>(N)))
          << dtype_name(t) << " token " << tok << " alone differs from its row in the batch";
    }
    // A prefix of the batch gives the same rows as the whole batch.
    const std::vector<float> prefix(x.begin(), x.begin() + 7 * K);
    EXPECT_TRUE(bits_equal(run(m, prefix, 7, pool3).data(), batch.data(), static_cast<size_t>(7 * N)))
        << dtype_name(t);
  }
}

// Large enough (> 64 KB of weights) that decode also splits rows over the pool.
TEST(Matmul, LargeDecodeIsThreadInvariantAndMatchesBatch) {
  std::mt19937 rng(24);
  ThreadPool pool1(1), pool2(2), pool3(3);
  for (DType t : testing::all_weight_dtypes()) {
    const int64_t K = 1024, N = 301, T = 5;
    const Matrix m(rng, t, N, K);
    const auto x = random_activations(rng, T * K);
    const auto batch = run(m, x, T, pool2);
    for (int64_t tok = 0; tok < T; ++tok) {
      const std::vector<float> one(x.begin() + tok * K, x.begin() + (tok + 1) * K);
      const auto y1 = run(m, one, 1, pool1), y2 = run(m, one, 1, pool2), y3 = run(m, one, 1, pool3);
      const float* want = &batch[static_cast<size_t>(tok * N)];
      EXPECT_TRUE(bits_equal(y1.data(), want, static_cast<size_t>(N))) << dtype_name(t) << " 1 thread";
      EXPECT_TRUE(bits_equal(y2.data(), want, static_cast<size_t>(N))) << dtype_name(t) << " 2 threads";
      EXPECT_TRUE(bits_equal(y3.data(), want, static_cast<size_t>(N))) << dtype_name(t) << " 3 threads";
    }
  }
}

TEST(Matmul, RejectsTruncatedOrUnsupportedTensors) {
  std::mt19937 rng(23);
  ThreadPool pool(1);
  Matrix m(rng, DType::Q8_0, 4, 64);
  const auto x = random_activations(rng, 64);
  std::vector<float> y(4);
  m.view.nbytes -= 1;
  EXPECT_THROW(matmul(m.view, x.data(), 1, y.data(), pool), Error);
  m.view.nbytes += 1;
  m.view.shape = {4, 60};  // not a multiple of the block
  EXPECT_THROW(matmul(m.view, x.data(), 1, y.data(), pool), Error);
  m.view.shape = {4, 64};
  m.view.dtype = DType::I8;
  EXPECT_THROW(matmul(m.view, x.data(), 1, y.data(), pool), Error);
}

}  // namespace
}  // namespace zen::kernels
