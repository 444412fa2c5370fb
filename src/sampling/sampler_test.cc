#include "sampling/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "base/error.h"

namespace zen {
namespace {

std::vector<float> random_logits(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

int32_t draw(const SamplingParams& p, std::vector<float> logits) {
  Sampler s(p, {});
  return s.sample(logits.data(), static_cast<int64_t>(logits.size()));
}

TEST(Sampler, GreedyIsArgmaxFirstMaximum) {
  std::vector<float> l = {0.1f, 3.0f, -1.0f, 3.0f};
  EXPECT_EQ(argmax(l.data(), 4), 1);
  SamplingParams p;
  EXPECT_EQ(draw(p, l), 1);
}

TEST(Sampler, LogitBiasBansAndForcesTokensGreedyOrSampled) {
  const auto l = random_logits(300, 11);
  const int32_t best = argmax(l.data(), 300);
  SamplingParams ban;
  ban.logit_bias = {{best, -100.0f}};
  EXPECT_NE(draw(ban, l), best);
  SamplingParams force;
  force.logit_bias = {{17, 100.0f}};
  force.temperature = 1.0f;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    force.seed = seed;
    force.has_seed = true;
    EXPECT_EQ(draw(force, l), 17);
  }
  SamplingParams bad;
  bad.logit_bias = {{3, 101.0f}};
  EXPECT_THROW(bad.validate(), Error);
  bad.logit_bias = {{-1, 1.0f}};
  EXPECT_THROW(bad.validate(), Error);
}

TEST(Sampler, SameSeedSameSequence) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 1234;
  p.has_seed = true;
  auto run = [&] {
    Sampler s(p, {});
    std::vector<int32_t> out;
    for (int i = 0; i < 50; ++i) {
      auto l = random_logits(100, static_cast<uint64_t>(i));
      out.push_back(s.sample(l.data(), 100));
    }
    return out;
  };
  const auto a = run(), b = run();
  EXPECT_EQ(a, b);
  p.seed = 99;
  EXPECT_NE(a, run());  // a different seed gives a different draw sequence
}

TEST(Sampler, TopKOneAndTinyTopPAndMinPOneAreGreedy) {
  const auto l = random_logits(500, 7);
  const int32_t best = argmax(l.data(), 500);
  for (int trial = 0; trial < 20; ++trial) {
    SamplingParams p;
    p.temperature = 1.5f;
    p.seed = static_cast<uint64_t>(trial);
    p.has_seed = true;
    p.top_k = 1;
    EXPECT_EQ(draw(p, l), best);
    p.top_k = 0;
    p.top_p = 1e-6f;
    EXPECT_EQ(draw(p, l), best);
    p.top_p = 1.0f;
    p.min_p = 1.0f;
    EXPECT_EQ(draw(p, l), best);
  }
}

TEST(Sampler, TopKRestrictsToKMostLikely) {
  const auto l = random_logits(300, 3);
  std::vector<int32_t> order(300);
  for (int i = 0; i < 300; ++i) order[static_cast<size_t>(i)] = i;
  std::sort(order.begin(), order.end(), [&](int a, int b) { return l[static_cast<size_t>(a)] > l[static_cast<size_t>(b)]; });
  SamplingParams p;
  p.temperature = 5.0f;  // flat: without top-k many tokens would appear
  p.top_k = 3;
  p.seed = 5;
  p.has_seed = true;
  Sampler s(p, {});
  std::map<int32_t, int> seen;
  for (int i = 0; i < 300; ++i) {
    auto copy = l;
    ++seen[s.sample(copy.data(), 300)];
  }
  EXPECT_EQ(seen.size(), 3u);
  for (const auto& [tok, count] : seen)
    EXPECT_TRUE(tok == order[0] || tok == order[1] || tok == order[2]) << tok;
}

TEST(Sampler, FrequenciesFollowSoftmax) {
  // Two tokens with logits 0 and ln(3): probabilities 1/4 and 3/4 at temperature 1.
  std::vector<float> l = {0.0f, std::log(3.0f)};
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 11;
  p.has_seed = true;
  Sampler s(p, {});
  int ones = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    auto copy = l;
    ones += s.sample(copy.data(), 2);
  }
  EXPECT_NEAR(static_cast<double>(ones) / n, 0.75, 0.015);
}

TEST(Sampler, PenaltiesChangeTheChoice) {
  std::vector<float> l = {2.0f, 1.9f, 0.0f};
  SamplingParams p;
  p.repetition_penalty = 1.2f;  // token 0 is in the prompt: 2.0 / 1.2 < 1.9
  std::vector<int32_t> prompt = {0};
  Sampler s(p, prompt);
  auto copy = l;
  EXPECT_EQ(s.sample(copy.data(), 3), 1);

  SamplingParams q;
  q.frequency_penalty = 0.1f;
  Sampler f(q, {});
  f.accept(0);
  f.accept(0);  // 2.0 - 2 * 0.1 = 1.8 < 1.9
  copy = l;
  EXPECT_EQ(f.sample(copy.data(), 3), 1);

  SamplingParams r;
  r.presence_penalty = 0.05f;
  Sampler pr(r, {});
  pr.accept(0);  // 2.0 - 0.05 = 1.95 > 1.9: still token 0
  copy = l;
  EXPECT_EQ(pr.sample(copy.data(), 3), 0);
}

TEST(Sampler, InvalidParametersNameThemselves) {
  auto expect_error = [](SamplingParams p, const std::string& word) {
    try {
      p.validate();
      FAIL() << "no error for " << word;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
    }
  };
  SamplingParams p;
  p.temperature = -1;
  expect_error(p, "temperature");
  p = {};
  p.top_p = 0;
  expect_error(p, "top_p");
  p = {};
  p.top_k = -2;
  expect_error(p, "top_k");
  p = {};
  p.min_p = 2;
  expect_error(p, "min_p");
  p = {};
  p.repetition_penalty = 0;
  expect_error(p, "repetition_penalty");
  p = {};
  p.presence_penalty = 3;
  expect_error(p, "presence_penalty");
  p = {};
  p.frequency_penalty = -3;
  expect_error(p, "frequency_penalty");
}

}  // namespace
}  // namespace zen
