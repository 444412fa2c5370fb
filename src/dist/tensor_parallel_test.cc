// Tensor parallelism against the single-process model: every rank a thread of one process
// (dist::ThreadGroup), the same code path as under mpirun apart from the transport.
#include "dist/tensor_parallel.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <filesystem>
#include <limits>
#include <numeric>
#include <ostream>
#include <thread>

#include "base/error.h"
#include "base/test_compare.h"
#include "dist/step_message.h"
#include "dist/thread_group.h"
#include "engine/engine_test_util.h"
#include "engine/generate.h"
#include "model/linear.h"
#include "model/model.h"
#include "model/state_cache.h"
#include "plan/plan.h"

namespace zen {
namespace {

namespace fs = std::filesystem;

std::string fixture(const std::string& name) { return (fs::path(ZEN_SOURCE_DIR) / "tests/fixtures/models" / name).string(); }
std::string default_model() { return (fs::path(ZEN_SOURCE_DIR) / "models/default/model.gguf").string(); }

// A model loaded on t ranks: rank 0's is returned by rank0(); the others serve its steps on
// their own threads until it is destroyed.
class TpModel {
 public:
  // t ranks: tensor parallel, or `stages` pipeline stages of t / stages ranks each (a grid
  // when both are above 1).
  TpModel(const std::string& path, int t, bool tokenizer = false, bool expert_parallel = false, int stages = 1)
      : group_(t), stage_comms_(static_cast<size_t>(t)), models_(static_cast<size_t>(t)) {
    std::vector<std::string> errors(static_cast<size_t>(t));
    std::vector<std::thread> loaders;
    for (int r = 0; r < t; ++r)
      loaders.emplace_back([&, r] {
        LoadOptions o;
        o.n_threads = 1;
        o.load_tokenizer = tokenizer;
        o.tensor_parallel.comm = &group_.member(r);
        o.tensor_parallel.expert_parallel = expert_parallel;
        o.tensor_parallel.pipeline_stages = stages;
        stage_comms_[static_cast<size_t>(r)] = dist::split_stages(o.tensor_parallel);
        o.tensor_parallel.stage_comm = stage_comms_[static_cast<size_t>(r)].get();
        try {
          models_[static_cast<size_t>(r)] = Model::load(path, o);
        } catch (const Error& e) {
          errors[static_cast<size_t>(r)] = e.what();
        }
      });
    for (auto& l : loaders) l.join();
    for (const std::string& e : errors)
      if (!e.empty()) fail(e);
    for (int r = 1; r < t; ++r) workers_.emplace_back([this, r] { models_[static_cast<size_t>(r)]->serve_steps(); });
  }
  ~TpModel() {
    models_[0].reset();  // releases the other ranks
    for (auto& w : workers_) w.join();
  }
  Model& rank0() { return *models_[0]; }
  const dist::Stats& stats() { return group_.member(0).stats(); }

 private:
  dist::ThreadGroup group_;
  std::vector<std::unique_ptr<dist::Communicator>> stage_comms_;  // a grid's, per rank
  std::vector<std::unique_ptr<Model>> models_;
  std::vector<std::thread> workers_;
};

std::unique_ptr<Model> single(const std::string& path, bool tokenizer = false) {
  return Model::load(path, {.n_threads = 1, .load_tokenizer = tokenizer});
}

// Logits of every position of prompt: [prompt.size(), vocab].
std::vector<float> all_logits(Model& m, const std::vector<int32_t>& prompt) {
  auto cache = m.new_cache(static_cast<int64_t>(prompt.size()) + 8);
  std::vector<float> logits(prompt.size() * static_cast<size_t>(m.config().vocab_size));
  m.forward(*cache, prompt, logits.data(), /*all_logits=*/true);
  return logits;
}

std::vector<int32_t> greedy_tokens(Model& m, const std::vector<int32_t>& prompt, int64_t n) {
  GenerateOptions o;
  o.max_tokens = n;
  o.ignore_eos = true;
  return generate(m, prompt, o).tokens;
}

TEST(TensorParallel, SplitCutsOnUnitsAndCoversEverything) {
  EXPECT_EQ(dist::split(4864, 2, 0, 256), (dist::Range{0, 2560}));
  EXPECT_EQ(dist::split(4864, 2, 1, 256), (dist::Range{2560, 4864}));
  EXPECT_EQ(dist::split(151936, 2, 1), (dist::Range{75968, 151936}));
  EXPECT_EQ(dist::split(3, 4, 3), (dist::Range{3, 3}));  // nothing left for the last
  for (int t : {1, 2, 3, 5})
    for (int64_t unit : {1, 32, 256}) {
      int64_t next = 0;
      for (int r = 0; r < t; ++r) {
        const dist::Range part = dist::split(1000 * unit + 7, t, r, unit);
        EXPECT_EQ(part.begin, next);
        EXPECT_TRUE(part.begin % unit == 0);
        next = part.end;
      }
      EXPECT_EQ(next, 1000 * unit + 7);
    }
}

// Stages balanced by cost: the smallest largest stage, the lm_head on the last, ties keeping
// the first stage (rank 0 also schedules) small.
TEST(TensorParallel, PipelineStagesBalanceTheirCost) {
  auto stages = [](const std::vector<double>& cost, double head, int p) {
    std::vector<std::pair<int64_t, int64_t>> out;
    for (int s = 0; s < p; ++s) {
      const dist::Range r = dist::pipeline_layers(cost, head, p, s);
      out.emplace_back(r.begin, r.end);
    }
    return out;
  };
  using V = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(stages({1, 1, 1, 1}, 0, 2), (V{{0, 2}, {2, 4}}));
  EXPECT_EQ(stages({1, 1, 1, 1}, 2, 2), (V{{0, 3}, {3, 4}}));  // the head weighs two layers
  EXPECT_EQ(stages({1, 1, 1}, 0, 2), (V{{0, 1}, {1, 3}}));     // a tie: the first stage smaller
  EXPECT_EQ(stages({2, 2, 1, 1, 1, 1}, 0, 3), (V{{0, 1}, {1, 3}, {3, 6}}));
  EXPECT_EQ(stages({1, 1}, 100, 2), (V{{0, 1}, {1, 2}}));  // every stage keeps a layer
  // Layer counts alone, as zen plan lays them out: the first L % P stages one more.
  EXPECT_EQ(dist::pipeline_layers(10, 4, 0), (dist::Range{0, 3}));
  EXPECT_EQ(dist::pipeline_layers(10, 4, 3), (dist::Range{8, 10}));
}

TEST(TensorParallel, HeadsSplitOrReplicateKvHeads) {
  ModelConfig c;
  c.num_heads = 14;
  c.num_kv_heads = 2;
  EXPECT_EQ(dist::head_shard(c, 2, 1).q_heads, (dist::Range{7, 14}));
  EXPECT_EQ(dist::head_shard(c, 2, 1).kv_heads, (dist::Range{1, 2}));
  c.num_heads = 8;
  // 4 ranks over 2 KV heads: ranks 0, 1 read KV head 0, ranks 2, 3 KV head 1.
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(dist::head_shard(c, 4, r).q_heads, (dist::Range{2 * r, 2 * r + 2}));
    EXPECT_EQ(dist::head_shard(c, 4, r).kv_heads, (dist::Range{r / 2, r / 2 + 1}));
  }
}

TEST(TensorParallel, StepMessageRoundTrips) {
  KvPool pool(single(fixture("qwen3_f32"))->config(), 8);
  const std::vector<int32_t> t0 = {1, 2, 3}, b0 = {4, 5}, t1 = {7}, b1 = {0}, h1 = {3};
  std::vector<SeqSlice> seqs(2);
  seqs[0] = {t0, 5, b0, -1, true, {}, false};
  seqs[1] = {t1, 0, b1, 2, false, h1, true};
  StatePool states(16, 3);
  ForwardBatch batch;
  batch.kv = &pool;
  batch.states = &states;
  batch.seqs = seqs;
  batch.argmax_only = true;
  KvPool window(single(fixture("qwen3_f32"))->config(), 3);  // the sliding layers' pool and tables
  const std::vector<int32_t> w0 = {-1, 2}, w1 = {0};
  seqs[0].window_blocks = w0;
  seqs[1].window_blocks = w1;
  batch.window_kv = &window;
  std::vector<uint8_t> body = dist::encode_step(batch);
  const dist::DecodedStep d = dist::decode_step(body);
  EXPECT_NE(d.window_pool.id, 0u);
  EXPECT_EQ(d.window_pool.num_blocks, 3);
  EXPECT_EQ(std::vector<int32_t>(d.seqs[0].window_blocks.begin(), d.seqs[0].window_blocks.end()), w0);
  EXPECT_EQ(std::vector<int32_t>(d.seqs[1].window_blocks.begin(), d.seqs[1].window_blocks.end()), w1);
  EXPECT_EQ(d.states_slots, 3);
  EXPECT_NE(d.states_id, 0u);
  EXPECT_TRUE(d.argmax_only);
  EXPECT_EQ(d.pool.num_blocks, 8);
  EXPECT_EQ(d.pool.block_size, pool.block_size());
  ASSERT_EQ(d.seqs.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(std::vector<int32_t>(d.seqs[i].tokens.begin(), d.seqs[i].tokens.end()),
              std::vector<int32_t>(seqs[i].tokens.begin(), seqs[i].tokens.end()));
    EXPECT_EQ(std::vector<int32_t>(d.seqs[i].blocks.begin(), d.seqs[i].blocks.end()),
              std::vector<int32_t>(seqs[i].blocks.begin(), seqs[i].blocks.end()));
    EXPECT_EQ(d.seqs[i].state_history.size(), seqs[i].state_history.size());
    EXPECT_EQ(d.seqs[i].pos, seqs[i].pos);
    EXPECT_EQ(d.seqs[i].state_slot, seqs[i].state_slot);
    EXPECT_EQ(d.seqs[i].all_logits, seqs[i].all_logits);
    EXPECT_EQ(d.seqs[i].recurrent_form, seqs[i].recurrent_form);
  }
  body.resize(body.size() - 8);
  EXPECT_THROW(dist::decode_step(body), Error);
  batch.window_kv = nullptr;  // without a window pool: id 0 and no tables
  const dist::DecodedStep plain = dist::decode_step(dist::encode_step(batch));
  EXPECT_EQ(plain.window_pool.id, 0u);
  EXPECT_TRUE(plain.seqs[0].window_blocks.empty());
}

// Rows of a sliced matrix are the whole matrix's rows bit for bit; column slices add up to it.
TEST(TensorParallel, SlicedLinearMatchesTheWholeMatrix) {
  const std::string path = fs::exists(default_model()) ? default_model() : fixture("qwen2_f32");
  auto ckpt = Checkpoint::open(path);
  const ModelConfig cfg = ckpt->format() == CheckpointFormat::Gguf ? ModelConfig::from_gguf(*ckpt->gguf())
                                                                   : ModelConfig::from_hf(ckpt->hf_config());
  const bool gguf = ckpt->format() == CheckpointFormat::Gguf;
  const std::string down = gguf ? "blk.0.ffn_down.weight" : "model.layers.0.mlp.down_proj.weight";
  const int64_t H = cfg.hidden_size, I = cfg.intermediate_size;
  const QuantConfig quant = QuantConfig::from_checkpoint(*ckpt);
  const Linear whole = Linear::bind(*ckpt, down, {H, I}, quant);
  const int64_t unit = Linear::column_block(*ckpt, down, quant);
  std::vector<float> x(static_cast<size_t>(3 * I));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
  ThreadPool pool(1);
  std::vector<float> want(static_cast<size_t>(3 * H));
  whole.matmul(x.data(), 3, want.data(), pool);

  // Rows [5, H - 3): the same numbers.
  const Linear rows = Linear::bind_slice(*ckpt, down, {H, I}, quant, {5, H - 3}, {0, I});
  std::vector<float> got(static_cast<size_t>(3 * (H - 8)));
  rows.matmul(x.data(), 3, got.data(), pool);
  for (int64_t t = 0; t < 3; ++t)
    for (int64_t r = 0; r < H - 8; ++r) ASSERT_EQ(got[static_cast<size_t>(t * (H - 8) + r)], want[static_cast<size_t>(t * H + r + 5)]);

  // Two column halves cut on the format's blocks: their sum within f32 rounding of the whole.
  std::vector<float> sum(want.size(), 0.0f);
  for (int part = 0; part < 2; ++part) {
    const dist::Range cols = dist::split(I, 2, part, unit);
    const Linear half = Linear::bind_slice(*ckpt, down, {H, I}, quant, {0, H}, cols);
    std::vector<float> xs(static_cast<size_t>(3 * cols.size())), y(want.size());
    for (int64_t t = 0; t < 3; ++t)
      std::copy_n(&x[static_cast<size_t>(t * I + cols.begin)], cols.size(), &xs[static_cast<size_t>(t * cols.size())]);
    half.matmul(xs.data(), 3, y.data(), pool);
    for (size_t i = 0; i < y.size(); ++i) sum[i] += y[i];
  }
  EXPECT_LE(max_diff(sum, want), 1e-5f * std::max(1.0f, max_abs(want)));

  // A cut inside a block is refused, naming the tensor.
  if (unit > 1) {
    try {
      Linear::bind_slice(*ckpt, down, {H, I}, quant, {0, H}, {0, unit / 2});
      FAIL() << "a cut inside a block was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(down), std::string::npos) << e.what();
    }
  }
}

struct TpCase {
  std::string model;
  int ranks;
  bool expert_parallel = false;
  bool pipeline = false;  // the ranks are pipeline stages
  int grid_stages = 1;    // > 1: that many stages of ranks / grid_stages tensor-parallel ranks
  int stages() const { return pipeline ? ranks : grid_stages; }
  int tp() const { return ranks / stages(); }
};

class TensorParallelFixtures : public ::testing::TestWithParam<TpCase> {};

// Logits within the bound (only the order of the row-parallel sums changes), greedy tokens equal.
TEST_P(TensorParallelFixtures, MatchesOneProcess) {
  const TpCase& c = GetParam();
  auto one = single(fixture(c.model));
  TpModel tp(fixture(c.model), c.ranks, false, c.expert_parallel, c.stages());
  const int64_t V = one->config().vocab_size;
  std::vector<int32_t> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back(static_cast<int32_t>((i * 37 + 11) % V));
  const std::vector<float> want = all_logits(*one, prompt), got = all_logits(tp.rank0(), prompt);
  // Pipeline stages run the same arithmetic (kernels are batch-invariant): bit-identical.
  EXPECT_LE(max_diff(got, want), c.pipeline ? 0.0f : 1e-5f * std::max(1.0f, max_abs(want)));
  EXPECT_EQ(greedy_tokens(tp.rank0(), prompt, 24), greedy_tokens(*one, prompt, 24));
  if (c.stages() > 1) {  // rank 0 holds the first stage's layers
    EXPECT_GT(tp.rank0().config().num_layers, 0);
    EXPECT_LT(tp.rank0().config().num_layers, one->config().num_layers);
  }
  if (c.tp() > 1) {  // a rank holds its share of the KV heads
    EXPECT_EQ(tp.rank0().config().num_kv_heads * std::min(c.tp(), static_cast<int>(one->config().num_kv_heads)),
              one->config().num_kv_heads);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TensorParallelFixtures,
                         ::testing::Values(TpCase{"llama_f32", 2}, TpCase{"qwen2_f32", 2}, TpCase{"qwen3_f32", 2},
                                           TpCase{"qwen3_f32", 4}, TpCase{"qwen2_bf16_tied", 2},
                                           TpCase{"qwen3_bf16_tied", 4}, TpCase{"qwen2_sliding_layer_types", 2},
                                           // Expert parallel: whole experts per rank (HF per-expert
                                           // tensors, GGUF stacked ones), the shared expert split.
                                           TpCase{"qwen3_moe_f32", 2, true}, TpCase{"qwen3_moe_f32", 4, true},
                                           TpCase{"qwen3_moe_step2", 2, true}, TpCase{"qwen2_moe_shared", 2, true},
                                           TpCase{"qwen3_moe_bf16_tied.gguf", 2, true},
                                           // Tensor parallel MoE (vLLM's default): every expert's
                                           // rows split, HF per-expert and GGUF stacked tensors.
                                           TpCase{"qwen3_moe_f32", 2}, TpCase{"qwen3_moe_f32", 4},
                                           TpCase{"qwen3_moe_step2", 2}, TpCase{"qwen2_moe_shared", 2},
                                           TpCase{"qwen3_moe_bf16_tied.gguf", 2},
                                           TpCase{"qwen3_5_moe_bf16", 2}, TpCase{"qwen3_next_moe_bf16", 2},
                                           TpCase{"qwen3_5_moe_tied_f32.gguf", 2},
                                           // Hybrid: attention heads, Gated DeltaNet key heads with
                                           // their value heads (separate and fused projections).
                                           TpCase{"qwen3_5_text_f32", 2}, TpCase{"qwen3_next_f32", 2},
                                           TpCase{"qwen3_5_vl_bf16", 2}, TpCase{"qwen3_next_tied_f32.gguf", 2, true}, TpCase{"qwen3_5_tied_f32.gguf", 2},
                                           TpCase{"qwen3_5_moe_bf16", 2, true}, TpCase{"qwen3_next_moe_bf16", 2, true},
                                           // Pipeline stages: whole layers per rank.
                                           TpCase{"llama_f32", 2, false, true}, TpCase{"qwen3_bf16_tied", 2, false, true},
                                           TpCase{"qwen2_sliding_layer_types", 2, false, true},
                                           TpCase{"qwen3_moe_step2", 4, false, true},
                                           TpCase{"qwen3_moe_bf16_tied.gguf", 2, false, true},
                                           TpCase{"qwen3_5_text_f32", 2, false, true},
                                           TpCase{"qwen3_next_f32", 2, false, true},
                                           TpCase{"qwen3_5_tied_f32.gguf", 2, false, true},
                                           TpCase{"qwen3_5_moe_bf16", 2, false, true},
                                           // Grids: tensor parallel 2 inside each of 2 stages
                                           // (the vocabulary slices on the first and last).
                                           TpCase{"llama_f32", 4, false, false, 2},
                                           TpCase{"qwen3_bf16_tied", 4, false, false, 2},
                                           TpCase{"qwen3_moe_bf16_tied.gguf", 4, true, false, 2},
                                           TpCase{"qwen3_moe_bf16_tied.gguf", 4, false, false, 2},
                                           TpCase{"qwen3_5_text_f32", 4, false, false, 2},
                                           TpCase{"qwen3_5_tied_f32.gguf", 4, false, false, 2}),
                         [](const auto& info) {
                           std::string name = info.param.model + "_tp" + std::to_string(info.param.ranks);
                           if (info.param.expert_parallel) name += "_ep";
                           if (info.param.pipeline) name += "_pp";
                           if (info.param.grid_stages > 1) name += "_pp" + std::to_string(info.param.grid_stages);
                           for (char& ch : name)
                             if (ch == '.') ch = '_';
                           return name;
                         });

// The engine on rank 0 (scheduling, prefix cache, preemption) with 16 requests at once and a
// pool small enough to preempt: every request's tokens equal the single-process engine's; on a
// dense model, a MoE one whose every expert is sliced, and one with sliding-window layers.
class TensorParallelEngine : public ::testing::TestWithParam<std::string> {};

INSTANTIATE_TEST_SUITE_P(Models, TensorParallelEngine, ::testing::Values("qwen3_f32", "qwen3_moe_step2", "qwen3_sliding"));

TEST_P(TensorParallelEngine, AtConcurrency16WithPreemptionMatchesOneProcess) {
  auto one = single(fixture(GetParam()));
  TpModel tp(fixture(GetParam()), 2);
  const auto prompts = test::random_prompts(16, 5, 40, static_cast<int32_t>(one->config().vocab_size), 7);
  const RequestParams params = test::greedy(40);
  Engine e1(*one, test::pool_of(*one, 24, 64));
  Engine e2(tp.rank0(), test::pool_of(tp.rank0(), 24, 64));
  const auto want = test::run_all(e1, prompts, params);
  const auto got = test::run_all(e2, prompts, params);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
    EXPECT_EQ(got[i].finish_reason, "length");
  }
  EXPECT_GT(e2.stats().preemptions, 0) << "the pool was meant to preempt";
  if (GetParam() == "qwen3_sliding") {  // the ranks keep the sliding layers in their window pools too
    EXPECT_NE(e2.describe().find("Sliding-window layers: 2 of 3"), std::string::npos) << e2.describe();
  }
  // Greedy requests without logprobs: the steps exchanged (max, index), 8 bytes a row.
  const dist::OpStats& gathers = tp.stats()[dist::Op::AllGather];
  EXPECT_LE(gathers.bytes / static_cast<double>(gathers.calls), 8.0 * 16);
}

// Pipeline stages of the sliding fixture (3 layers: full, sliding, sliding): each stage keeps
// its sliding layers in a window pool mirroring rank 0's, whose window is the job's widest even
// where rank 0's own stage has no sliding layer (3 stages: layer 0 alone).
TEST(TensorParallelEngineSliding, PipelineStagesKeepTheirWindowsApart) {
  auto one = single(fixture("qwen3_sliding"));
  const auto prompts = test::random_prompts(16, 5, 60, static_cast<int32_t>(one->config().vocab_size), 8);
  const RequestParams params = test::greedy(30);
  Engine e1(*one, test::pool_of(*one, 24, 64));
  const auto want = test::run_all(e1, prompts, params);
  for (const int stages : {2, 3}) {
    SCOPED_TRACE(std::to_string(stages) + " stages");
    TpModel pp(fixture("qwen3_sliding"), stages, false, false, stages);
    Engine e2(pp.rank0(), test::pool_of(pp.rank0(), 24, 64));
    EXPECT_NE(e2.describe().find("Sliding-window layers: at most 1 KV layers a stage keep their last 7 positions"),
              std::string::npos)
        << e2.describe();
    const auto got = test::run_all(e2, prompts, params);
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
    EXPECT_EQ(e2.stats().kv_blocks_used, 0);
  }
}

// The planner on two ranks with the engine's wire: f32 activations, (max, index) or f32 logits.
plan::Options wire_as_measured(bool argmax_only) {
  plan::Options o;
  o.nodes = 2;
  o.memory_per_node = 1e12;
  o.network_gbps = 100;
  o.wire_bytes = 4;
  o.greedy = argmax_only;
  return o;
}

// One all-reduce for the embedding and two a layer, one all-gather of logits: what
// `zen plan` counts for tp=2, with the bytes the engine moves (f32 rows, f32 logit slices).
// The same for a MoE model under expert parallelism: one all-reduce per MoE layer. argmax_only:
// the step needs only each row's argmax, and the vocabulary split exchanges (max, index).
void expect_planner_collectives(const std::string& model, bool expert_parallel, bool argmax_only) {
  SCOPED_TRACE(model + (argmax_only ? " argmax" : " logits"));
  TpModel tp(fixture(model), 2, false, expert_parallel);
  const ModelConfig full = single(fixture(model))->config();
  std::vector<int32_t> prompt = {1, 2, 3, 4, 5};
  all_logits(tp.rank0(), {1});  // a first forward
  const dist::Stats before = tp.stats();
  auto cache = tp.rank0().new_cache(16);
  std::vector<float> logits(static_cast<size_t>(full.vocab_size));
  tp.rank0().forward(*cache, prompt, logits.data(), false, argmax_only);
  const plan::Options o = wire_as_measured(argmax_only);
  const auto calls = plan::step_collectives(full, {2, 1, 1}, o, static_cast<int64_t>(prompt.size()));
  int64_t reduces = 0, gathers = 0;
  double reduce_bytes = 0, gather_bytes = 0;
  for (const plan::CollectiveCall& c : calls) {
    if (c.kind == plan::CollectiveKind::AllReduce) reduces += c.calls, reduce_bytes += c.calls * c.payload_bytes;
    if (c.kind == plan::CollectiveKind::AllGather) gathers += c.calls, gather_bytes += c.calls * c.payload_bytes;
  }
  const dist::Stats& after = tp.stats();
  EXPECT_EQ(after[dist::Op::AllReduce].calls - before[dist::Op::AllReduce].calls, reduces);
  EXPECT_EQ(after[dist::Op::AllReduce].bytes - before[dist::Op::AllReduce].bytes, reduce_bytes);
  EXPECT_EQ(after[dist::Op::AllGather].calls - before[dist::Op::AllGather].calls, gathers);
  // The engine gathers logits for the rows it needs (here the last): the planner's per token.
  EXPECT_EQ(after[dist::Op::AllGather].bytes - before[dist::Op::AllGather].bytes,
            gather_bytes / static_cast<double>(prompt.size()));
}

// Pipeline stages: rank 0 sends [tokens, H] to stage 1 and receives the logits (or the
// (max, index)) of its rows: the planner's two sends.
TEST(TensorParallel, PipelineSendsAreThePlannersAtF32) {
  const std::string model = fixture("qwen3_moe_step2");
  const ModelConfig full = single(model)->config();
  for (const bool argmax_only : {false, true}) {
    SCOPED_TRACE(argmax_only ? "argmax" : "logits");
    TpModel pp(model, 2, false, false, 2);
    const std::vector<int32_t> prompt = {1, 2, 3, 4, 5};
    auto cache = pp.rank0().new_cache(16);
    std::vector<float> logits(static_cast<size_t>(full.vocab_size));
    pp.rank0().forward(*cache, prompt, logits.data(), false, argmax_only);
    const plan::Options o = wire_as_measured(argmax_only);
    const auto T = static_cast<int64_t>(prompt.size());
    std::vector<double> sends;
    for (const plan::CollectiveCall& c : plan::step_collectives(full, {1, 1, 2}, o, T))
      if (c.kind == plan::CollectiveKind::Send) sends.push_back(c.payload_bytes);
    ASSERT_EQ(sends.size(), 2u);
    const dist::Stats& s = pp.stats();
    EXPECT_EQ(s[dist::Op::Send].calls, 1);
    EXPECT_EQ(s[dist::Op::Send].bytes, sends[0]);
    EXPECT_EQ(s[dist::Op::Recv].calls, 1);
    // The logits (or maxima) of the rows the engine needs (here the last): the planner's per token.
    EXPECT_EQ(s[dist::Op::Recv].bytes, sends[1] / static_cast<double>(T));
  }
}

TEST(TensorParallel, CollectivesPerForwardAreThePlannersAtF32) {
  for (const bool argmax_only : {false, true}) {
    expect_planner_collectives("qwen3_f32", false, argmax_only);
    expect_planner_collectives("qwen3_moe_step2", true, argmax_only);
    expect_planner_collectives("qwen3_moe_step2", false, argmax_only);  // every expert sliced
  }
}

// An argmax-only forward: rows of -inf holding the maximum at the whole row's argmax, the
// same value the full logits hold there; tensor parallel (all-gather of (max, index)) and
// pipelined (the last stage sends them), for every position of a prompt.
TEST(TensorParallel, ArgmaxOnlyRowsHoldTheMaximumAtTheArgmax) {
  const std::string model = fixture("qwen3_f32");
  auto one = single(model);
  const int64_t V = one->config().vocab_size;
  std::vector<int32_t> prompt;
  for (int i = 0; i < 30; ++i) prompt.push_back(static_cast<int32_t>((i * 29 + 3) % V));
  const std::vector<float> want = all_logits(*one, prompt);
  for (const bool pipeline : {false, true}) {
    SCOPED_TRACE(pipeline ? "pipeline" : "tensor parallel");
    TpModel m(model, 2, false, false, pipeline ? 2 : 1);
    auto cache = m.rank0().new_cache(static_cast<int64_t>(prompt.size()));
    std::vector<float> got(want.size());
    m.rank0().forward(*cache, prompt, got.data(), true, /*argmax_only=*/true);
    for (size_t t = 0; t < prompt.size(); ++t) {
      const float* w = &want[t * static_cast<size_t>(V)];
      const float* g = &got[t * static_cast<size_t>(V)];
      const int64_t at = std::max_element(w, w + V) - w;
      EXPECT_EQ(std::max_element(g, g + V) - g, at) << "position " << t;
      EXPECT_NEAR(g[at], w[at], 1e-5f * std::max(1.0f, std::fabs(w[at])));
      EXPECT_EQ(std::count(g, g + V, -std::numeric_limits<float>::infinity()), V - 1);
    }
  }
}

TEST(TensorParallel, RefusesWhatItCannotSplitWithTheReason) {
  auto expect_refusal = [](const std::string& model, int t, const std::string& words) {
    try {
      TpModel tp(fixture(model), t);
      ADD_FAILURE() << model << " loaded with tensor parallel size " << t;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  expect_refusal("qwen3_f32", 3, "query heads do not split");
  try {
    TpModel pp(fixture("qwen3_f32"), 4, false, false, 4);
    ADD_FAILURE() << "2 layers loaded in 4 pipeline stages";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("2 layers do not make 4 pipeline stages"), std::string::npos) << e.what();
  }
}

// Proposers that borrow the target's lm_head and embedding (MTP, DFlash) on a split target
// (tensor parallel, pipeline stages, grids): rank 0 runs the drafter, every rank its share of
// the borrowed parts (and of the MTP head). 16 requests at once with 3 drafts each: the tokens
// of one process without speculation, and the drafts (so the acceptance) of one process with it.
struct BorrowCase {
  std::string method, target, drafter;  // fixture paths under tests/fixtures
  int ranks = 2, stages = 1;            // stages > 1: pipeline stages (of ranks / stages each)
};

void PrintTo(const BorrowCase& c, std::ostream* os) {
  *os << c.method << " " << c.target << " " << c.drafter << " ranks " << c.ranks << " stages " << c.stages;
}

class TensorParallelBorrowingDrafter : public ::testing::TestWithParam<BorrowCase> {};

TEST_P(TensorParallelBorrowingDrafter, MatchesOneProcess) {
  const BorrowCase& c = GetParam();
  const fs::path root = fs::path(ZEN_SOURCE_DIR) / "tests/fixtures";
  const std::string path = (root / c.target).string();
  auto one = single(path);
  TpModel tp(path, c.ranks, false, false, c.stages);
  const auto prompts = test::random_prompts(16, 8, 40, static_cast<int32_t>(one->config().vocab_size) - 1, 5);
  const RequestParams params = test::greedy(24);
  Engine plain(*one, test::pool_of(*one, 256, 64));
  const auto want = test::run_all(plain, prompts, params);
  auto speculative = [&](Model& m) {
    EngineOptions o = test::pool_of(m, 256, 64);
    o.speculative.method = c.method;
    if (!c.drafter.empty()) o.speculative.model = (root / c.drafter).string();
    o.speculative.num_speculative_tokens = 3;
    o.speculative.adaptive = false;
    return o;
  };
  Engine e1(*one, speculative(*one)), e2(tp.rank0(), speculative(tp.rank0()));
  const auto solo = test::run_all(e1, prompts, params);
  const auto got = test::run_all(e2, prompts, params);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(solo[i].tokens, want[i].tokens) << "request " << i;
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
  }
  EXPECT_GT(e2.stats().spec_draft_tokens, 16 * 3);
  EXPECT_EQ(e2.stats().spec_draft_tokens, e1.stats().spec_draft_tokens);
  EXPECT_EQ(e2.stats().spec_accepted_tokens, e1.stats().spec_accepted_tokens);
  // The trained drafter (on other prompts than these) is right often enough to be used.
  if (c.drafter == "dflash/trained") {
    EXPECT_GT(e2.stats().spec_accepted_tokens, 16);
  }
}

INSTANTIATE_TEST_SUITE_P(Methods, TensorParallelBorrowingDrafter,
                         ::testing::Values(BorrowCase{"mtp", "models/qwen3_5_text_f32", ""},
                                           BorrowCase{"mtp", "models/qwen3_5_tied_f32.gguf", ""},
                                           BorrowCase{"dflash", "dflash/target", "dflash/trained"},
                                           BorrowCase{"dflash", "dflash/target", "dflash/v2"},
                                           BorrowCase{"dflash", "dflash/hybrid/target", "dflash/hybrid/v1"},
                                           // Pipeline stages: the embedding on the first, the
                                           // output head and the MTP head on the last, the taps
                                           // sent to rank 0 by the stages holding their layers.
                                           BorrowCase{"mtp", "models/qwen3_5_text_f32", "", 2, 2},
                                           BorrowCase{"mtp", "models/qwen3_5_tied_f32.gguf", "", 2, 2},
                                           BorrowCase{"dflash", "dflash/target", "dflash/trained", 2, 2},
                                           BorrowCase{"dflash", "dflash/hybrid/target", "dflash/hybrid/v1", 2, 2},
                                           // Grids: two stages of two tensor-parallel ranks.
                                           BorrowCase{"mtp", "models/qwen3_5_text_f32", "", 4, 2},
                                           BorrowCase{"dflash", "dflash/target", "dflash/trained", 4, 2}),
                         [](const auto& info) {
                           std::string name = info.param.method + "_" + info.param.target + "_" + info.param.drafter +
                                              "_r" + std::to_string(info.param.ranks) + "_pp" +
                                              std::to_string(info.param.stages);
                           for (char& ch : name)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return name;
                         });

// Pipeline stages under the engine: 16 requests in micro-batches, preemption: one process's tokens.
TEST(TensorParallel, PipelineEngineAtConcurrency16WithPreemptionMatchesOneProcess) {
  auto one = single(fixture("qwen3_moe_step2"));
  TpModel pp(fixture("qwen3_moe_step2"), 2, false, false, 2);
  const auto prompts = test::random_prompts(16, 5, 40, static_cast<int32_t>(one->config().vocab_size), 9);
  const RequestParams params = test::greedy(32);
  Engine e1(*one, test::pool_of(*one, 24, 64));
  Engine e2(pp.rank0(), test::pool_of(pp.rank0(), 24, 64));
  const auto want = test::run_all(e1, prompts, params);
  const auto got = test::run_all(e2, prompts, params);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
  EXPECT_GT(e2.stats().preemptions, 0) << "the pool was meant to preempt";
  // Rank 0 sent one micro-batch's hidden states per stage per forward and received the logits.
  EXPECT_GT(pp.stats()[dist::Op::Send].calls, 0);
  EXPECT_GT(pp.stats()[dist::Op::Recv].calls, 0);
}

// A MoE model under expert parallelism at concurrency 16 with preemption: equal to one process.
TEST(TensorParallel, ExpertParallelEngineAtConcurrency16MatchesOneProcess) {
  auto one = single(fixture("qwen2_moe_shared"));
  TpModel tp(fixture("qwen2_moe_shared"), 2, false, true);
  const auto prompts = test::random_prompts(16, 5, 40, static_cast<int32_t>(one->config().vocab_size), 11);
  const RequestParams params = test::greedy(32);
  Engine e1(*one, test::pool_of(*one, 24, 64));
  Engine e2(tp.rank0(), test::pool_of(tp.rank0(), 24, 64));
  const auto want = test::run_all(e1, prompts, params);
  const auto got = test::run_all(e2, prompts, params);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
  EXPECT_GT(e2.stats().preemptions, 0) << "the pool was meant to preempt";
}

// The residual stream after every layer: [tokens, layers * H].
std::vector<float> all_taps(Model& m, const std::vector<int32_t>& prompt) {
  const ModelConfig& c = m.config();
  auto cache = m.new_cache(static_cast<int64_t>(prompt.size()) + 8);
  std::vector<int32_t> layers(static_cast<size_t>(c.num_layers));
  std::iota(layers.begin(), layers.end(), 0);
  std::vector<float> taps(prompt.size() * layers.size() * static_cast<size_t>(c.hidden_size));
  std::vector<float> logits(static_cast<size_t>(c.vocab_size));
  SeqSlice slice;
  slice.tokens = prompt;
  slice.blocks = cache->blocks();
  ForwardBatch batch;
  batch.kv = &cache->pool();
  batch.seqs = std::span<const SeqSlice>(&slice, 1);
  batch.tap_layers = layers;
  batch.taps = taps.data();
  m.forward(batch, logits.data());
  return taps;
}

// A hybrid model on two ranks under the engine: prefix snapshots (state copies made between
// forwards, mirrored to rank 1), preemption with a tiny pool, 16 requests at once, and n-gram
// speculation (rollback restores states from the history slots): the tokens of one process.
void expect_hybrid_engine_matches_one_process(int ranks, int stages) {
  const std::string path = fixture("qwen3_5_text_f32");
  auto one = single(path);
  TpModel tp(path, ranks, false, false, stages);
  const int32_t V = static_cast<int32_t>(one->config().vocab_size);
  // Shared 130-token prefixes (snapshots at 64 and 128), repetitive tails (n-gram drafts hit).
  std::vector<std::vector<int32_t>> prompts = test::random_prompts(16, 140, 160, V, 21);
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::copy_n(prompts[0].begin(), 130, prompts[i].begin());
    for (size_t j = 130; j < prompts[i].size(); ++j) prompts[i][j] = prompts[i][j - 7];
  }
  const RequestParams params = test::greedy(24);
  for (const bool speculate : {false, true}) {
    SCOPED_TRACE(speculate ? "ngram" : "no speculation");
    EngineOptions o1 = test::pool_of(*one, 256, 128), o2 = test::pool_of(tp.rank0(), 256, 128);
    if (speculate)
      for (EngineOptions* o : {&o1, &o2}) {
        o->speculative.method = "ngram";
        o->speculative.num_speculative_tokens = 4;
        o->speculative.adaptive = false;
      }
    Engine e1(*one, o1), e2(tp.rank0(), o2);
    const auto want = test::run_all(e1, prompts, params);
    const auto got = test::run_all(e2, prompts, params);
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
    const auto warm = test::run_all(e2, {prompts[3]}, params);
    EXPECT_EQ(warm[0].cached_prompt_tokens, 128);
    EXPECT_EQ(warm[0].tokens, want[3].tokens);
  }
  // A pool that preempts.
  Engine tight(tp.rank0(), test::pool_of(tp.rank0(), 40, 64));
  Engine roomy(*one, test::pool_of(*one, 256, 64));
  const auto got = test::run_all(tight, prompts, params);
  const auto want = test::run_all(roomy, prompts, params);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
  EXPECT_GT(tight.stats().preemptions, 0);
}

TEST(TensorParallel, HybridEngineSnapshotsPreemptionAndSpeculationMatchOneProcess) {
  expect_hybrid_engine_matches_one_process(2, 1);
}

// The same in two pipeline stages, each holding its layers' recurrent states.
TEST(TensorParallel, HybridPipelineEngineSnapshotsPreemptionAndSpeculationMatchOneProcess) {
  expect_hybrid_engine_matches_one_process(2, 2);
}

// And in a grid: two stages of two tensor-parallel ranks each.
TEST(TensorParallel, HybridGridEngineSnapshotsPreemptionAndSpeculationMatchOneProcess) {
  expect_hybrid_engine_matches_one_process(4, 2);
}

// split(): ranks of one color form a communicator ranked by key; its collectives stay inside.
TEST(TensorParallel, ThreadGroupSplitFormsIndependentParts) {
  dist::ThreadGroup group(4);
  std::vector<int> ranks(4), sizes(4);
  std::vector<float> sums(4);
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r)
    threads.emplace_back([&, r] {
      // Colors 0 (world ranks 0, 2) and 1 (1, 3); keys reverse the order.
      std::unique_ptr<dist::Communicator> part = group.member(r).split(r % 2, -r);
      ranks[static_cast<size_t>(r)] = part->rank();
      sizes[static_cast<size_t>(r)] = part->size();
      float v = static_cast<float>(r + 1);
      part->all_reduce_sum(&v, 1);
      sums[static_cast<size_t>(r)] = v;
      if (part->rank() == 0) part->send(&v, sizeof(v), 1);
      else part->recv(&v, sizeof(v), 0);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(ranks, (std::vector<int>{1, 1, 0, 0}));
  EXPECT_EQ(sizes, (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(sums, (std::vector<float>{4, 6, 4, 6}));
}

// The default model (Q4_K_M: GGUF blocks cut at 256 columns) on two ranks.
TEST(TensorParallel, DefaultModelOnTwoRanksMatchesOneProcess) {
  if (!fs::exists(default_model())) GTEST_SKIP() << "the default model is not installed";
  auto one = single(default_model());
  TpModel tp(default_model(), 2);
  const std::vector<int32_t> prompt = {750, 75698, 1445, 1648, 25, 198, 262, 421, 308, 2651, 220, 16, 510};
  const std::vector<float> want = all_logits(*one, prompt), got = all_logits(tp.rank0(), prompt);
  // Layer 0 differs only by the order of the row-parallel sums (rounding, as at f32).
  const std::vector<float> a = all_taps(*one, prompt), b = all_taps(tp.rank0(), prompt);
  const auto L = static_cast<size_t>(one->config().num_layers), H = static_cast<size_t>(one->config().hidden_size);
  float d0 = 0, m0 = 0;
  for (size_t t = 0; t < prompt.size(); ++t)
    for (size_t i = 0; i < H; ++i) {
      d0 = std::max(d0, std::fabs(a[t * L * H + i] - b[t * L * H + i]));
      m0 = std::max(m0, std::fabs(a[t * L * H + i]));
    }
  EXPECT_LE(d0, 1e-6f * m0);
  // Deeper, every quantized matmul requantizes its input to int8 per block (as llama.cpp
  // does): a last-bit change that crosses a rounding boundary moves a value by one step of
  // block-max / 127, and from layer 3 on one channel of this model carries ~790 (a step of ~6
  // for its block). Measured: 6e-8 of the largest value after layer 0, 3e-4 after layer 20,
  // logits 0.36 of 24.9. Bound: 5% of the largest logit; the argmax of every row and the
  // greedy continuation are equal.
  const int64_t V = one->config().vocab_size;
  EXPECT_LE(max_diff(got, want), 0.05f * std::max(1.0f, max_abs(want)));
  for (size_t t = 0; t < prompt.size(); ++t) {
    auto row = [&](const std::vector<float>& v) { return v.begin() + static_cast<int64_t>(t) * V; };
    EXPECT_EQ(std::max_element(row(got), row(got) + V) - row(got), std::max_element(row(want), row(want) + V) - row(want))
        << "position " << t;
  }
  EXPECT_EQ(greedy_tokens(tp.rank0(), prompt, 32), greedy_tokens(*one, prompt, 32));
}

// The default model in two pipeline stages: the same logits bit for bit.
TEST(TensorParallel, DefaultModelInTwoPipelineStagesIsBitIdentical) {
  if (!fs::exists(default_model())) GTEST_SKIP() << "the default model is not installed";
  auto one = single(default_model());
  TpModel pp(default_model(), 2, false, false, 2);
  const std::vector<int32_t> prompt = {750, 75698, 1445, 1648, 25, 198, 262, 421, 308, 2651, 220, 16, 510};
  EXPECT_EQ(all_logits(pp.rank0(), prompt), all_logits(*one, prompt));
  EXPECT_EQ(greedy_tokens(pp.rank0(), prompt, 32), greedy_tokens(*one, prompt, 32));
}

}  // namespace
}  // namespace zen
