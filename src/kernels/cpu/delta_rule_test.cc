// The delta-rule step kernels: the dispatched (AVX2) path against the scalar reference on odd
// shapes (column blocks of 32, 16 and 8 and single columns), fused runs against steps (bit
// for bit), and all against transformers' four-step recurrence (decay, S^T k, rank-1
// update, S^T q) evaluated in double.
#include "kernels/cpu/delta_rule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/kernels_test_util.h"

namespace zen::kernels {
namespace {

struct StepCase {
  int64_t dk, dv;
};

// Inputs as the layer produces them: unit-norm k, q scaled by 1/sqrt(dk), decay in (0, 1],
// beta in (0, 1), a state of order one.
struct StepInputs {
  int64_t dk, dv, tokens;
  std::vector<float> q, k, v, decay, beta, state;
  StepInputs(int64_t dk_, int64_t dv_, int64_t tokens_, uint32_t seed) : dk(dk_), dv(dv_), tokens(tokens_) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> uni(0.0f, 1.0f);
    auto unit = [&](std::vector<float>& x, float scale) {
      for (int64_t t = 0; t < tokens; ++t) {
        float* row = &x[static_cast<size_t>(t * dk)];
        float sum = 0.0f;
        for (int64_t d = 0; d < dk; ++d) sum += row[d] * row[d];
        for (int64_t d = 0; d < dk; ++d) row[d] *= scale / std::sqrt(sum);
      }
    };
    for (auto* x : {&q, &k}) {
      x->resize(static_cast<size_t>(tokens * dk));
      for (float& e : *x) e = normal(rng);
    }
    unit(q, 1.0f / std::sqrt(static_cast<float>(dk)));
    unit(k, 1.0f);
    v.resize(static_cast<size_t>(tokens * dv));
    for (float& e : v) e = normal(rng);
    for (int64_t t = 0; t < tokens; ++t) {
      decay.push_back(std::exp(-0.3f * uni(rng)));
      beta.push_back(uni(rng));
    }
    state.resize(static_cast<size_t>(dk * dv));
    for (float& e : state) e = 0.5f * normal(rng);
  }
};

enum class Form { Steps, Fused, Run, Reference };

// Runs the tokens one step at a time, fused (each update with the next gather), as one run
// (strip by strip) or on the scalar reference; returns the outputs [tokens, dv] followed by the final state.
std::vector<float> run(Form form, const StepInputs& in) {
  std::vector<float> S = in.state, out(static_cast<size_t>(in.tokens * in.dv));
  std::vector<float> deltas(static_cast<size_t>(2 * in.dv));
  auto token = [&](int64_t t) {
    const auto at = static_cast<size_t>(t);
    return DeltaRuleToken{&in.q[at * in.dk], &in.k[at * in.dk], &in.v[at * in.dv], in.decay[at], in.beta[at],
                          &out[at * in.dv], &deltas[at % 2 * in.dv]};
  };
  if (form == Form::Run) {
    std::vector<DeltaRuleToken> tokens;
    for (int64_t t = 0; t < in.tokens; ++t) tokens.push_back(token(t));
    delta_rule_run_f32(S.data(), in.dk, in.dv, in.tokens, tokens.data());
  } else if (form == Form::Fused) {
    delta_rule_gather_f32(S.data(), in.dk, in.dv, token(0));
    for (int64_t t = 1; t < in.tokens; ++t) delta_rule_update_gather_f32(S.data(), in.dk, in.dv, token(t - 1), token(t));
    delta_rule_update_f32(S.data(), in.dk, in.dv, token(in.tokens - 1));
  } else {
    for (int64_t t = 0; t < in.tokens; ++t) {
      if (form == Form::Steps) delta_rule_step_f32(S.data(), in.dk, in.dv, token(t));
      else ref::delta_rule_step_f32(S.data(), in.dk, in.dv, token(t));
    }
  }
  out.insert(out.end(), S.begin(), S.end());
  return out;
}

// transformers' torch_recurrent_gated_delta_rule, one head, in double.
std::vector<double> run_hf_double(const StepInputs& in) {
  const int64_t dk = in.dk, dv = in.dv;
  std::vector<double> S(in.state.begin(), in.state.end()), out;
  for (int64_t t = 0; t < in.tokens; ++t) {
    const float* q = &in.q[static_cast<size_t>(t * dk)];
    const float* k = &in.k[static_cast<size_t>(t * dk)];
    const float* v = &in.v[static_cast<size_t>(t * dv)];
    for (double& s : S) s *= in.decay[static_cast<size_t>(t)];
    for (int64_t j = 0; j < dv; ++j) {
      double kv = 0.0;
      for (int64_t i = 0; i < dk; ++i) kv += k[i] * S[static_cast<size_t>(i * dv + j)];
      const double delta = (v[j] - kv) * in.beta[static_cast<size_t>(t)];
      for (int64_t i = 0; i < dk; ++i) S[static_cast<size_t>(i * dv + j)] += k[i] * delta;
      double o = 0.0;
      for (int64_t i = 0; i < dk; ++i) o += q[i] * S[static_cast<size_t>(i * dv + j)];
      out.push_back(o);
    }
  }
  out.insert(out.end(), S.begin(), S.end());
  return out;
}

double max_abs(const std::vector<float>& a) {
  double m = 0.0;
  for (float x : a) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

class DeltaRuleStep : public ::testing::TestWithParam<StepCase> {};

TEST_P(DeltaRuleStep, DispatchedMatchesReference) {
  const auto [dk, dv] = GetParam();
  const StepInputs in(dk, dv, 9, static_cast<uint32_t>(dk * 1000 + dv));
  const std::vector<float> fast = run(Form::Steps, in), slow = run(Form::Reference, in);
  // Only the rounding of fused vs separate multiply-adds differs: a few ulp of the sums.
  const double tol = 2e-6 * std::max(1.0, max_abs(slow)) * std::sqrt(static_cast<double>(dk));
  for (size_t i = 0; i < fast.size(); ++i) ASSERT_NEAR(fast[i], slow[i], tol) << "at " << i;
}

// Fusing a token's update with the next token's gather, or running all tokens strip by strip,
// changes no bit (a recurrent prefill must equal the decode steps of the same tokens).
TEST_P(DeltaRuleStep, FusedRunEqualsSteps) {
  const auto [dk, dv] = GetParam();
  const StepInputs in(dk, dv, 150, static_cast<uint32_t>(dk * 7 + dv));  // runs go 64 tokens a round
  const std::vector<float> steps = run(Form::Steps, in);
  EXPECT_EQ(run(Form::Fused, in), steps);
  EXPECT_EQ(run(Form::Run, in), steps);
  const testing::ScalarOnly scalar;
  const std::vector<float> reference = run(Form::Reference, in);
  EXPECT_EQ(run(Form::Fused, in), reference);
  EXPECT_EQ(run(Form::Run, in), reference);
}

TEST_P(DeltaRuleStep, MatchesTransformersRecurrence) {
  const auto [dk, dv] = GetParam();
  const StepInputs in(dk, dv, 9, static_cast<uint32_t>(dk * 31 + dv));
  const std::vector<double> expect = run_hf_double(in);
  for (Form form : {Form::Steps, Form::Fused, Form::Run, Form::Reference}) {
    const std::vector<float> got = run(form, in);
    const double tol = 1e-5 * std::max(1.0, max_abs(got));
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], expect[i], tol) << "at " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, DeltaRuleStep,
                         ::testing::Values(StepCase{1, 1}, StepCase{3, 7}, StepCase{8, 8}, StepCase{7, 13},
                                           StepCase{16, 40},    // one 32-block + one 8-block
                                           StepCase{33, 77},    // 2 x 32 + 8 + 5 single columns
                                           StepCase{128, 128},  // Zen6
                                           StepCase{64, 256}));

}  // namespace
}  // namespace zen::kernels
