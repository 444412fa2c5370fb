#include "plan/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "base/error.h"
#include "model/footprint.h"
#include "model/gated_delta_net.h"

namespace zen::plan {
namespace {

constexpr int64_t kNoKv = std::numeric_limits<int64_t>::max();  // kv_tokens of a stage without KV layers
constexpr double kVectorBytes = 4;  // 1-D tensors stay f32
constexpr double kGiB = 1024.0 * 1024 * 1024;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / kGiB);
  return buf;
}

// Stored parameters of one rank's part of a component, split into matrices (at the weight
// dtype) and 1-D tensors (f32).
struct Part {
  int64_t matrix = 0, vector = 0;
};

// Each TP rank's KV heads: KV / t, or one (replicated t / KV times) when t exceeds KV.
int64_t kv_heads_per_rank(const ModelConfig& c, int64_t tp) {
  return tp <= c.num_kv_heads ? c.num_kv_heads / tp : 1;
}

// Full attention on one of t ranks (t divides the query heads):
//   q_proj [nh/t * hd * g, H] (g = 2 with the output gate: [query | gate] rows per head)
//   k_proj, v_proj [kv_r * hd, H] each (kv_r = kv_heads_per_rank)
//   o_proj [H, nh/t * hd]
//   biases (Qwen2) q/k/v rows of this rank; q_norm, k_norm [hd] each, replicated.
Part attention_part(const ModelConfig& c, int64_t tp) {
  const int64_t H = c.hidden_size, hd = c.head_dim, g = c.attn_output_gate ? 2 : 1;
  const int64_t qh = c.num_heads / tp, kvr = kv_heads_per_rank(c, tp);
  Part p;
  p.matrix = qh * hd * g * H + 2 * kvr * hd * H + H * qh * hd;
  if (c.attention_bias) p.vector += qh * hd * g + 2 * kvr * hd;
  if (c.qk_norm) p.vector += 2 * hd;
  return p;
}

// Gated DeltaNet on one of t ranks (t divides the key heads Hk, hence Hv and every channel count):
//   in_proj qkv [conv_dim/t, H] (conv_dim = 2 Hk Dk + Hv Dv), z [Hv Dv/t, H], b and a [Hv/t, H]
//   conv1d [conv_dim/t, K]; A_log, dt_bias [Hv/t] each (f32); norm [Dv] replicated (f32)
//   out_proj [H, Hv Dv/t]
Part gdn_part(const ModelConfig& c, int64_t tp) {
  const GdnShape s = GdnShape::from_config(c);
  const int64_t H = s.hidden;
  Part p;
  p.matrix = (H * (s.conv_dim() + s.value_dim() + 2 * s.num_v_heads) + s.conv_dim() * s.conv_kernel +
              s.value_dim() * H) /
             tp;
  p.vector = 2 * s.num_v_heads / tp + s.v_head_dim;
  return p;
}

// gate_proj, up_proj [I/t, H] and down_proj [H, I/t] (rows padded to ceil(I/t)).
int64_t mlp_part(const ModelConfig& c, int64_t intermediate, int64_t tp) {
  return 3 * c.hidden_size * ceil_div(intermediate, tp);
}

// The shared expert (MLP of intermediate Is, split like a dense MLP) and its sigmoid gate
// [1, H] (replicated).
int64_t shared_part(const ModelConfig& c, int64_t tp) {
  if (c.shared_expert_intermediate_size <= 0) return 0;
  return mlp_part(c, c.shared_expert_intermediate_size, tp) + c.hidden_size;
}

// Contiguous stages balanced by layer count: the first L % p stages get one more layer.
std::vector<std::pair<int64_t, int64_t>> stage_bounds(int64_t layers, int64_t pp) {
  std::vector<std::pair<int64_t, int64_t>> b;
  int64_t first = 0;
  for (int64_t s = 0; s < pp; ++s) {
    const int64_t n = layers / pp + (s < layers % pp ? 1 : 0);
    b.emplace_back(first, n);
    first += n;
  }
  return b;
}

struct LayerCounts {
  int64_t kv = 0, linear = 0, moe = 0, dense = 0;
};

LayerCounts count_layers(const ModelConfig& c, int64_t first, int64_t n) {
  LayerCounts k;
  for (int64_t l = first; l < first + n; ++l) {
    (c.is_full_attention(l) ? k.kv : k.linear) += 1;
    (c.is_sparse_layer(l) ? k.moe : k.dense) += 1;
  }
  return k;
}

// What one rank of a stage stores and reads per token (batch 1).
struct RankShare {
  int64_t matrix = 0, vector = 0;         // stored
  double read_matrix = 0, read_vector = 0;  // read per token (EP experts: expected)
  double read_matrix_worst = 0;           // EP: every chosen expert on this rank
};

RankShare rank_share(const ModelConfig& c, const Layout& L, int64_t first, int64_t n, bool first_stage,
                     bool last_stage) {
  const int64_t H = c.hidden_size, V = c.vocab_size, tp = L.tp, ep = L.ep;
  RankShare r;
  auto both = [&](int64_t matrix, int64_t vector) {  // stored and read in full
    r.matrix += matrix;
    r.vector += vector;
    r.read_matrix += static_cast<double>(matrix);
    r.read_vector += static_cast<double>(vector);
    r.read_matrix_worst += static_cast<double>(matrix);
  };
  for (int64_t l = first; l < first + n; ++l) {
    both(0, 2 * H);  // input and post-attention RMSNorm gains
    const Part mixer = c.is_full_attention(l) ? attention_part(c, tp) : gdn_part(c, tp);
    both(mixer.matrix, mixer.vector);
    if (c.is_sparse_layer(l)) {
      both(c.num_experts * H, 0);  // router [E, H], replicated
      both(shared_part(c, tp), 0);
      const int64_t k = c.num_experts_per_tok;
      if (ep > 1) {
        // E/e whole experts here; a token's k experts land here k/e times in expectation,
        // min(k, E/e) times at worst.
        const int64_t expert = mlp_part(c, c.moe_intermediate_size, 1), local = c.num_experts / ep;
        r.matrix += local * expert;
        r.read_matrix += static_cast<double>(k) / static_cast<double>(ep) * static_cast<double>(expert);
        r.read_matrix_worst += static_cast<double>(std::min(k, local) * expert);
      } else {
        // 1/t of each of the E experts; the token reads k of them.
        const int64_t expert = mlp_part(c, c.moe_intermediate_size, tp);
        r.matrix += c.num_experts * expert;
        r.read_matrix += static_cast<double>(k * expert);
        r.read_matrix_worst += static_cast<double>(k * expert);
      }
    } else {
      both(mlp_part(c, c.intermediate_size, tp), 0);
    }
  }
  const int64_t vocab_rows = ceil_div(V, tp) * H;  // [V/t, H] vocabulary slice
  if (first_stage) {
    r.matrix += vocab_rows;  // embedding: one row read per token
    r.read_matrix += static_cast<double>(H);
    r.read_matrix_worst += static_cast<double>(H);
  }
  if (last_stage) {
    both(0, H);  // final norm
    // lm_head: its own matrix, or the tied embedding (a copy when it lives on another stage).
    const bool stored = !c.tie_word_embeddings || !first_stage;
    r.matrix += stored ? vocab_rows : 0;
    r.read_matrix += static_cast<double>(vocab_rows);
    r.read_matrix_worst += static_cast<double>(vocab_rows);
  }
  return r;
}

// Time of one call under the algorithm model of the header.
void cost_call(CollectiveCall& call, const Options& o) {
  const double alpha = o.latency_us * 1e-6, beta = o.network_gbps * 1e9 / 8;
  const double n = static_cast<double>(call.group), B = call.payload_bytes;
  switch (call.kind) {
    case CollectiveKind::AllReduce:  // ring: reduce-scatter + all-gather, 2(n-1) steps of B/n
      call.wire_bytes = 2 * (n - 1) / n * B;
      call.seconds = 2 * (n - 1) * (alpha + B / n / beta);
      break;
    case CollectiveKind::AllGather:  // ring: n-1 steps, each forwards one rank's part
      call.wire_bytes = (n - 1) * B;
      call.seconds = (n - 1) * (alpha + B / beta);
      break;
    case CollectiveKind::AllToAll:  // pairwise: n-1 steps, S/(n-1) to each peer
      call.wire_bytes = B;
      call.seconds = (n - 1) * alpha + B / beta;
      break;
    case CollectiveKind::Send:
      call.wire_bytes = B;
      call.seconds = alpha + B / beta;
      break;
  }
}

}  // namespace

void Options::validate() const {
  auto finite = [](double v) { return std::isfinite(v); };
  if (nodes < 1 || nodes > 65536) fail("nodes must be in [1, 65536], got ", nodes);
  if (!(memory_per_node > 0) || !finite(memory_per_node)) fail("memory per node must be positive, got ", memory_per_node);
  if (!(network_gbps > 0) || !finite(network_gbps)) fail("network bandwidth must be positive Gbit/s, got ", network_gbps);
  if (!(latency_us >= 0) || !finite(latency_us)) fail("latency must be >= 0 us, got ", latency_us);
  if (!(memory_bandwidth_gbs > 0) || !finite(memory_bandwidth_gbs))
    fail("memory bandwidth must be positive GB/s, got ", memory_bandwidth_gbs);
  (void)dtype_bytes(dtype);
  if (!(wire_bytes > 0) || !finite(wire_bytes)) fail("wire bytes per value must be positive, got ", wire_bytes);
  if (!(reserve >= 0 && reserve < 1)) fail("reserve must be in [0, 1), got ", reserve);
  if (min_kv_tokens < 0) fail("minimum KV tokens must be >= 0, got ", min_kv_tokens);
  if (sequences < 0) fail("sequences must be >= 0, got ", sequences);
  if (large_batch < 1 || large_batch > (int64_t{1} << 24)) fail("large batch must be in [1, 2^24], got ", large_batch);
}

double dtype_bytes(const std::string& d) {
  if (d == "bf16" || d == "f16") return 2;
  if (d == "fp8") return 1;
  if (d == "nvfp4" || d == "q4_k") return 0.5625;  // 4.5 bits with block scales
  if (d == "q8_0") return 1.0625;                  // 34 bytes per 32 values
  if (d == "f32") return 4;
  fail("dtype must be one of {bf16, f16, fp8, nvfp4, q4_k, q8_0, f32}, got '", d, "'");
}

std::string Layout::name() const {
  std::string s;
  auto add = [&](const char* key, int64_t v) {
    if (v > 1) s += (s.empty() ? "" : ",") + std::string(key) + "=" + std::to_string(v);
  };
  add("tp", tp);
  add("ep", ep);
  add("pp", pp);
  return s.empty() ? "tp=1" : s;
}

Layout parse_layout(const std::string& text) {
  Layout L;
  bool seen[3] = {false, false, false};
  size_t start = 0;
  if (text.empty()) fail("layout is empty (expected e.g. tp=8, tp=4,pp=2 or ep=8)");
  while (start <= text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, end - start);
    const size_t eq = item.find('=');
    const std::string key = eq == std::string::npos ? item : item.substr(0, eq);
    const int index = key == "tp" ? 0 : key == "ep" ? 1 : key == "pp" ? 2 : -1;
    if (index < 0 || eq == std::string::npos)
      fail("layout '", text, "': expected tp=N, ep=N or pp=N separated by commas, got '", item, "'");
    if (seen[index]) fail("layout '", text, "': ", key, " given twice");
    seen[index] = true;
    const std::string digits = item.substr(eq + 1);
    int64_t v = 0;
    if (digits.empty() || digits.size() > 6 || digits.find_first_not_of("0123456789") != std::string::npos ||
        (v = std::stoll(digits)) < 1)
      fail("layout '", text, "': ", key, " must be a positive integer, got '", digits, "'");
    (index == 0 ? L.tp : index == 1 ? L.ep : L.pp) = v;
    start = end + 1;
  }
  return L;
}

std::vector<Layout> candidate_layouts(const ModelConfig& cfg, int64_t nodes) {
  if (nodes < 1 || nodes > 65536) fail("nodes must be in [1, 65536], got ", nodes);
  std::vector<Layout> out;
  for (int64_t pp = 1; pp <= nodes; ++pp) {
    if (nodes % pp != 0) continue;
    const int64_t t = nodes / pp;
    out.push_back({t, 1, pp});
    if (cfg.num_experts > 0 && t > 1) out.push_back({1, t, pp});
  }
  return out;
}

std::string layout_problem(const ModelConfig& c, const Layout& L) {
  auto str = [](auto&&... a) { return detail::concat(a...); };
  if (L.tp < 1 || L.ep < 1 || L.pp < 1) return "every factor must be at least 1";
  if (L.tp > 1 && L.ep > 1) return "tp and ep together are not modelled (use tp x pp or ep x pp)";
  if (L.ep > 1) {
    if (c.num_experts <= 0) return "ep needs a mixture-of-experts model (this one has no experts)";
    if (c.num_experts % L.ep != 0) return str(c.num_experts, " experts do not split evenly over ep=", L.ep);
  }
  if (L.tp > 1) {
    if (c.num_heads % L.tp != 0) return str(c.num_heads, " query heads do not split over tp=", L.tp);
    if (L.tp <= c.num_kv_heads ? c.num_kv_heads % L.tp != 0 : L.tp % c.num_kv_heads != 0)
      return str(c.num_kv_heads, " KV heads neither split over nor replicate evenly onto tp=", L.tp);
    if (c.num_linear_layers() > 0 && c.linear_num_key_heads % L.tp != 0)
      return str(c.linear_num_key_heads, " Gated DeltaNet key heads do not split over tp=", L.tp);
  }
  if (L.pp > c.num_layers) return str("pp=", L.pp, " exceeds the ", c.num_layers, " layers");
  return "";
}

int64_t ParameterBreakdown::total() const {
  int64_t n = 0;
  for (const Category& c : categories) n += c.total;
  return n;
}
int64_t ParameterBreakdown::active() const {
  int64_t n = 0;
  for (const Category& c : categories) n += c.active;
  return n;
}
int64_t ParameterBreakdown::vectors() const {
  int64_t n = 0;
  for (const Category& c : categories) n += c.vectors;
  return n;
}

ParameterBreakdown parameter_breakdown(const ModelConfig& c) {
  const int64_t H = c.hidden_size, V = c.vocab_size;
  const LayerCounts k = count_layers(c, 0, c.num_layers);
  const Part attn = attention_part(c, 1), gdn = k.linear > 0 ? gdn_part(c, 1) : Part{};
  const int64_t expert = c.num_experts > 0 ? mlp_part(c, c.moe_intermediate_size, 1) : 0;
  ParameterBreakdown b;
  auto add = [&](const char* name, int64_t total, int64_t active, int64_t vectors) {
    b.categories.push_back({name, total, active, vectors});
  };
  add("embedding", V * H, V * H, 0);  // as count_parameters: the whole table counts as active
  add("lm_head", c.tie_word_embeddings ? 0 : V * H, c.tie_word_embeddings ? 0 : V * H, 0);
  add("norms", H + 2 * H * c.num_layers, H + 2 * H * c.num_layers, H + 2 * H * c.num_layers);
  add("attention", k.kv * (attn.matrix + attn.vector), k.kv * (attn.matrix + attn.vector), k.kv * attn.vector);
  add("linear_attention", k.linear * (gdn.matrix + gdn.vector), k.linear * (gdn.matrix + gdn.vector),
      k.linear * gdn.vector);
  add("dense_mlp", k.dense * mlp_part(c, c.intermediate_size, 1), k.dense * mlp_part(c, c.intermediate_size, 1), 0);
  add("router", k.moe * c.num_experts * H, k.moe * c.num_experts * H, 0);
  add("routed_experts", k.moe * c.num_experts * expert, k.moe * c.num_experts_per_tok * expert, 0);
  add("shared_experts", k.moe * shared_part(c, 1), k.moe * shared_part(c, 1), 0);
  return b;
}

ModelSummary summarize(const ModelConfig& c, const Options& o) {
  const double db = dtype_bytes(o.dtype);
  const ParameterCount p = count_parameters(c);
  const ParameterBreakdown b = parameter_breakdown(c);
  const LayerCounts k = count_layers(c, 0, c.num_layers);
  const RankShare one = rank_share(c, Layout{}, 0, c.num_layers, true, true);
  ModelSummary s;
  s.parameters = p.total;
  s.active_parameters = p.active;
  s.weight_bytes = static_cast<double>(b.total() - b.vectors()) * db + static_cast<double>(b.vectors()) * kVectorBytes;
  s.active_weight_bytes = one.read_matrix * db + one.read_vector * kVectorBytes;
  s.kv_bytes_per_token = static_cast<int64_t>(KvPool::bytes_per_token(c, o.kv_dtype));
  s.state_bytes_per_sequence = recurrent_state_bytes(c);
  s.kv_layers = k.kv;
  s.linear_layers = k.linear;
  s.moe_layers = k.moe;
  return s;
}

const char* collective_name(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::AllReduce: return "all-reduce";
    case CollectiveKind::AllGather: return "all-gather";
    case CollectiveKind::AllToAll: return "all-to-all";
    case CollectiveKind::Send: return "send";
  }
  return "?";
}

const char* moe_comm_name(MoeComm m) { return m == MoeComm::AllToAll ? "all-to-all" : "all-reduce"; }

std::vector<CollectiveCall> step_collectives(const ModelConfig& c, const Layout& L, const Options& o, int64_t tokens,
                                             MoeComm moe) {
  if (tokens < 1) fail("tokens per step must be positive, got ", tokens);
  const double T = static_cast<double>(tokens), row = static_cast<double>(c.hidden_size) * o.wire_bytes;  // one [1, H]
  std::vector<CollectiveCall> out;
  auto add = [&](CollectiveKind kind, const char* purpose, int64_t stage, int64_t group, int64_t calls,
                 int64_t per_layer, double payload) {
    if (calls <= 0) return;
    CollectiveCall call{kind, purpose, stage, group, calls, per_layer, payload, 0, 0};
    cost_call(call, o);
    out.push_back(call);
  };
  const auto bounds = stage_bounds(c.num_layers, L.pp);
  const bool a2a = L.ep > 1 && moe == MoeComm::AllToAll;
  // Under EP all-to-all, a rank holds its own sequences: ceil(T / e) tokens.
  const double home_tokens = a2a ? std::ceil(T / static_cast<double>(L.ep)) : T;
  for (int64_t s = 0; s < L.pp; ++s) {
    const LayerCounts k = count_layers(c, bounds[s].first, bounds[s].second);
    const bool last = s == L.pp - 1;
    if (L.tp > 1) {
      const int64_t t = L.tp;
      using K = CollectiveKind;
      if (s == 0) add(K::AllReduce, "embedding (vocab-split rows summed)", s, t, 1, 0, T * row);
      add(K::AllReduce, "attention output (row-parallel o_proj)", s, t, k.kv, 1, T * row);
      add(K::AllReduce, "Gated DeltaNet output (row-parallel out_proj)", s, t, k.linear, 1, T * row);
      add(K::AllReduce, "MLP output (row-parallel down_proj)", s, t, k.dense, 1, T * row);
      add(K::AllReduce, "MoE output (1/t of every expert, summed)", s, t, k.moe, 1, T * row);
      // Greedy rows: each rank's (max logit f32, index i32) of each token; rows that sample or
      // return logprobs: each rank's f32 logits over its vocabulary rows.
      if (last && o.greedy) add(K::AllGather, "greedy argmax (max, index) over the vocab split", s, t, 1, 0, T * 8);
      if (last && !o.greedy)
        add(K::AllGather, "logits of the vocab split (f32)", s, t, 1, 0,
            T * static_cast<double>((c.vocab_size + t - 1) / t) * 4);
    }
    if (L.ep > 1) {
      const int64_t e = L.ep;
      if (a2a) {
        // Each of the rank's tokens sends k rows, (e-1)/e of them (expected) to other ranks.
        const double sent = home_tokens * static_cast<double>(c.num_experts_per_tok) * static_cast<double>(e - 1) /
                            static_cast<double>(e) * row;
        add(CollectiveKind::AllToAll, "MoE dispatch (token rows to expert ranks)", s, e, k.moe, 1, sent);
        add(CollectiveKind::AllToAll, "MoE combine (expert outputs back)", s, e, k.moe, 1, sent);
      } else {
        add(CollectiveKind::AllReduce, "MoE output (local experts summed)", s, e, k.moe, 1, T * row);
      }
    }
    if (L.pp > 1 && !last) add(CollectiveKind::Send, "activations to the next stage", s, 2, 1, 0, home_tokens * row);
    // The engine samples on the first stage (with the scheduler): the last sends it each new
    // token's (max, index), or its f32 logits when rows sample or return logprobs.
    if (L.pp > 1 && last && o.greedy)
      add(CollectiveKind::Send, "argmax (max, index) of the new tokens to the first stage", s, 2, 1, 0, T * 8);
    if (L.pp > 1 && last && !o.greedy)
      add(CollectiveKind::Send, "logits of the new tokens to the first stage (f32)", s, 2, 1, 0,
          T * static_cast<double>(c.vocab_size) * 4);
  }
  return out;
}

std::vector<KindTotals> totals_by_kind(const std::vector<CollectiveCall>& calls) {
  std::vector<KindTotals> out;
  for (CollectiveKind kind : {CollectiveKind::AllReduce, CollectiveKind::AllGather, CollectiveKind::AllToAll,
                              CollectiveKind::Send}) {
    KindTotals t{kind};
    for (const CollectiveCall& c : calls) {
      if (c.kind != kind) continue;
      t.calls += c.calls;
      t.wire_bytes += static_cast<double>(c.calls) * c.wire_bytes;
      t.seconds += static_cast<double>(c.calls) * c.seconds;
    }
    if (t.calls > 0) out.push_back(t);
  }
  return out;
}

int64_t total_calls(const std::vector<CollectiveCall>& calls) {
  int64_t n = 0;
  for (const CollectiveCall& c : calls) n += c.calls;
  return n;
}

double total_wire_bytes(const std::vector<CollectiveCall>& calls) {
  double n = 0;
  for (const CollectiveCall& c : calls) n += static_cast<double>(c.calls) * c.wire_bytes;
  return n;
}

double total_seconds(const std::vector<CollectiveCall>& calls) {
  double n = 0;
  for (const CollectiveCall& c : calls) n += static_cast<double>(c.calls) * c.seconds;
  return n;
}

LayoutPlan plan_layout(const ModelConfig& c, const Options& o, const Layout& L) {
  o.validate();
  if (L.ranks() != o.nodes) fail("layout ", L.name(), " uses ", L.ranks(), " ranks, not the ", o.nodes, " nodes");
  if (const std::string problem = layout_problem(c, L); !problem.empty()) fail("layout ", L.name(), ": ", problem);
  const double db = dtype_bytes(o.dtype), bandwidth = o.memory_bandwidth_gbs * 1e9;
  const double usable = o.memory_per_node * (1 - o.reserve);
  const int64_t kv_value_bytes = static_cast<int64_t>(kv_dtype_bytes(o.kv_dtype));
  const int64_t linear_total = c.num_linear_layers();
  const int64_t state_total = recurrent_state_bytes(c);
  LayoutPlan P;
  P.layout = L;
  P.kv_heads_per_rank = L.ep > 1 ? c.num_kv_heads : kv_heads_per_rank(c, L.tp);
  P.kv_replication = L.tp > c.num_kv_heads ? L.tp / c.num_kv_heads : 1;

  // The MoE exchange (EP): the one cheaper at batch 1; both reported.
  if (L.ep > 1) {
    P.ep.large_batch = o.large_batch;
    P.ep.all_to_all_batch1 = total_seconds(step_collectives(c, L, o, 1, MoeComm::AllToAll));
    P.ep.all_reduce_batch1 = total_seconds(step_collectives(c, L, o, 1, MoeComm::AllReduce));
    P.ep.all_to_all_large = total_seconds(step_collectives(c, L, o, o.large_batch, MoeComm::AllToAll));
    P.ep.all_reduce_large = total_seconds(step_collectives(c, L, o, o.large_batch, MoeComm::AllReduce));
    // Ties (k = 1: the same steps and bytes) keep the all-reduce, up to rounding.
    P.moe = P.ep.all_to_all_batch1 < P.ep.all_reduce_batch1 * (1 - 1e-9) ? MoeComm::AllToAll : MoeComm::AllReduce;
    P.collectives_alt =
        step_collectives(c, L, o, 1, P.moe == MoeComm::AllToAll ? MoeComm::AllReduce : MoeComm::AllToAll);
  }
  P.collectives = step_collectives(c, L, o, 1, P.moe);

  const auto bounds = stage_bounds(c.num_layers, L.pp);
  P.kv_tokens = kNoKv;
  P.fits = true;
  for (int64_t s = 0; s < L.pp; ++s) {
    StagePlan st;
    st.first_layer = bounds[s].first;
    st.layers = bounds[s].second;
    const LayerCounts k = count_layers(c, st.first_layer, st.layers);
    st.kv_layers = k.kv;
    st.linear_layers = k.linear;
    st.moe_layers = k.moe;
    st.dense_layers = k.dense;
    st.embedding = s == 0;
    st.lm_head = s == L.pp - 1;
    const RankShare r = rank_share(c, L, st.first_layer, st.layers, st.embedding, st.lm_head);
    st.parameters = r.matrix + r.vector;
    st.weight_bytes = static_cast<double>(r.matrix) * db + static_cast<double>(r.vector) * kVectorBytes;
    st.read_bytes = r.read_matrix * db + r.read_vector * kVectorBytes;
    st.read_bytes_worst = r.read_matrix_worst * db + r.read_vector * kVectorBytes;
    // K and V [its KV heads, hd] per KV layer of the stage.
    st.kv_bytes_per_token = 2 * k.kv * P.kv_heads_per_rank * c.head_dim * kv_value_bytes;
    // The stage's share of the f32 recurrent state, split by heads over the TP ranks.
    st.state_bytes_per_sequence = linear_total > 0 ? state_total / linear_total * k.linear / L.tp : 0;
    st.free_bytes = usable - st.weight_bytes - static_cast<double>(st.state_bytes_per_sequence * o.sequences);
    if (st.kv_bytes_per_token == 0) st.kv_tokens = kNoKv;
    else st.kv_tokens = st.free_bytes > 0 ? static_cast<int64_t>(st.free_bytes / static_cast<double>(st.kv_bytes_per_token)) : 0;
    st.memory_seconds = st.read_bytes / bandwidth;
    for (const CollectiveCall& call : P.collectives)
      if (call.stage == s) st.network_seconds += static_cast<double>(call.calls) * call.seconds;

    P.weight_bytes = std::max(P.weight_bytes, st.weight_bytes);
    P.kv_bytes_per_token = std::max(P.kv_bytes_per_token, st.kv_bytes_per_token);
    P.kv_tokens = std::min(P.kv_tokens, st.kv_tokens);
    P.memory_seconds += st.memory_seconds;
    P.memory_seconds_worst += st.read_bytes_worst / bandwidth;
    if (P.fits && st.free_bytes < 0) {
      P.fits = false;
      P.fit_problem = detail::concat("stage ", s, ": ", gib(st.weight_bytes), " of weights",
                                     st.state_bytes_per_sequence > 0
                                         ? " + " + gib(static_cast<double>(st.state_bytes_per_sequence * o.sequences)) + " of recurrent state"
                                         : std::string(),
                                     " per rank exceed the ", gib(usable), " usable per node");
    } else if (P.fits && st.kv_tokens < o.min_kv_tokens) {
      P.fits = false;
      P.fit_problem = detail::concat("stage ", s, ": KV room for only ", st.kv_tokens, " tokens per rank (fewer than ",
                                     o.min_kv_tokens, ")");
    }
    P.stages.push_back(st);
  }
  P.kv_tokens_total = P.kv_tokens == kNoKv || P.moe != MoeComm::AllToAll || L.ep == 1 ? P.kv_tokens : P.kv_tokens * L.ep;
  P.calls_per_token = total_calls(P.collectives);
  P.wire_bytes_per_token = total_wire_bytes(P.collectives);
  P.network_seconds = total_seconds(P.collectives);
  P.tokens_per_second = 1 / (P.memory_seconds + P.network_seconds);
  if (L.pp > 1) {
    double slowest = 0;
    for (const StagePlan& st : P.stages) slowest = std::max(slowest, st.memory_seconds + st.network_seconds);
    P.pipelined_tokens_per_second = 1 / slowest;
  }

  // Notes: what the numbers assume for this layout.
  auto note = [&](auto&&... a) { P.notes.push_back(detail::concat(a...)); };
  if (P.kv_replication > 1)
    note("KV heads replicated: ", c.num_kv_heads, " KV heads over tp=", L.tp, ", each rank holds 1 (each KV head on ",
         P.kv_replication, " ranks)");
  if (L.tp > 1) {
    if (c.vocab_size % L.tp != 0) note("vocabulary ", c.vocab_size, " padded to ", ceil_div(c.vocab_size, L.tp), " rows per rank");
    if (c.intermediate_size % L.tp != 0) note("intermediate_size padded to ", ceil_div(c.intermediate_size, L.tp), " per rank");
    if (c.num_experts > 0 && c.moe_intermediate_size % L.tp != 0)
      note("moe_intermediate_size padded to ", ceil_div(c.moe_intermediate_size, L.tp), " per rank");
    if (linear_total > 0) note("Gated DeltaNet split by heads: ", c.linear_num_key_heads / L.tp, " key / ",
                               c.linear_num_value_heads / L.tp, " value heads per rank");
  }
  if (L.ep > 1) {
    const int64_t local = c.num_experts / L.ep;
    note("ep: ", local, " experts per rank per MoE layer; attention, dense MLPs, router, shared experts, embedding and "
         "lm_head replicated on every rank");
    char buf[160];
    std::snprintf(buf, sizeof buf, "expert reads per MoE layer: %.2f experts per rank expected (k/e), worst case %lld "
                  "(min(k, E/e)): memory time %.2f ms",
                  static_cast<double>(c.num_experts_per_tok) / static_cast<double>(L.ep),
                  static_cast<long long>(std::min(c.num_experts_per_tok, local)), P.memory_seconds_worst * 1e3);
    note(buf);
    if (P.moe == MoeComm::AllReduce)
      note("MoE by all-reduce: attention runs on every rank for every token, so KV is replicated (capacity not x", L.ep, ")");
    else
      note("MoE by all-to-all: data-parallel attention, each rank holds its own sequences' KV (capacity x", L.ep, ")");
  }
  if (L.pp > 1) {
    std::string split;
    for (const auto& [first, n] : bounds) split += (split.empty() ? "" : " ") + detail::concat("[", first, ",", first + n, ")");
    note("pp: stages balanced by layer count: ", split);
    char buf[200];
    std::snprintf(buf, sizeof buf, "pp: at batch 1 the %lld stages run one after another; with >= %lld sequences in "
                  "flight they overlap: %.1f tokens/s aggregate; m micro-batches in one forward idle (p-1)/(m+p-1)",
                  static_cast<long long>(L.pp), static_cast<long long>(L.pp), P.pipelined_tokens_per_second);
    note(buf);
    if (c.tie_word_embeddings) note("tied embeddings: the last stage holds a copy of the embedding as lm_head");
  }
  return P;
}

std::vector<LayoutPlan> plan_all(const ModelConfig& c, const Options& o) {
  o.validate();
  std::vector<LayoutPlan> plans;
  for (const Layout& L : candidate_layouts(c, o.nodes)) {
    if (std::string problem = layout_problem(c, L); !problem.empty()) {
      LayoutPlan P;
      P.layout = L;
      P.valid = false;
      P.problem = std::move(problem);
      plans.push_back(std::move(P));
      continue;
    }
    plans.push_back(plan_layout(c, o, L));
  }
  auto rank = [](const LayoutPlan& p) { return !p.valid ? 2 : p.fits ? 0 : 1; };
  std::stable_sort(plans.begin(), plans.end(), [&](const LayoutPlan& a, const LayoutPlan& b) {
    if (rank(a) != rank(b)) return rank(a) < rank(b);
    return a.tokens_per_second > b.tokens_per_second;
  });
  if (plans.empty() || !plans.front().valid) {
    std::string why;
    for (const LayoutPlan& p : plans) why += "; " + p.layout.name() + ": " + p.problem;
    fail("no layout of ", o.nodes, " ranks can split this model", why);
  }
  if (!plans.front().fits) {
    // The layout needing the least memory per rank, to say by how much nothing fits.
    const LayoutPlan* best = &plans.front();
    for (const LayoutPlan& p : plans)
      if (p.valid && p.weight_bytes < best->weight_bytes) best = &p;
    fail("nothing fits on ", o.nodes, " node", o.nodes == 1 ? "" : "s", " of ", gib(o.memory_per_node), " (",
         gib(o.memory_per_node * (1 - o.reserve)), " usable after the ", o.reserve * 100,
         "% reserve, at least ", o.min_kv_tokens, " tokens of KV per rank): the layout with the smallest weights per rank, ",
         best->layout.name(), ", holds ", gib(best->weight_bytes), " per rank; ", best->fit_problem);
  }
  return plans;
}

}  // namespace zen::plan
