// Prometheus exposition: counters by outcome, cumulative histogram buckets, engine gauges.
#include "server/metrics.h"

#include <gtest/gtest.h>

#include <sstream>

namespace zen::server {
namespace {

// The value of the line that starts with `series ` ("" when absent).
std::string sample(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(series + " ", 0) == 0) return line.substr(series.size() + 1);
  return "";
}

TEST(ServerMetrics, CountersHistogramsAndGauges) {
  Metrics m;
  m.request_finished("stop", 10, 5, 0.3);
  m.request_finished("stop", 20, 7, 0.6);
  m.request_finished("abort", 4, 1, 0.1);
  m.first_token(0.02);
  m.first_token(3.0);
  m.inter_token(0.03, 4);
  m.http_error(400);
  EngineStats s;
  s.running = 2;
  s.waiting = 1;
  s.kv_blocks_total = 100;
  s.kv_blocks_used = 25;
  s.prompt_tokens = 40;
  s.cached_prompt_tokens = 10;
  const std::string text = m.render(s, "x");
  EXPECT_EQ(sample(text, "zen_requests_total{outcome=\"stop\"}"), "2");
  EXPECT_EQ(sample(text, "zen_requests_total{outcome=\"abort\"}"), "1");
  EXPECT_EQ(sample(text, "zen_requests_total{outcome=\"error\"}"), "0");
  EXPECT_EQ(sample(text, "zen_http_errors_total{status=\"400\"}"), "1");
  EXPECT_EQ(sample(text, "zen_prompt_tokens_total{model_name=\"x\"}"), "34");
  EXPECT_EQ(sample(text, "zen_generation_tokens_total{model_name=\"x\"}"), "13");
  EXPECT_EQ(sample(text, "zen_time_to_first_token_seconds_bucket{le=\"0.025\"}"), "1");
  EXPECT_EQ(sample(text, "zen_time_to_first_token_seconds_bucket{le=\"+Inf\"}"), "2");
  EXPECT_EQ(sample(text, "zen_time_to_first_token_seconds_count"), "2");
  EXPECT_EQ(sample(text, "zen_inter_token_latency_seconds_count"), "4");
  EXPECT_EQ(sample(text, "zen_num_requests_running{model_name=\"x\"}"), "2");
  EXPECT_EQ(sample(text, "zen_kv_cache_usage_ratio{model_name=\"x\"}"), "0.25");
  EXPECT_EQ(sample(text, "zen_prefix_cache_hit_rate{model_name=\"x\"}"), "0.25");
}

}  // namespace
}  // namespace zen::server
