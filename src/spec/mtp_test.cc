// MTP speculation through the engine, on the Qwen3.5 fixtures that carry an MTP head (HF
// safetensors, and llama.cpp's nextn block in GGUF): every draft is what the head computes
// from scratch over the sequence (a fresh pool, the target's own hidden states, then its own
// outputs fed back), after accepted and rejected drafts, lazy catch-up, bulk catch-up of a long
// prompt and batching; output is plain decoding's, alone and at concurrency 16, with logprobs,
// stop tokens, preemption and aborts; sampled output keeps the target's distribution; a
// checkpoint without the head is refused naming mtp.fc.weight.
#include "spec/mtp.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "base/error.h"
#include "engine/engine_test_util.h"
#include "spec/logged_proposer_test_util.h"

namespace zen::spec {
namespace {

namespace fs = std::filesystem;
using test::Outcome;

const fs::path kModels = fs::path(ZEN_SOURCE_DIR) / "tests/fixtures/models";

std::unique_ptr<Model> load(const std::string& name) {
  return Model::load((kModels / name).string(), {.n_threads = 2, .load_tokenizer = false});
}

ControllerOptions fixed_k(int32_t k) { return {.adaptive = false, .num_speculative_tokens = k}; }

// The target's final-normed hidden state at every position of `tokens`, as the engine computes
// them: the prompt in one forward, then one token at a time (verification rows use the decode
// arithmetic, so they are bit-identical to these).
std::vector<float> target_hidden(HybridModel& m, const std::vector<int32_t>& tokens, size_t prompt_len) {
  const int64_t H = m.config().hidden_size, V = m.config().vocab_size;
  auto cache = m.new_cache(static_cast<int64_t>(tokens.size()));
  std::vector<float> logits(tokens.size() * static_cast<size_t>(V));
  m.forward(*cache, std::span<const int32_t>(tokens).first(prompt_len), logits.data(), /*all_logits=*/true);
  std::vector<float> hidden(m.final_hidden().begin(), m.final_hidden().end());
  for (size_t i = prompt_len; i < tokens.size(); ++i) {
    m.forward(*cache, std::span<const int32_t>(tokens).subspan(i, 1), logits.data(), false);
    hidden.insert(hidden.end(), m.final_hidden().begin(), m.final_hidden().end());
  }
  EXPECT_EQ(hidden.size(), tokens.size() * static_cast<size_t>(H));
  return hidden;
}

// The head from scratch for a context of n tokens: a fresh one-layer pool; rows 0 .. n-2 (the
// target's hidden states, next tokens 1 .. n-1) give draft 1; then each draft and the head's own
// output give the next. Greedy.
std::vector<int32_t> reference_drafts(HybridModel& m, std::span<const int32_t> context, const std::vector<float>& hidden,
                                      size_t k) {
  const int64_t V = m.config().vocab_size;
  const auto n = static_cast<int64_t>(context.size());
  KvPool kv(m.mtp_kv_config(), (n + static_cast<int64_t>(k)) / 16 + 1);
  std::vector<int32_t> blocks(static_cast<size_t>(kv.num_blocks()));
  for (size_t b = 0; b < blocks.size(); ++b) blocks[b] = static_cast<int32_t>(b);
  std::vector<float> logits(static_cast<size_t>(V));
  auto run = [&](std::span<const int32_t> next, int64_t pos, const float* h) {
    SeqSlice s;
    s.tokens = next;
    s.pos = pos;
    s.blocks = blocks;
    ForwardBatch batch;
    batch.kv = &kv;
    batch.seqs = std::span<const SeqSlice>(&s, 1);
    m.mtp_forward(batch, h, logits.data());
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  };
  std::vector<int32_t> drafts{run(context.subspan(1), 0, hidden.data())};
  while (drafts.size() < k) {
    const std::vector<float> h(m.mtp_hidden().begin(), m.mtp_hidden().end());
    const std::vector<int32_t> next{drafts.back()};
    drafts.push_back(run(next, n - 2 + static_cast<int64_t>(drafts.size()), h.data()));
  }
  return drafts;
}

class MtpEngine : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    model_ = load(GetParam());
    hybrid_ = dynamic_cast<HybridModel*>(model_.get());
    ASSERT_NE(hybrid_, nullptr);
    ASSERT_TRUE(hybrid_->mtp_available()) << hybrid_->mtp_status();
  }
  int32_t vocab() const { return static_cast<int32_t>(model_->config().vocab_size); }
  EngineOptions mtp_options(int64_t blocks, int64_t batched, int32_t k = 3) const {
    EngineOptions o = test::pool_of(*model_, blocks, batched);
    o.speculative.method = "mtp";
    o.speculative.num_speculative_tokens = k;
    o.speculative.adaptive = false;  // a random head: the controller would soon stop drafting
    return o;
  }
  std::vector<Outcome> plain(const std::vector<std::vector<int32_t>>& prompts, const RequestParams& params) const {
    std::vector<Outcome> out;
    for (const auto& p : prompts) {
      Engine e(*model_, test::pool_of(*model_, 256, 128));
      out.push_back(test::run_all(e, {p}, params)[0]);
    }
    return out;
  }
  std::unique_ptr<Model> model_;
  HybridModel* hybrid_ = nullptr;
};

// Runs prompts all at once on an engine from logged_engine and compares every draft, at every
// context length, with the head run from scratch; returns {drafts compared, equal to the
// reference, empty}.
// Output must be plain decoding's whatever the drafts.
struct DraftCheck {
  size_t compared = 0, equal = 0, empty = 0;
};
// An engine drafting with MTP at k = 4, logging the drafts.
std::unique_ptr<Engine> logged_engine(Model& model, int64_t blocks, test::DraftLog* log) {
  auto engine = std::make_unique<Engine>(model, test::pool_of(model, blocks, 96));
  engine->use_proposer(std::make_unique<test::LoggedProposer>(std::make_unique<MtpProposer>(model), log), fixed_k(4));
  return engine;
}

DraftCheck check_drafts(Model& model, Engine& engine, test::DraftLog& log, const std::vector<std::vector<int32_t>>& prompts,
                        const std::vector<Outcome>& want, uint64_t first_id) {
  auto& hybrid = dynamic_cast<HybridModel&>(model);
  log.by_seq.clear();
  const auto got = test::run_all(engine, prompts, test::greedy(24));
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
  DraftCheck c;
  for (const auto& [id, drafts] : log.by_seq) {
    const size_t i = id - first_id;  // the engine numbers requests in order from 1
    if (i >= prompts.size()) {
      ADD_FAILURE() << "unexpected request id " << id;
      break;
    }
    std::vector<int32_t> all = prompts[i];
    all.insert(all.end(), want[i].tokens.begin(), want[i].tokens.end());
    const std::vector<float> hidden = target_hidden(hybrid, all, prompts[i].size());
    for (const auto& [length, d] : drafts) {
      if (d.empty()) {
        ++c.empty;
        continue;
      }
      ++c.compared;
      c.equal += d == reference_drafts(hybrid, std::span<const int32_t>(all).first(length), hidden, d.size()) ? 1 : 0;
    }
  }
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
  return c;
}

// Every draft the engine proposed, at every context length, for prompts short and long (one of
// 300 tokens is caught up in bulk while its prompt is read), all at once, is the head run from
// scratch, and some were accepted (the accepted-run path ran). The same prompts again on the
// same engine hit the prefix cache: the head rows their blocks carry are the first run's, and
// identical prompts make them right. Under preemption (a pool of 24 blocks), a recomputed
// sequence may find blocks whose head rows were never caught up (see mtp.h): most drafts must
// still be the reference's, and output is exact regardless.
TEST_P(MtpEngine, EveryDraftIsTheHeadRunFromScratch) {
  auto prompts = test::random_prompts(5, 4, 40, vocab(), 21);
  prompts.push_back(test::random_prompts(1, 300, 300, vocab(), 22)[0]);
  const auto want = plain(prompts, test::greedy(24));
  test::DraftLog log;
  auto engine = logged_engine(*model_, 256, &log);
  SCOPED_TRACE("cold");
  const DraftCheck cold = check_drafts(*model_, *engine, log, prompts, want, 1);
  EXPECT_EQ(cold.empty, 0u);
  EXPECT_GT(cold.compared, prompts.size() * 10);
  EXPECT_EQ(cold.equal, cold.compared);
  EXPECT_GT(engine->stats().spec_accepted_tokens, 0) << "no draft accepted: the accepted-run path went untested";
  SCOPED_TRACE("warm");
  const DraftCheck warm = check_drafts(*model_, *engine, log, prompts, want, 1 + prompts.size());
  EXPECT_GE(engine->stats().cached_prompt_tokens, 192) << "the second run missed the prefix cache";
  EXPECT_EQ(warm.equal, warm.compared);

  auto small = logged_engine(*model_, 24, &log);
  SCOPED_TRACE("preempting");
  const DraftCheck tight = check_drafts(*model_, *small, log, prompts, want, 1);
  EXPECT_GT(small->stats().preemptions, 0);
  EXPECT_GE(tight.equal * 10, tight.compared * 9);
}

// Slots drafting past their block tables share the scratch area: 70 identical sequences asking
// for 32 drafts each need two scratch blocks apiece; the first 64 get them and draft 32 tokens,
// the rest draft the 2 their own last block leaves room for, and all draft the same tokens,
// which are the head's from scratch.
TEST_P(MtpEngine, ScratchRunsShortGracefully) {
  MtpProposer p(*model_);
  constexpr int kSeqs = 70;
  p.reserve_kv_blocks(kSeqs, 16, kSeqs);
  EXPECT_EQ(p.scratch_blocks(), MtpProposer::kScratchSequences * 2);
  const int64_t H = model_->config().hidden_size;
  const auto tokens = test::random_prompts(1, 16, 16, vocab(), 37)[0];  // positions 0..14 cached
  std::vector<float> taps(static_cast<size_t>(15 * H));
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& x : taps) x = normal(rng);
  std::vector<std::vector<int32_t>> blocks(kSeqs);
  std::vector<CommittedRows> rows;
  std::vector<DraftSlot> slots(kSeqs);
  for (int i = 0; i < kSeqs; ++i) {
    blocks[static_cast<size_t>(i)] = {i};
    rows.push_back({.seq_id = static_cast<uint64_t>(i + 1), .kv_blocks = blocks[static_cast<size_t>(i)], .tokens = tokens,
                    .pos = 0, .row = 0, .n = 15});
    slots[static_cast<size_t>(i)] = {.seq_id = static_cast<uint64_t>(i + 1), .tokens = tokens, .prompt_len = 16,
                                     .max_tokens = 32, .kv_blocks = blocks[static_cast<size_t>(i)]};
  }
  p.commit(rows, taps.data());
  p.propose(slots);
  std::vector<float> hidden(taps.size());
  hybrid_->final_norm_rows(taps.data(), 15, hidden.data());
  const auto want = reference_drafts(*hybrid_, tokens, hidden, 32);
  for (int i = 0; i < kSeqs; ++i) {
    const auto& d = slots[static_cast<size_t>(i)].draft;
    EXPECT_EQ(d.size(), i < MtpProposer::kScratchSequences ? 32u : 2u) << "sequence " << i;
    EXPECT_EQ(d, std::vector<int32_t>(want.begin(), want.begin() + static_cast<ptrdiff_t>(d.size()))) << "sequence " << i;
  }
}

// Configured by name, as --mtp does: greedy output (tokens, logprobs, finish reasons) is plain
// decoding's one by one and 16 at once, with stop tokens inside drafts and max_tokens cutting
// them, under preemption, and with aborts mid-speculation; no block leaks.
TEST_P(MtpEngine, GreedyOutputIsPlainDecodingsAtAnyConcurrency) {
  const auto prompts = test::random_prompts(16, 3, 60, vocab(), 23);
  RequestParams params = test::greedy(30);
  params.top_logprobs = 2;
  auto want = plain(prompts, params);
  RequestParams stopping = params;  // a token from request 3's output ends every request that emits it
  stopping.ignore_eos = false;
  stopping.stop_token_ids = {want[3].tokens[7]};
  const auto want_stopped = plain(prompts, stopping);
  auto expect_same = [](const std::vector<Outcome>& got, const std::vector<Outcome>& w, const char* what) {
    for (size_t i = 0; i < w.size(); ++i) {
      EXPECT_EQ(got[i].tokens, w[i].tokens) << what << ", request " << i;
      EXPECT_EQ(got[i].finish_reason, w[i].finish_reason) << what << ", request " << i;
      ASSERT_EQ(got[i].details.size(), w[i].details.size()) << what;
      for (size_t t = 0; t < w[i].details.size(); ++t)
        ASSERT_EQ(got[i].details[t].logprob, w[i].details[t].logprob) << what << ", request " << i << " token " << t;
    }
  };
  {
    Engine alone(*model_, mtp_options(256, 128));
    EXPECT_EQ(alone.options().speculative.method, "mtp");
    std::vector<Outcome> one_by_one;
    for (const auto& p : prompts) one_by_one.push_back(test::run_all(alone, {p}, params)[0]);
    expect_same(one_by_one, want, "alone");
  }
  for (const int64_t blocks : {int64_t{256}, int64_t{16}}) {  // 16: preemption
    Engine together(*model_, mtp_options(blocks, 128));
    expect_same(test::run_all(together, prompts, params), want, blocks == 16 ? "16 at once, tiny pool" : "16 at once");
    expect_same(test::run_all(together, prompts, stopping), want_stopped, "stop token");
    const EngineStats s = together.stats();
    EXPECT_GT(s.spec_drafts, 16);
    EXPECT_EQ(s.kv_blocks_used, 0);
    if (blocks == 16) {
      EXPECT_GT(s.preemptions, 0);
    }
  }

  Engine aborting(*model_, mtp_options(256, 128));
  std::vector<uint64_t> ids;
  std::vector<std::vector<int32_t>> out(prompts.size());
  std::vector<std::string> reasons(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i)
    ids.push_back(aborting.add(prompts[i], params, [&out, &reasons, i](const RequestUpdate& u) {
      for (const auto& g : u.tokens) out[i].push_back(g.token);
      if (u.finished) reasons[i] = u.finish_reason;
    }).id);
  for (int s = 0; s < 100 && aborting.stats().spec_drafts == 0; ++s) aborting.step();
  ASSERT_GT(aborting.stats().spec_drafts, 0);
  for (size_t i = 0; i < ids.size(); i += 2) aborting.abort(ids[i]);
  aborting.run_until_idle();
  for (size_t i = 1; i < ids.size(); i += 2) {
    EXPECT_EQ(reasons[i], "length");
    EXPECT_EQ(out[i], want[i].tokens) << "request " << i;
  }
  EXPECT_EQ(aborting.stats().kv_blocks_used, 0);
}

// Sampled requests draw drafts from the head's q; rejection sampling keeps the target's
// distribution (two-sample chi-square per position against plain decoding).
TEST_P(MtpEngine, SampledOutputHasTheDistributionOfPlainDecoding) {
  const auto prompt = test::random_prompts(1, 12, 12, vocab(), 29)[0];
  RequestParams params;
  params.max_tokens = 4;
  params.ignore_eos = true;
  params.sampling.temperature = 1.0f;
  params.sampling.top_k = 20;
  params.sampling.has_seed = true;
  const int runs = 2400;
  auto sample_all = [&](bool speculative) {
    Engine engine(*model_, speculative ? mtp_options(512, 256) : test::pool_of(*model_, 512, 256));
    std::vector<std::map<int32_t, int>> counts(4);
    for (int base = 0; base < runs; base += 16) {
      std::vector<std::vector<int32_t>> outs(16);
      for (int i = 0; i < 16 && base + i < runs; ++i) {
        RequestParams p = params;
        p.sampling.seed = uint64_t{1000003} * static_cast<uint64_t>(base + i) + (speculative ? 7u : 0u);
        auto* o = &outs[static_cast<size_t>(i)];
        engine.add(prompt, p, [o](const RequestUpdate& u) {
          for (const auto& g : u.tokens) o->push_back(g.token);
        });
      }
      engine.run_until_idle();
      for (const auto& o : outs)
        for (size_t pos = 0; pos < o.size() && pos < 4; ++pos) counts[pos][o[pos]]++;
    }
    return std::make_pair(counts, engine.stats());
  };
  const auto [plain_counts, plain_stats] = sample_all(false);
  const auto [spec_counts, spec_stats] = sample_all(true);
  EXPECT_GT(spec_stats.spec_accepted_tokens, runs / 100) << "too few drafts accepted to test anything";
  EXPECT_LT(spec_stats.spec_accepted_tokens, spec_stats.spec_draft_tokens);
  for (size_t pos = 0; pos < 4; ++pos) {
    EXPECT_GT(plain_counts[pos].size(), 5u) << "position " << pos << " is nearly deterministic";
    EXPECT_LT(test::chi_square_ratio(plain_counts[pos], spec_counts[pos]), 1.0) << "position " << pos;
  }
}

// The head's KV is counted in the budget beside the target's (one layer, K and V, f32).
TEST_P(MtpEngine, ItsKvIsCountedInTheBudget) {
  EngineOptions o;
  o.kv_memory_bytes = int64_t{1} << 22;
  o.speculative.method = "mtp";
  Engine engine(*model_, o);
  const ModelConfig& c = model_->config();
  const auto target_bytes = static_cast<int64_t>(KvPool::bytes_per_token(c, KvDType::F32));
  const int64_t head_bytes = 2 * c.num_kv_heads * c.head_dim * 4;
  EXPECT_EQ(MtpProposer(*model_).kv_bytes_per_token(), static_cast<size_t>(head_bytes));
  EXPECT_EQ(engine.kv_capacity_tokens(), o.kv_memory_bytes / ((target_bytes + head_bytes) * 16) * 16);
  EXPECT_NE(engine.describe().find("KV cost of the drafter"), std::string::npos) << engine.describe();
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MtpEngine, ::testing::Values("qwen3_5_text_f32", "qwen3_5_tied_f32.gguf"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '.', '_');
                           return name;
                         });

// Asking for MTP on a checkpoint without the head names the tensor it lacks.
TEST(MtpProposer, ACheckpointWithoutTheHeadIsRefusedNamingTheTensor) {
  for (const char* name : {"qwen3_next_f32", "qwen3_5_tied_q8_0.gguf", "qwen3_f32"}) {
    SCOPED_TRACE(name);
    auto model = load(name);
    try {
      MtpProposer p(*model);
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("mtp.fc.weight"), std::string::npos) << e.what();
    }
    EngineOptions o = test::pool_of(*model, 64, 64);
    o.speculative.method = "mtp";
    EXPECT_THROW(Engine(*model, o).stats(), Error);
  }
}

}  // namespace
}  // namespace zen::spec
