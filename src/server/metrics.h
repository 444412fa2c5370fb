// Prometheus metrics of the server (text exposition format 0.0.4): requests by outcome, HTTP
// errors by status, token counters, TTFT / inter-token / end-to-end latency histograms, and
// the engine's gauges (running, waiting, KV usage, prefix-cache hit rate) read at scrape time.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace zen::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value, int64_t count = 1);
  // Appends the _bucket / _sum / _count lines of metric `name`.
  void render(const std::string& name, const std::string& help, std::string& out) const;

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // one per bound, plus +Inf
  double sum_ = 0;
  int64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();
  // outcome: stop, length, tool_calls, abort, error
  void request_finished(const std::string& outcome, int64_t prompt_tokens, int64_t completion_tokens,
                        double e2e_seconds);
  void first_token(double seconds) { ttft_.observe(seconds); }
  void inter_token(double seconds, int64_t tokens) { itl_.observe(seconds, tokens); }
  void http_error(int status);
  std::string render(const EngineStats& engine, const std::string& model_name) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, int64_t> requests_;  // by outcome
  std::map<int, int64_t> http_errors_;       // by status
  int64_t prompt_tokens_ = 0, completion_tokens_ = 0;
  Histogram ttft_, itl_, e2e_;
};

}  // namespace zen::server
