#include "dist/tensor_parallel.h"

#include <algorithm>
#include <limits>

#include "base/error.h"
#include "plan/plan.h"

namespace zen::dist {

Range split(int64_t n, int parts, int part, int64_t unit) {
  ZEN_CHECK(parts >= 1 && part >= 0 && part < parts && unit >= 1 && n >= 0, "split ", n, " / ", parts);
  const int64_t units = (n + unit - 1) / unit;
  const int64_t per = (units + parts - 1) / parts;
  const int64_t b = std::min(n, part * per * unit), e = std::min(n, (part + 1) * per * unit);
  return {b, e};
}

HeadShard head_shard(const ModelConfig& cfg, int t, int r) {
  const int64_t nh = cfg.num_heads, nkv = cfg.num_kv_heads;
  HeadShard s;
  s.q_heads = {r * nh / t, (r + 1) * nh / t};
  if (t <= nkv) s.kv_heads = {r * nkv / t, (r + 1) * nkv / t};
  else s.kv_heads = {r * nkv / t, r * nkv / t + 1};  // t % nkv == 0: t / nkv ranks per KV head
  return s;
}

std::string tensor_parallel_problem(const ModelConfig& cfg, int t, bool expert_parallel) {
  if (t < 1) return "the tensor parallel size must be at least 1";
  if (t == 1) return "";
  plan::Layout layout;
  layout.tp = t;
  if (std::string p = plan::layout_problem(cfg, layout); !p.empty()) return p;
  if (cfg.num_experts > 0 && expert_parallel && cfg.num_experts < t)
    return detail::concat(cfg.num_experts, " experts leave some of ", t,
                          " expert-parallel ranks none: drop --enable-expert-parallel to slice every expert");
  return "";
}

Range pipeline_layers(int64_t num_layers, int stages, int s) {
  ZEN_CHECK(stages >= 1 && s >= 0 && s < stages, "pipeline stage ", s, " of ", stages);
  // As zen plan lays them out: the first num_layers % stages stages take one layer more.
  const int64_t base = num_layers / stages, extra = num_layers % stages;
  const int64_t begin = s * base + std::min<int64_t>(s, extra);
  return {begin, begin + base + (s < extra ? 1 : 0)};
}

Range pipeline_layers(const std::vector<double>& layer_cost, double last_cost, int stages, int s) {
  const auto L = static_cast<int64_t>(layer_cost.size());
  ZEN_CHECK(stages >= 1 && s >= 0 && s < stages && stages <= L, "pipeline stage ", s, " of ", stages, " over ", L,
            " layers");
  std::vector<double> prefix(static_cast<size_t>(L + 1), 0.0);
  for (int64_t i = 0; i < L; ++i) prefix[static_cast<size_t>(i + 1)] = prefix[static_cast<size_t>(i)] + layer_cost[static_cast<size_t>(i)];
  auto cost = [&](int64_t b, int64_t e, bool last) {
    return prefix[static_cast<size_t>(e)] - prefix[static_cast<size_t>(b)] + (last ? last_cost : 0.0);
  };
  // best[k][e]: the smallest largest cost of k + 1 stages over layers [0, e); cut[k][e] where
  // the last of them begins.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(static_cast<size_t>(stages), std::vector<double>(static_cast<size_t>(L + 1), inf));
  std::vector<std::vector<int64_t>> cut(static_cast<size_t>(stages), std::vector<int64_t>(static_cast<size_t>(L + 1), 0));
  for (int64_t e = 1; e <= L; ++e) best[0][static_cast<size_t>(e)] = cost(0, e, stages == 1);
  for (int k = 1; k < stages; ++k)
    for (int64_t e = k + 1; e <= L; ++e)
      for (int64_t b = k; b < e; ++b) {  // the earliest cut first: ties keep earlier stages small
        const double v = std::max(best[static_cast<size_t>(k - 1)][static_cast<size_t>(b)], cost(b, e, k == stages - 1));
        if (v < best[static_cast<size_t>(k)][static_cast<size_t>(e)]) {
          best[static_cast<size_t>(k)][static_cast<size_t>(e)] = v;
          cut[static_cast<size_t>(k)][static_cast<size_t>(e)] = b;
        }
      }
  std::vector<int64_t> begins(static_cast<size_t>(stages) + 1, 0);
  begins[static_cast<size_t>(stages)] = L;
  for (int k = stages - 1; k >= 1; --k)
    begins[static_cast<size_t>(k)] = cut[static_cast<size_t>(k)][static_cast<size_t>(begins[static_cast<size_t>(k) + 1])];
  return {begins[static_cast<size_t>(s)], begins[static_cast<size_t>(s) + 1]};
}

std::string pipeline_problem(const ModelConfig& cfg, int stages) {
  if (stages < 1) return "the pipeline parallel size must be at least 1";
  if (stages == 1) return "";
  if (stages > cfg.num_layers)
    return detail::concat(cfg.num_layers, " layers do not make ", stages, " pipeline stages");
  return "";
}

}  // namespace zen::dist

namespace zen::dist {

std::unique_ptr<Communicator> split_stages(const TensorParallel& tp) {
  if (!tp.active() || !tp.pipelined() || tp.size() == 1) return nullptr;
  return tp.comm->split(tp.stage(), tp.rank());
}

}  // namespace zen::dist
