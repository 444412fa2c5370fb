// f32 vector ops: the dispatched (AVX2) versions against the scalar references on odd sizes,
// the references against f64 formulas, and the vector exp over its whole range.
#include "kernels/cpu/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/kernels_test_util.h"
#include "kernels/cpu/ops_avx2.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/quant.h"

namespace zen::kernels {
namespace {

const int64_t kSizes[] = {1, 7, 8, 15, 17, 33, 64, 100, 896, 4864};

std::vector<float> random_vector(std::mt19937& rng, int64_t n, float scale = 1.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = normal(rng);
  return v;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rel, double abs_tol,
                  const char* what, int64_t n) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], rel * std::fabs(want[i]) + abs_tol) << what << " n=" << n << " i=" << i;
}

TEST(Ops, RmsnormMatchesReferenceAndFormula) {
  std::mt19937 rng(31);
  for (int64_t n : kSizes) {
    const auto x = random_vector(rng, n, 3.0f), w = random_vector(rng, n);
    std::vector<float> want(x.size()), got(x.size());
    ref::rmsnorm(x.data(), w.data(), 1e-6f, n, want.data());
    double ss = 0.0;
    for (float v : x) ss += static_cast<double>(v) * v;
    const double scale = 1.0 / std::sqrt(ss / static_cast<double>(n) + 1e-6);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_NEAR(want[static_cast<size_t>(i)], x[static_cast<size_t>(i)] * scale * w[static_cast<size_t>(i)],
                  1e-6 * std::fabs(x[static_cast<size_t>(i)] * scale * w[static_cast<size_t>(i)]) + 1e-12);
    rmsnorm(x.data(), w.data(), 1e-6f, n, got.data());
    expect_close(got, want, 1e-6, 0.0, "rmsnorm", n);
    std::vector<float> in_place = x;  // out aliasing x
    rmsnorm(in_place.data(), w.data(), 1e-6f, n, in_place.data());
    expect_close(in_place, want, 1e-6, 0.0, "rmsnorm in place", n);
  }
}

TEST(Ops, AddAxpyDotMatchReference) {
  std::mt19937 rng(32);
  for (int64_t n : kSizes) {
    const auto a = random_vector(rng, n), b = random_vector(rng, n);
    std::vector<float> y1 = a, y2 = a;
    ref::add_inplace(y1.data(), b.data(), n);
    add_inplace(y2.data(), b.data(), n);
    EXPECT_EQ(y1, y2) << "add n=" << n;  // exact: one rounding either way

    y1 = a;
    y2 = a;
    ref::axpy_f32(0.37f, b.data(), y1.data(), n);
    axpy_f32(0.37f, b.data(), y2.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const size_t k = static_cast<size_t>(i);
      ASSERT_NEAR(y2[k], y1[k], 1e-6 * (std::fabs(a[k]) + std::fabs(0.37f * b[k])) + 1e-30) << "axpy n=" << n;
    }

    double mag = 0.0, exact = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
      mag += std::fabs(a[i] * b[i]);
      exact += static_cast<double>(a[i]) * b[i];
    }
    EXPECT_NEAR(ref::dot_f32(a.data(), b.data(), n), exact, 1e-6 * mag * std::sqrt(double(n)) + 1e-30);
    EXPECT_NEAR(dot_f32(a.data(), b.data(), n), exact, 1e-6 * mag * std::sqrt(double(n)) + 1e-30) << "dot n=" << n;
  }
}

// The attention block ops on odd head sizes and row counts, rows strided as in a cache block:
// dots near the f64 value, and each one the same bits whatever tile it is computed in (alone,
// or among other query rows and keys); axpy_rows exactly axpy_f32 row by row.
using DotTile = void (*)(const float* const*, int64_t, const float*, int64_t, int64_t, int64_t, float, float*, int64_t);
using AxpyRows = void (*)(const float*, int64_t, const float*, int64_t, int64_t, int64_t, float*, int64_t, int64_t);
using Axpy = void (*)(float, const float*, float*, int64_t);
using Dot = float (*)(const float*, const float*, int64_t);

// same_as_dot: the path's dot_f32 when its tile must reproduce it bit for bit (every path but
// AVX-512's, whose 16-lane tile sums in its own order); null: no such requirement.
void check_attention_block_ops(DotTile dot_tile, AxpyRows axpy_rows, Axpy axpy, Dot same_as_dot, const char* path) {
  SCOPED_TRACE(path);
  std::mt19937 rng(36);
  for (int64_t n : {1, 7, 8, 15, 17, 33, 64, 100, 128, 256}) {
    const int64_t stride = n + 5;
    for (int64_t count : {1, 2, 3, 4, 5, 7, 8, 13, 16}) {
      const auto rows = random_vector(rng, count * stride);
      for (int64_t n_q : {1, 3, 4, 6, 9}) {
        const auto qs = random_vector(rng, n_q * stride);
        std::vector<const float*> q(static_cast<size_t>(n_q));
        for (int64_t r = 0; r < n_q; ++r) q[static_cast<size_t>(r)] = qs.data() + r * stride;
        const int64_t out_stride = count + 2;
        std::vector<float> got(static_cast<size_t>(n_q * out_stride));
        dot_tile(q.data(), n_q, rows.data(), stride, count, n, 0.125f, got.data(), out_stride);
        for (int64_t r = 0; r < n_q; ++r)
          for (int64_t j = 0; j < count; ++j) {
            double exact = 0.0, mag = 0.0;
            for (int64_t i = 0; i < n; ++i) {
              const double prod = static_cast<double>(q[static_cast<size_t>(r)][i]) * rows[static_cast<size_t>(j * stride + i)];
              exact += prod;
              mag += std::fabs(prod);
            }
            const float value = got[static_cast<size_t>(r * out_stride + j)];
            ASSERT_NEAR(value, 0.125 * exact, 0.125 * 1e-6 * mag * std::sqrt(double(n)) + 1e-30)
                << "dot_tile n=" << n << " count=" << count << " r=" << r << " j=" << j;
            float alone = 0.0f;
            dot_tile(&q[static_cast<size_t>(r)], 1, rows.data() + j * stride, stride, 1, n, 0.125f, &alone, 1);
            ASSERT_EQ(value, alone) << "dot_tile depends on its tile, n=" << n << " n_q=" << n_q << " count=" << count
                                    << " r=" << r << " j=" << j;
            if (same_as_dot != nullptr) {
              ASSERT_EQ(value, same_as_dot(q[static_cast<size_t>(r)], rows.data() + j * stride, n) * 0.125f)
                  << "dot_tile differs from dot_f32, n=" << n << " n_q=" << n_q << " count=" << count << " r=" << r
                  << " j=" << j;
            }
          }
      }

      for (int64_t n_acc : {1, 2, 3, 4, 5, 7, 9}) {  // accumulator rows sharing the block (GQA heads)
        const int64_t p_stride = count + 3, acc_stride = n + 2;
        const auto p = random_vector(rng, n_acc * p_stride), acc0 = random_vector(rng, n_acc * acc_stride);
        std::vector<float> blocked = acc0, row_by_row = acc0, reference = acc0;
        axpy_rows(p.data(), p_stride, rows.data(), stride, count, n, blocked.data(), acc_stride, n_acc);
        for (int64_t r = 0; r < n_acc; ++r)
          for (int64_t j = 0; j < count; ++j)
            axpy(p[static_cast<size_t>(r * p_stride + j)], rows.data() + j * stride, row_by_row.data() + r * acc_stride, n);
        ASSERT_EQ(blocked, row_by_row) << "axpy_rows n=" << n << " count=" << count << " rows=" << n_acc;
        ref::axpy_rows_f32(p.data(), p_stride, rows.data(), stride, count, n, reference.data(), acc_stride, n_acc);
        expect_close(blocked, reference, 1e-5, 1e-5, "axpy_rows vs reference", n);
      }
    }
  }
}

// Every path this CPU has (the dispatched one, and AVX2 under AVX-512), and the reference.
TEST(Ops, AttentionBlockOpsMatchReference) {
  check_attention_block_ops(dot_tile_f32, axpy_rows_f32, axpy_f32, use_avx512() ? nullptr : dot_f32, "dispatched");
  check_attention_block_ops(ref::dot_tile_f32, ref::axpy_rows_f32, ref::axpy_f32, ref::dot_f32, "reference");
#if ZEN_HAVE_X86_SIMD
  if (use_avx2())
    check_attention_block_ops(avx2::dot_tile_f32, avx2::axpy_rows_f32, avx2::axpy_f32, avx2::dot_f32, "avx2");
#endif
}

TEST(Ops, SiluMulMatchesReference) {
  std::mt19937 rng(33);
  for (int64_t n : kSizes) {
    auto g = random_vector(rng, n, 4.0f);
    const auto u = random_vector(rng, n);
    if (n > 4) {
      g[0] = -100.0f;  // exp(-g) overflows: silu -> -0
      g[1] = 100.0f;
      g[2] = 0.0f;
    }
    std::vector<float> want(g.size()), got(g.size());
    ref::silu_mul(g.data(), u.data(), n, want.data());
    silu_mul(g.data(), u.data(), n, got.data());
    expect_close(got, want, 1e-6, 1e-38, "silu_mul", n);
    std::vector<float> in_place = g;
    silu_mul(in_place.data(), u.data(), n, in_place.data());
    expect_close(in_place, want, 1e-6, 1e-38, "silu_mul in place", n);
  }
}

TEST(Ops, SoftmaxMatchesReference) {
  std::mt19937 rng(34);
  for (int64_t n : kSizes) {
    auto x = random_vector(rng, n, 5.0f);
    if (n > 3) x[1] = -std::numeric_limits<float>::infinity();  // masked position
    std::vector<float> want = x, got = x;
    ref::softmax_inplace(want.data(), n);
    softmax_inplace(got.data(), n);
    expect_close(got, want, 2e-6, 1e-30, "softmax", n);
    double sum = 0.0;
    for (float v : got) sum += v;
    EXPECT_NEAR(sum, 1.0, 1e-5);
    if (n > 3) {
      EXPECT_EQ(got[1], 0.0f);
    }
  }
}

TEST(Ops, VectorExpAccurateOverWholeRange) {
  // Dense sweep over the finite range plus the edges.
  std::vector<float> x;
  for (float v = -110.0f; v < 90.0f; v += 0.00731f) x.push_back(v);
  const float specials[] = {0.0f, -0.0f, 88.72f, 88.73f, -87.33f, -87.34f, -103.0f, 1e-8f, -1e-8f,
                            std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
  x.insert(x.end(), std::begin(specials), std::end(specials));
  std::vector<float> got(x.size());
  exp_f32(x.data(), static_cast<int64_t>(x.size()), got.data());
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(static_cast<double>(x[i]));
    if (std::isinf(want) || want > std::numeric_limits<float>::max()) {
      EXPECT_TRUE(std::isinf(got[i]) && got[i] > 0) << "x=" << x[i];
    } else if (want < std::numeric_limits<float>::min()) {
      EXPECT_NEAR(got[i], want, 2e-45 + 1e-6 * want) << "x=" << x[i];  // subnormal: absolute
    } else {
      ASSERT_NEAR(got[i], want, 4.0 * 6e-8 * want) << "x=" << x[i];  // ~4 ulp
    }
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  float out;
  exp_f32(&nan, 1, &out);
  EXPECT_TRUE(std::isnan(out));
}

TEST(Ops, Bf16RowsWidenExactly) {
  std::mt19937 rng(41);
  for (const int64_t n : kSizes) {
    std::vector<uint16_t> src(static_cast<size_t>(n));
    for (auto& h : src) h = static_cast<uint16_t>(rng());
    std::vector<float> got(src.size()), want(src.size());
    bf16_to_f32_row(src.data(), got.data(), n);
    ref::bf16_to_f32_row(src.data(), want.data(), n);
    for (size_t i = 0; i < src.size(); ++i) {
      uint32_t bits;
      std::memcpy(&bits, &got[i], 4);
      ASSERT_EQ(bits, static_cast<uint32_t>(src[i]) << 16) << "n " << n << " at " << i;
      ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0);
    }
  }
}

TEST(Ops, ArgmaxIsTheFirstMaximumLikeTheScalarLoop) {
  // Random rows, then the cases a vector max gets wrong: ties (the first wins, also across
  // the two passes' lane order), NaNs (never chosen unless at index 0), +0 / -0, infinities.
  std::mt19937 rng(43);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<std::vector<float>> rows;
  for (const int64_t n : kSizes) rows.push_back(random_vector(rng, n));
  rows.push_back(random_vector(rng, 151936, 4.0f));
  rows.push_back({2.0f, 5.0f, 5.0f, 1.0f, 5.0f, 0.0f, 0.0f, 0.0f, 0.0f, 5.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 5.0f});
  rows.push_back({nan, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f, 9.0f});
  rows.push_back({1.0f, nan, 2.0f, nan, 3.0f, nan, nan, nan, nan, 3.0f, nan, nan, nan, nan, nan, nan, nan, nan});
  rows.push_back({-0.0f, 0.0f, -0.0f, 0.0f, -0.0f, 0.0f, -0.0f, 0.0f, 0.0f, -0.0f, -0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f});
  rows.push_back({-inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf});
  rows.push_back({-inf, 1.0f, inf, 3.0f, inf, nan, 2.0f, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, inf});
  std::vector<float> late(4870, -1.0f);
  late[4869] = 3.0f;  // the maximum in the scalar tail after the 16-wide loop
  rows.push_back(late);
  std::vector<float> twice(4864, -1.0f);
  twice[1000] = twice[17] = 2.5f;
  rows.push_back(twice);
  for (size_t r = 0; r < rows.size(); ++r) {
    const auto& x = rows[r];
    const auto n = static_cast<int64_t>(x.size());
    int64_t want = 0;
    for (int64_t i = 1; i < n; ++i)
      if (x[static_cast<size_t>(i)] > x[static_cast<size_t>(want)]) want = i;
    EXPECT_EQ(argmax_f32(x.data(), n), want) << "row " << r;
    EXPECT_EQ(ref::argmax_f32(x.data(), n), want) << "row " << r;
  }
  EXPECT_EQ(argmax_f32(rows[2].data() + 2, 1), 0);
}

TEST(Ops, ScalarFallbackMatchesDispatch) {
  // With SIMD forced off the public functions are exactly the references.
  std::mt19937 rng(35);
  const auto x = random_vector(rng, 101), w = random_vector(rng, 101);
  std::vector<float> a(101), b(101);
  {
    testing::ScalarOnly off;
    rmsnorm(x.data(), w.data(), 1e-5f, 101, a.data());
  }
  ref::rmsnorm(x.data(), w.data(), 1e-5f, 101, b.data());
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace zen::kernels
