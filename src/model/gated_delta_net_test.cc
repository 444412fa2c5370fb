// The Gated DeltaNet kernels against each other: the chunked delta rule agrees with the
// recurrent one, a split at a multiple of the chunk is bit-identical to one call, and the
// causal conv continues exactly from its window. (Agreement with transformers is tested on
// whole models in hybrid_test.cc.)
#include "model/gated_delta_net.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "base/test_compare.h"
#include "kernels/cpu/kernels_test_util.h"

namespace zen {
namespace {

// Random per-head inputs shaped as the layer produces them: unit-norm q (scaled) and k,
// g < 0, beta in (0, 1).
struct HeadData {
  int64_t n, dk, dv;
  std::vector<float> qkv;  // [n, 2*dk + dv]
  std::vector<float> g, beta;
  HeadData(int64_t n_, int64_t dk_, int64_t dv_, uint32_t seed) : n(n_), dk(dk_), dv(dv_) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> uni(0.0f, 1.0f);
    const int64_t ld = 2 * dk + dv;
    qkv.resize(static_cast<size_t>(n * ld));
    for (float& x : qkv) x = normal(rng);
    for (int64_t t = 0; t < n; ++t) {
      float* row = &qkv[static_cast<size_t>(t * ld)];
      gdn::l2norm(row, dk, row);
      for (int64_t d = 0; d < dk; ++d) row[d] /= std::sqrt(static_cast<float>(dk));
      gdn::l2norm(row + dk, dk, row + dk);
      g.push_back(-0.3f * uni(rng));
      beta.push_back(uni(rng));
    }
  }
  gdn::HeadInputs inputs(float* out, int64_t t0 = 0) const {
    const int64_t ld = 2 * dk + dv;
    const float* row = &qkv[static_cast<size_t>(t0 * ld)];
    return {row, row + dk, row + 2 * dk, ld, &g[static_cast<size_t>(t0)], &beta[static_cast<size_t>(t0)], 1,
            out + t0 * dv, dv};
  }
};

std::vector<float> random_state(int64_t dk, int64_t dv, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  std::vector<float> s(static_cast<size_t>(dk * dv));
  for (float& x : s) x = normal(rng);
  return s;
}

struct DeltaRuleCase {
  int64_t n, pos0, dk, dv;
};

class GdnDeltaRule : public ::testing::TestWithParam<DeltaRuleCase> {};

TEST_P(GdnDeltaRule, ChunkedAgreesWithRecurrent) {
  const DeltaRuleCase c = GetParam();
  const HeadData data(c.n, c.dk, c.dv, 7);
  std::vector<float> scratch(static_cast<size_t>(gdn::chunk_scratch_floats(c.dk, c.dv)));
  std::vector<float> state_r = random_state(c.dk, c.dv, 3), state_c = state_r;
  std::vector<float> out_r(static_cast<size_t>(c.n * c.dv)), out_c(out_r.size());
  gdn::recurrent(data.inputs(out_r.data()), c.n, c.dk, c.dv, state_r.data());
  gdn::chunked(data.inputs(out_c.data()), c.n, c.pos0, c.dk, c.dv, state_c.data(), scratch.data());
  EXPECT_LE(max_diff(out_r, out_c), 2e-5f * std::max(1.0f, max_abs(out_r)));
  EXPECT_LE(max_diff(state_r, state_c), 2e-5f * std::max(1.0f, max_abs(state_r)));
}

// The same on the scalar kernels (hosts without AVX2): the packed GEMM and the triangular
// inverse's reference paths.
TEST(GdnDeltaRuleScalar, ChunkedAgreesWithRecurrent) {
  const kernels::testing::ScalarOnly scalar;
  const int64_t n = 150, pos0 = 37, dk = 16, dv = 24;
  const HeadData data(n, dk, dv, 9);
  std::vector<float> scratch(static_cast<size_t>(gdn::chunk_scratch_floats(dk, dv)));
  std::vector<float> state_r = random_state(dk, dv, 4), state_c = state_r;
  std::vector<float> out_r(static_cast<size_t>(n * dv)), out_c(out_r.size());
  gdn::recurrent(data.inputs(out_r.data()), n, dk, dv, state_r.data());
  gdn::chunked(data.inputs(out_c.data()), n, pos0, dk, dv, state_c.data(), scratch.data());
  EXPECT_LE(max_diff(out_r, out_c), 2e-5f * std::max(1.0f, max_abs(out_r)));
  EXPECT_LE(max_diff(state_r, state_c), 2e-5f * std::max(1.0f, max_abs(state_r)));
}

INSTANTIATE_TEST_SUITE_P(Shapes, GdnDeltaRule,
                         ::testing::Values(DeltaRuleCase{150, 0, 16, 8},    // 64 + 64 + 22
                                           DeltaRuleCase{150, 37, 8, 16},   // 27 + 64 + 59
                                           DeltaRuleCase{64, 0, 32, 32},    // one full chunk
                                           DeltaRuleCase{5, 62, 16, 16},    // 2 + 3
                                           DeltaRuleCase{1, 10, 16, 16}));  // one token

// Splitting at a multiple of the chunk (as a chunked prefill across forward calls does) gives
// bit-identical outputs and state: chunks break at absolute positions.
TEST(GdnDeltaRule, SplitAtChunkMultipleIsBitExact) {
  const int64_t n = 200, dk = 16, dv = 8;
  const HeadData data(n, dk, dv, 11);
  std::vector<float> scratch(static_cast<size_t>(gdn::chunk_scratch_floats(dk, dv)));
  std::vector<float> state_one(static_cast<size_t>(dk * dv), 0.0f), state_split = state_one;
  std::vector<float> out_one(static_cast<size_t>(n * dv)), out_split(out_one.size());
  gdn::chunked(data.inputs(out_one.data()), n, 0, dk, dv, state_one.data(), scratch.data());
  gdn::chunked(data.inputs(out_split.data()), 64, 0, dk, dv, state_split.data(), scratch.data());
  gdn::chunked(data.inputs(out_split.data(), 64), 128 - 64, 64, dk, dv, state_split.data(), scratch.data());
  gdn::chunked(data.inputs(out_split.data(), 128), n - 128, 128, dk, dv, state_split.data(), scratch.data());
  EXPECT_EQ(out_one, out_split);
  EXPECT_EQ(state_one, state_split);
}

// A last piece of one token (a prompt of 64k + 1 tokens split at 64k) is bit-identical too:
// one-token chunks take the recurrent step whether they end a call or are a call.
TEST(GdnDeltaRule, OneTokenPieceIsBitExact) {
  const int64_t n = 129, dk = 16, dv = 8;
  const HeadData data(n, dk, dv, 13);
  std::vector<float> scratch(static_cast<size_t>(gdn::chunk_scratch_floats(dk, dv)));
  std::vector<float> state_one(static_cast<size_t>(dk * dv), 0.0f), state_split = state_one;
  std::vector<float> out_one(static_cast<size_t>(n * dv)), out_split(out_one.size());
  gdn::chunked(data.inputs(out_one.data()), n, 0, dk, dv, state_one.data(), scratch.data());
  gdn::chunked(data.inputs(out_split.data()), 128, 0, dk, dv, state_split.data(), scratch.data());
  gdn::recurrent(data.inputs(out_split.data(), 128), 1, dk, dv, state_split.data());  // a decode step
  EXPECT_EQ(out_one, out_split);
  EXPECT_EQ(state_one, state_split);
}

// A group of value heads sharing q and k (as a key head's heads do) gives each head the bits
// of its one-head call.
TEST(GdnDeltaRule, GroupOfHeadsIsBitExactPerHead) {
  const int64_t n = 150, pos0 = 37, dk = 16, dv = 24, count = 3;
  std::vector<HeadData> data;
  for (int64_t h = 0; h < count; ++h) data.emplace_back(n, dk, dv, static_cast<uint32_t>(20 + h));
  std::vector<std::vector<float>> out_one(count, std::vector<float>(static_cast<size_t>(n * dv))),
      out_group = out_one;
  std::vector<std::vector<float>> state_one, state_group;
  std::vector<gdn::HeadInputs> heads;
  std::vector<float*> states;
  for (int64_t h = 0; h < count; ++h) {
    state_one.push_back(random_state(dk, dv, static_cast<uint32_t>(30 + h)));
    state_group.push_back(state_one.back());
  }
  std::vector<float> scratch(static_cast<size_t>(gdn::chunk_scratch_floats(dk, dv, count)));
  for (int64_t h = 0; h < count; ++h) {
    gdn::HeadInputs in = data[static_cast<size_t>(h)].inputs(out_one[static_cast<size_t>(h)].data());
    in.q = data[0].inputs(nullptr).q;  // the group's shared q and k
    in.k = data[0].inputs(nullptr).k;
    gdn::chunked(in, n, pos0, dk, dv, state_one[static_cast<size_t>(h)].data(), scratch.data());
    in.out = out_group[static_cast<size_t>(h)].data();
    heads.push_back(in);
    states.push_back(state_group[static_cast<size_t>(h)].data());
  }
  gdn::chunked(heads.data(), states.data(), count, n, pos0, dk, dv, scratch.data());
  EXPECT_EQ(out_one, out_group);
  EXPECT_EQ(state_one, state_group);
}

TEST(GdnDeltaRule, RecurrentRecordsStateHistory) {
  const int64_t n = 6, dk = 8, dv = 8;
  const HeadData data(n, dk, dv, 5);
  std::vector<float> state = random_state(dk, dv, 1), stepwise = state;
  std::vector<float> out(static_cast<size_t>(n * dv)), out_step(out.size());
  std::vector<std::vector<float>> history(n, std::vector<float>(static_cast<size_t>(dk * dv)));
  std::vector<float*> slots;
  for (auto& h : history) slots.push_back(h.data());
  gdn::recurrent(data.inputs(out.data()), n, dk, dv, state.data(), slots.data());
  for (int64_t t = 0; t < n; ++t) {
    gdn::recurrent(data.inputs(out_step.data(), t), 1, dk, dv, stepwise.data());
    EXPECT_EQ(history[static_cast<size_t>(t)], stepwise) << "token " << t;
  }
  EXPECT_EQ(out, out_step);
  EXPECT_EQ(state, stepwise);
}

// A recurrent run over many tokens (fusing each update with the next gather) equals decode
// steps of one token, bit for bit: prefill-then-decode equals one prefill. dv 40: column
// blocks of 16 and 8; dv 13: single columns.
TEST(GdnDeltaRule, RecurrentRunEqualsOneTokenSteps) {
  for (const int64_t dv : {int64_t{40}, int64_t{13}}) {
    const int64_t n = 23, dk = 24;
    const HeadData data(n, dk, dv, 17);
    std::vector<float> state = random_state(dk, dv, 2), stepwise = state;
    std::vector<float> out(static_cast<size_t>(n * dv)), out_step(out.size());
    gdn::recurrent(data.inputs(out.data()), n, dk, dv, state.data());
    for (int64_t t = 0; t < n; ++t) gdn::recurrent(data.inputs(out_step.data(), t), 1, dk, dv, stepwise.data());
    EXPECT_EQ(out, out_step) << "dv " << dv;
    EXPECT_EQ(state, stepwise) << "dv " << dv;
  }
}

// The conv over n tokens equals a zero-padded causal conv, and feeding the tokens in pieces
// through the rolling window gives the same result exactly.
TEST(GdnConv, ContinuesFromItsWindow) {
  const int64_t n = 11, channels = 5, kernel = 4, hist = kernel - 1;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n * channels)), w(static_cast<size_t>(kernel * channels));
  for (float& v : x) v = normal(rng);
  for (float& v : w) v = normal(rng);

  std::vector<float> window(static_cast<size_t>(hist * channels), 0.0f);
  std::vector<float> out(x.size());
  gdn::conv1d_silu(x.data(), channels, n, channels, kernel, w.data(), window.data(), out.data());
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < channels; ++c) {
      float acc = 0.0f;
      for (int64_t i = 0; i < kernel; ++i) {
        const int64_t s = t - hist + i;
        if (s >= 0) acc += w[static_cast<size_t>(i * channels + c)] * x[static_cast<size_t>(s * channels + c)];
      }
      const float expected = acc / (1.0f + std::exp(-acc));
      EXPECT_NEAR(out[static_cast<size_t>(t * channels + c)], expected, 1e-5f);
    }
  // The window holds the last K-1 inputs.
  for (int64_t r = 0; r < hist; ++r)
    for (int64_t c = 0; c < channels; ++c)
      EXPECT_EQ(window[static_cast<size_t>(r * channels + c)], x[static_cast<size_t>((n - hist + r) * channels + c)]);

  // Pieces of 2, 1, 5, 3 tokens (shorter and longer than the window).
  std::vector<float> window2(window.size(), 0.0f), out2(x.size());
  int64_t t = 0;
  for (int64_t piece : {2, 1, 5, 3}) {
    gdn::conv1d_silu(&x[static_cast<size_t>(t * channels)], channels, piece, channels, kernel, w.data(),
                     window2.data(), &out2[static_cast<size_t>(t * channels)]);
    t += piece;
  }
  EXPECT_EQ(out, out2);
  EXPECT_EQ(window, window2);
}

TEST(GdnMath, SoftplusAndL2norm) {
  EXPECT_FLOAT_EQ(gdn::softplus(25.0f), 25.0f);  // torch's threshold
  EXPECT_NEAR(gdn::softplus(0.0f), std::log(2.0f), 1e-7f);
  EXPECT_NEAR(gdn::softplus(-30.0f), std::exp(-30.0f), 1e-18f);
  const float x[3] = {3.0f, 0.0f, 4.0f};
  float y[3];
  gdn::l2norm(x, 3, y);
  EXPECT_NEAR(y[0], 0.6f, 1e-6f);
  EXPECT_NEAR(y[2], 0.8f, 1e-6f);
}

}  // namespace
}  // namespace zen
