#include "dist/tensor_parallel.h"

#include <algorithm>

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
  if (cfg.num_experts > 0 && !expert_parallel)
    return "a mixture-of-experts model splits its experts over the ranks: add --enable-expert-parallel "
           "(slicing every expert over the ranks is not implemented)";
  return "";
}

Range pipeline_layers(int64_t num_layers, int stages, int s) {
  ZEN_CHECK(stages >= 1 && s >= 0 && s < stages, "pipeline stage ", s, " of ", stages);
  // As zen plan lays them out: the first num_layers % stages stages take one layer more.
  const int64_t base = num_layers / stages, extra = num_layers % stages;
  const int64_t begin = s * base + std::min<int64_t>(s, extra);
  return {begin, begin + base + (s < extra ? 1 : 0)};
}

std::string pipeline_problem(const ModelConfig& cfg, int stages) {
  if (stages < 1) return "the pipeline parallel size must be at least 1";
  if (stages == 1) return "";
  if (stages > cfg.num_layers)
    return detail::concat(cfg.num_layers, " layers do not make ", stages, " pipeline stages");
  if (cfg.num_linear_layers() > 0) return "pipeline parallelism of hybrid (Gated DeltaNet) models is not implemented yet";
  return "";
}

}  // namespace zen::dist
