// DFlash in the engine, on the reference fixtures (tools/make_dflash_fixtures.py): the whole
// greedy dflash_generate of the reference, block by block (the drafts the engine proposes are
// the reference's, from context rows the engine captured itself), then what serving adds:
// 16 sequences at once, a warm prefix, preemption and abort draft exactly what one cold
// sequence drafts, and sampled drafts keep the target's distribution.
#include "spec/dflash/proposer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "engine/engine_test_util.h"
#include "io/safetensors.h"
#include "spec/dflash/reference_test_util.h"
#include "spec/logged_proposer_test_util.h"

namespace zen::spec::dflash {
namespace {

namespace fs = std::filesystem;
using test::Outcome;
using test_reference::kDir;

std::vector<int32_t> ints(const SafetensorsFile& f, const std::string& name) { return test_reference::tensor<int32_t>(f, name); }

using test::DraftLog;
using Logged = test::LoggedProposer;

spec::ControllerOptions fixed_k(int32_t k) { return {.adaptive = false, .num_speculative_tokens = k}; }

class DFlashEngine : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    target_ = Model::load((kDir / "target").string(), {.n_threads = 2, .load_tokenizer = false}).release();
    ref_ = new SafetensorsFile((kDir / "v1.reference.safetensors").string());
  }
  static void TearDownTestSuite() {
    delete ref_;
    delete target_;
  }
  static int32_t vocab() { return static_cast<int32_t>(target_->config().vocab_size); }
  static std::unique_ptr<Logged> logged(DraftLog* log, const char* drafter = "v1") {
    return std::make_unique<Logged>(std::make_unique<DFlashProposer>(*target_, (kDir / drafter).string()), log);
  }
  // Runs prompts (all at once) with DFlash at a fixed k; returns outcomes and the drafts each
  // request saw, keyed by request order.
  static std::vector<Outcome> speculate(Engine& engine, const std::vector<std::vector<int32_t>>& prompts,
                                        const RequestParams& params, std::vector<std::map<size_t, std::vector<int32_t>>>* drafts,
                                        int32_t k = 3) {
    DraftLog log;
    engine.use_proposer(logged(&log), fixed_k(k));
    auto out = test::run_all(engine, prompts, params);
    if (drafts != nullptr) {
      drafts->clear();
      for (auto& [id, d] : log.by_seq) drafts->push_back(d);  // ids are assigned in order
    }
    return out;
  }
  static Model* target_;
  static SafetensorsFile* ref_;
};
Model* DFlashEngine::target_ = nullptr;
SafetensorsFile* DFlashEngine::ref_ = nullptr;

// The reference's whole greedy generation from `dir` (target/, the drafter, and
// <drafter>.reference.safetensors): every full block drafts the reference's tokens (context
// captured by the engine's own forwards), each verification keeps what the reference kept, and
// the output is the target's greedy output.
void expect_reference_generation(Model& target, const fs::path& dir, const char* drafter) {
  SCOPED_TRACE(dir / drafter);
  const SafetensorsFile ref((dir / (std::string(drafter) + ".reference.safetensors")).string());
  const auto prompt = ints(ref, "prompt");
  const auto output = ints(ref, "output");
  const auto acceptance = ints(ref, "acceptance_lengths");
  const int32_t steps = ints(ref, "num_steps")[0];
  const fs::path trace = fs::path(::testing::TempDir()) / "dflash_trace.jsonl";
  EngineOptions o = test::pool_of(target, 64, 64);
  o.spec_trace_path = trace.string();
  o.speculative.method = "dflash";  // the trace needs a configured method; use_proposer replaces it
  o.speculative.model = (dir / drafter).string();
  std::vector<std::map<size_t, std::vector<int32_t>>> drafts;
  std::vector<Outcome> got;
  {
    Engine engine(target, o);  // closes the trace when it goes
    DraftLog log;
    engine.use_proposer(std::make_unique<Logged>(std::make_unique<DFlashProposer>(target, (dir / drafter).string()), &log),
                        fixed_k(3));
    got = test::run_all(engine, {prompt}, test::greedy(static_cast<int64_t>(output.size() - prompt.size())));
    for (auto& [id, d] : log.by_seq) drafts.push_back(d);
  }
  ASSERT_EQ(got[0].tokens, std::vector<int32_t>(output.begin() + static_cast<ptrdiff_t>(prompt.size()), output.end()));
  ASSERT_EQ(drafts.size(), 1u);
  int compared = 0;
  for (int32_t s = 0; s < steps; ++s) {
    const std::string p = "step" + std::to_string(s) + ".";
    const size_t start = static_cast<size_t>(ints(ref, p + "start")[0]);
    const auto want = ints(ref, p + "drafts");
    const auto it = drafts[0].find(start + 1);  // the anchor is the last of start + 1 tokens
    if (s + 1 == steps && it == drafts[0].end()) continue;  // no room left: the engine drafts nothing
    ASSERT_NE(it, drafts[0].end()) << "no block at position " << start;
    // The engine verifies only what max_tokens leaves room for (the reference drafts past it
    // and narrows its last blocks): its drafts are a prefix of a full block's.
    if (want.size() == 3) {
      EXPECT_EQ(it->second, std::vector<int32_t>(want.begin(), want.begin() + static_cast<ptrdiff_t>(it->second.size())))
          << "step " << s;
      compared += it->second.size() == 3 ? 1 : 0;
    }
  }
  EXPECT_GE(compared, steps - 3);
  // The trace: one line per verification carrying drafts, accepted + 1 == the reference's.
  std::ifstream in(trace);
  std::string line;
  std::vector<int32_t> lengths;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j["kind"] == "step") continue;  // the step's own line
    if (j["drafted"].get<int>() > 0) lengths.push_back(j["accepted"].get<int32_t>() + 1);
  }
  EXPECT_EQ(lengths, std::vector<int32_t>(acceptance.begin(), acceptance.begin() + static_cast<ptrdiff_t>(lengths.size())));
  EXPECT_GE(lengths.size(), static_cast<size_t>(steps - 2));
  fs::remove(trace);
}

// DFlash (v1) and DFlash 2 (v2, whose drafts are the candidate selector's path).
TEST_F(DFlashEngine, AGreedyGenerationDraftsTheReferencesBlocks) {
  for (const char* drafter : {"v1", "v2"}) expect_reference_generation(*target_, kDir, drafter);
}

// A hybrid (Qwen3.5: Gated DeltaNet and gated attention) target: the reference's generation
// (tools/make_dflash_fixtures.py, with the target's recurrent state rolled back exactly), the
// drafts captured from the hybrid forward's taps block for block.
TEST(DFlashHybridReference, AGreedyGenerationDraftsTheReferencesBlocks) {
  auto target = Model::load((kDir / "hybrid/target").string(), {.n_threads = 2, .load_tokenizer = false});
  expect_reference_generation(*target, kDir / "hybrid", "v1");
}

// 16 sequences in one engine (batched drafting, interleaved prefill and decode, some sharing
// a prefix) draft, block for block, what each drafts alone in a fresh engine; greedy output
// is the target's own.
TEST_F(DFlashEngine, SixteenAtOnceDraftWhatEachDraftsAlone) {
  auto prompts = test::random_prompts(16, 8, 40, vocab() - 1, 5);
  for (size_t i = 8; i < 16; ++i)  // half share a 20-token prefix with another prompt
    prompts[i].insert(prompts[i].begin(), prompts[i - 8].begin(), prompts[i - 8].begin() + std::min<ptrdiff_t>(20, static_cast<ptrdiff_t>(prompts[i - 8].size())));
  const RequestParams params = test::greedy(20);
  std::vector<std::vector<int32_t>> plain;
  std::vector<std::map<size_t, std::vector<int32_t>>> alone;
  for (const auto& p : prompts) {
    Engine e(*target_, test::pool_of(*target_, 64, 64));
    plain.push_back(test::run_all(e, {p}, params)[0].tokens);
    Engine s(*target_, test::pool_of(*target_, 64, 64));
    std::vector<std::map<size_t, std::vector<int32_t>>> d;
    EXPECT_EQ(speculate(s, {p}, params, &d)[0].tokens, plain.back());
    alone.push_back(d[0]);
  }
  Engine engine(*target_, test::pool_of(*target_, 256, 96));
  std::vector<std::map<size_t, std::vector<int32_t>>> together;
  const auto got = speculate(engine, prompts, params, &together);
  ASSERT_EQ(together.size(), prompts.size());
  // Where both drafted at the same context length (a step whose budget prompts took drafts
  // nothing, which shifts later anchors), they drafted alike.
  size_t compared = 0, drafted = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(got[i].tokens, plain[i]) << "request " << i;
    for (const auto& [length, d] : together[i]) {
      ++drafted;
      if (const auto it = alone[i].find(length); it != alone[i].end()) {
        const size_t n = std::min(d.size(), it->second.size());  // room left may cut either
        EXPECT_EQ(std::vector<int32_t>(d.begin(), d.begin() + static_cast<ptrdiff_t>(n)),
                  std::vector<int32_t>(it->second.begin(), it->second.begin() + static_cast<ptrdiff_t>(n)))
            << "request " << i << " at " << length;
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, drafted * 3 / 4);
  EXPECT_GT(engine.stats().spec_drafts, 16);
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
}

// The sliding layers (window 5) keep a window store of 2 blocks per sequence, for
// max_num_seqs = 4 sequences: 12 requests, prompts of 30 to 60 tokens, run through it 4 at a
// time, so finished sequences' and left-behind blocks are recycled under the running ones. Each
// drafts what it drafts alone (with room to spare), while the full layer keeps every row.
TEST_F(DFlashEngine, SlidingLayersKeepOnlyTheirWindowsAtTheSequenceCap) {
  const auto prompts = test::random_prompts(12, 30, 60, vocab() - 1, 17);
  const RequestParams params = test::greedy(20);
  std::vector<std::map<size_t, std::vector<int32_t>>> alone;
  for (const auto& p : prompts) {
    Engine s(*target_, test::pool_of(*target_, 64, 64));
    std::vector<std::map<size_t, std::vector<int32_t>>> d;
    speculate(s, {p}, params, &d);
    alone.push_back(d[0]);
  }
  EngineOptions o = test::pool_of(*target_, 256, 96);
  o.max_num_seqs = 4;
  Engine engine(*target_, o);
  DraftLog log;
  auto wrapped = logged(&log);
  const auto* proposer = static_cast<const DFlashProposer*>(&wrapped->inner());
  engine.use_proposer(std::move(wrapped), fixed_k(3));
  ASSERT_NE(proposer->window_store(), nullptr);
  EXPECT_EQ(proposer->window_store()->num_blocks(), 4 * 2);
  test::run_all(engine, prompts, params);
  ASSERT_EQ(log.by_seq.size(), prompts.size());
  size_t i = 0, compared = 0, drafted = 0;
  for (const auto& [id, together] : log.by_seq) {
    for (const auto& [length, d] : together) {
      ++drafted;
      if (const auto it = alone[i].find(length); it != alone[i].end()) {
        const size_t n = std::min(d.size(), it->second.size());
        EXPECT_EQ(std::vector<int32_t>(d.begin(), d.begin() + static_cast<ptrdiff_t>(n)),
                  std::vector<int32_t>(it->second.begin(), it->second.begin() + static_cast<ptrdiff_t>(n)))
            << "request " << i << " at " << length;
        ++compared;
      }
    }
    ++i;
  }
  EXPECT_GT(compared, drafted * 3 / 4);
  EXPECT_EQ(proposer->window_store()->blocks_in_use(), 4 * 2) << "12 sequences of 3 to 5 blocks went through 8";
}

// A prompt whose prefix another request left in the cache drafts from the cached blocks'
// context rows exactly what it drafts cold.
TEST_F(DFlashEngine, AWarmPrefixDraftsWhatAColdOneDrafts) {
  auto prompts = test::random_prompts(2, 40, 40, vocab() - 1, 9);
  std::copy_n(prompts[0].begin(), 33, prompts[1].begin());  // two full blocks of 16 shared
  const RequestParams params = test::greedy(16);
  std::vector<std::map<size_t, std::vector<int32_t>>> cold, warm;
  Engine fresh(*target_, test::pool_of(*target_, 64, 64));
  speculate(fresh, {prompts[1]}, params, &cold);
  Engine engine(*target_, test::pool_of(*target_, 64, 64));
  DraftLog log;
  engine.use_proposer(logged(&log), fixed_k(3));
  test::run_all(engine, {prompts[0]}, params);
  const auto got = test::run_all(engine, {prompts[1]}, params);
  EXPECT_EQ(got[0].cached_prompt_tokens, 32);
  ASSERT_EQ(log.by_seq.size(), 2u);
  EXPECT_EQ(log.by_seq.rbegin()->second, cold[0]);
}

// A pool too small for everyone preempts (blocks freed, context recomputed with the prompt);
// an abort frees a sequence mid-speculation. Nothing is lost or leaked.
TEST_F(DFlashEngine, PreemptionAndAbortLoseNothing) {
  const auto prompts = test::random_prompts(12, 20, 50, vocab() - 1, 13);
  const RequestParams params = test::greedy(30);
  std::vector<std::vector<int32_t>> plain;
  for (const auto& p : prompts) {
    Engine e(*target_, test::pool_of(*target_, 64, 64));
    plain.push_back(test::run_all(e, {p}, params)[0].tokens);
  }
  Engine engine(*target_, test::pool_of(*target_, 12, 96));
  const auto got = speculate(engine, prompts, params, nullptr);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i].tokens, plain[i]) << "request " << i;
  EXPECT_GT(engine.stats().preemptions, 0);
  EXPECT_GT(engine.stats().spec_drafts, 0);
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);

  Engine aborting(*target_, test::pool_of(*target_, 256, 96));
  DraftLog log;
  aborting.use_proposer(logged(&log), fixed_k(3));
  std::vector<uint64_t> ids;
  std::vector<std::vector<int32_t>> out(prompts.size());
  std::vector<std::string> reasons(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i)
    ids.push_back(aborting.add(prompts[i], params, [&out, &reasons, i](const RequestUpdate& u) {
      for (const auto& g : u.tokens) out[i].push_back(g.token);
      if (u.finished) reasons[i] = u.finish_reason;
    }).id);
  for (int s = 0; s < 100 && aborting.stats().spec_drafts == 0; ++s) aborting.step();
  EXPECT_GT(aborting.stats().spec_drafts, 0);
  for (size_t i = 0; i < ids.size(); i += 2) aborting.abort(ids[i]);
  aborting.run_until_idle();
  for (size_t i = 1; i < ids.size(); i += 2) {
    EXPECT_EQ(reasons[i], "length");
    EXPECT_EQ(out[i], plain[i]) << "request " << i;
  }
  EXPECT_EQ(aborting.stats().kv_blocks_used, 0);
}

// Sampled requests: drafts drawn from the drafter's q; rejection sampling keeps the target's
// distribution (two-sample chi-square per position against plain decoding).
TEST_F(DFlashEngine, SampledOutputHasTheDistributionOfPlainDecoding) {
  const auto prompt = ints(*ref_, "prompt");
  RequestParams params;
  params.max_tokens = 4;
  params.ignore_eos = true;
  params.sampling.temperature = 1.0f;
  params.sampling.top_k = 20;
  params.sampling.has_seed = true;
  const int runs = 2400;
  auto sample_all = [&](const char* drafter) {
    const bool speculative = drafter != nullptr;
    Engine engine(*target_, test::pool_of(*target_, 512, 256));
    if (speculative) engine.use_proposer(std::make_unique<DFlashProposer>(*target_, (kDir / drafter).string()), fixed_k(3));
    std::vector<std::map<int32_t, int>> counts(4);
    for (int base = 0; base < runs; base += 16) {  // waves of 16 (see speculative_test.cc)
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
  const auto [plain_counts, plain_stats] = sample_all(nullptr);
  for (const char* drafter : {"v1", "v2"}) {  // v2: q is the selector's softmax over candidates
    const auto [spec_counts, spec_stats] = sample_all(drafter);
    EXPECT_GT(spec_stats.spec_accepted_tokens, runs / 100) << drafter << ": too few drafts accepted to test anything";
    EXPECT_LT(spec_stats.spec_accepted_tokens, spec_stats.spec_draft_tokens) << drafter;
    for (size_t pos = 0; pos < 4; ++pos) {
      EXPECT_GT(plain_counts[pos].size(), 5u) << "position " << pos << " is nearly deterministic";
      EXPECT_LT(test::chi_square_ratio(plain_counts[pos], spec_counts[pos]), 1.0) << drafter << " position " << pos;
    }
  }
}

// Configured by path: the engine loads the drafter, takes k from its block, counts the draft
// context store in the KV budget, and refuses a k the block cannot give.
TEST_F(DFlashEngine, ConfiguredByPathCountsItsMemory) {
  EngineOptions o;
  o.kv_memory_bytes = int64_t{1} << 22;
  o.speculative.method = "dflash";
  o.speculative.model = (kDir / "v1").string();
  o.speculative.adaptive = false;  // a random drafter: the controller would soon stop drafting
  Engine engine(*target_, o);
  EXPECT_EQ(engine.options().speculative.num_speculative_tokens, 3);
  // The full layer per token; the 2 sliding layers (window 5) in 2 blocks of 16 per sequence,
  // at most one per target block: 64 sequences would need 128, more than the budget's
  // target blocks, so each target block carries one.
  const auto target_bytes = static_cast<int64_t>(KvPool::bytes_per_token(target_->config(), KvDType::F32));
  const int64_t row = 2 * 2 * 16 * 4;  // K and V, 2 heads of 16, f32
  EXPECT_EQ(engine.kv_capacity_tokens(), o.kv_memory_bytes / ((target_bytes + 3 * row) * 16) * 16);
  EXPECT_LT(engine.kv_capacity_tokens(), 128 * 16);
  EXPECT_NE(engine.describe().find("KV cost of the drafter"), std::string::npos) << engine.describe();
  EXPECT_NE(engine.describe().find("sliding layers keep their windows in"), std::string::npos) << engine.describe();
  {
    // 4 sequences: their 8 window blocks come off the top, and every other block carries the
    // full layer alone.
    EngineOptions few = o;
    few.max_num_seqs = 4;
    Engine bounded(*target_, few);
    EXPECT_EQ(bounded.kv_capacity_tokens(), (o.kv_memory_bytes - 8 * 2 * row * 16) / ((target_bytes + row) * 16) * 16);
    EXPECT_GT(bounded.kv_capacity_tokens(), engine.kv_capacity_tokens());
  }
  const auto got = test::run_all(engine, {ints(*ref_, "prompt")}, test::greedy(32));
  EXPECT_EQ(got[0].tokens.size(), 32u);
  EXPECT_GT(engine.stats().spec_drafts, 0);

  o.speculative.num_speculative_tokens = 4;
  try {
    Engine too_many(*target_, o);
    ADD_FAILURE() << "k 4 accepted with a block of 4";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("num_speculative_tokens 4 exceeds"), std::string::npos) << e.what();
  }
  o.speculative.num_speculative_tokens = 0;
  o.speculative.model = (kDir / "missing").string();
  EXPECT_THROW(Engine(*target_, o).stats(), Error);
}

}  // namespace
}  // namespace zen::spec::dflash

namespace zen::spec::dflash {
namespace {

// A hybrid (Gated DeltaNet) target: the v1 drafter's weights (they hold no vocabulary rows)
// retargeted to the Qwen3.5 and Qwen3-Next fixtures by config. Greedy output is the target's
// own alone and 8 at once, with preemption: rejected drafts roll the recurrent state back
// through the state history, and the context rows of accepted ones are captured from the
// hybrid forward.
// The v1 drafter's weights (they hold no vocabulary rows) retargeted by config to a fixture.
fs::path retargeted_drafter(const Model& target, const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("dflash_for_" + name);
  fs::create_directories(dir);
  fs::copy_file(kDir / "v1/model.safetensors", dir / "model.safetensors", fs::copy_options::overwrite_existing);
  auto config = nlohmann::json::parse(read_text_file((kDir / "v1/config.json").string()));
  config["vocab_size"] = target.config().vocab_size;
  config["num_target_layers"] = target.config().num_layers;
  config["dflash_config"]["mask_token_id"] = target.config().vocab_size - 1;
  config["dflash_config"]["target_layer_ids"] = {1, 2};
  std::ofstream(dir / "config.json") << config.dump(2);
  return dir;
}

std::unique_ptr<Model> load_fixture(const std::string& name) {
  return Model::load((fs::path(ZEN_SOURCE_DIR) / "tests/fixtures/models" / name).string(),
                     {.n_threads = 2, .load_tokenizer = false});
}

TEST(DFlashHybrid, GreedyOutputIsTheTargetsAloneAndAtConcurrency) {
  for (const char* name : {"qwen3_5_text_f32", "qwen3_next_f32"}) {
    SCOPED_TRACE(name);
    auto target = load_fixture(name);
    const fs::path dir = retargeted_drafter(*target, name);

    const auto vocab = static_cast<int32_t>(target->config().vocab_size);
    const auto prompts = test::random_prompts(8, 10, 40, vocab - 1, 17);
    const RequestParams params = test::greedy(24);
    std::vector<std::vector<int32_t>> plain;
    for (const auto& p : prompts) {
      Engine e(*target, test::pool_of(*target, 64, 64));
      plain.push_back(test::run_all(e, {p}, params)[0].tokens);
    }
    for (const int64_t blocks : {int64_t{256}, int64_t{10}}) {
      Engine engine(*target, test::pool_of(*target, blocks, 96));
      engine.use_proposer(std::make_unique<DFlashProposer>(*target, dir.string()), fixed_k(3));
      const auto got = test::run_all(engine, prompts, params);
      for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i].tokens, plain[i]) << "request " << i;
      EXPECT_GT(engine.stats().spec_drafts, 8);
      EXPECT_EQ(engine.stats().kv_blocks_used, 0);
      if (blocks == 10) {
        EXPECT_GT(engine.stats().preemptions, 0);
      }
    }
  }
}

// Context rows are projected lazily, at the next draft, except that a sequence never holds
// more than kMaxPendingRows of them: a 300-token prompt read in chunks of 96 is projected while
// it is read (the rows wait no longer), and drafts exactly what it drafts read in one chunk;
// a sequence the controller leaves without drafts projects nothing.
TEST(DFlashLazyContext, ALongPromptIsProjectedWhileReadAndDraftsAlike) {
  auto target = load_fixture("qwen3_5_text_f32");
  const fs::path dir = retargeted_drafter(*target, "qwen3_5_text_f32");
  const auto prompt = test::random_prompts(1, 300, 300, static_cast<int32_t>(target->config().vocab_size) - 1, 31)[0];
  std::vector<std::map<size_t, std::vector<int32_t>>> drafts;
  for (const int64_t chunk : {int64_t{96}, int64_t{512}}) {
    Engine engine(*target, test::pool_of(*target, 64, chunk));
    DraftLog log;
    auto logged = std::make_unique<Logged>(std::make_unique<DFlashProposer>(*target, dir.string()), &log);
    auto* proposer = static_cast<DFlashProposer*>(&logged->inner());
    engine.use_proposer(std::move(logged), fixed_k(3));
    const uint64_t id = engine.add(prompt, test::greedy(12), [](const RequestUpdate&) {}).id;
    int64_t most = 0;
    while (engine.step()) most = std::max(most, proposer->pending_rows(id));
    EXPECT_LE(most, DFlashProposer::kMaxPendingRows) << "chunks of " << chunk;
    ASSERT_EQ(log.by_seq.size(), 1u);
    drafts.push_back(log.by_seq.begin()->second);
  }
  EXPECT_EQ(drafts[0], drafts[1]);
  EXPECT_GE(drafts[0].size(), 3u);

  // Without drafts nothing is projected; the first draft projects everything at once.
  DFlashProposer p(*target, dir.string());
  p.reserve_kv_blocks(8, 16, 1);
  const int64_t width = p.drafter().config().tap_width();
  const std::vector<float> taps(static_cast<size_t>(40 * width), 0.5f);
  const std::vector<int32_t> blocks = {0, 1, 2, 3};
  const std::vector<int32_t> tokens(prompt.begin(), prompt.begin() + 60);
  const CommittedRows read{.seq_id = 7, .kv_blocks = blocks, .tokens = tokens, .pos = 0, .row = 0, .n = 40};
  p.commit(std::span(&read, 1), taps.data());
  for (int64_t pos = 40; pos < 59; ++pos) {
    const CommittedRows decoded{.seq_id = 7, .kv_blocks = blocks, .tokens = tokens, .pos = pos, .row = 0, .n = 1};
    p.commit(std::span(&decoded, 1), taps.data());
  }
  EXPECT_EQ(p.pending_rows(7), 59);
  EXPECT_EQ(p.time_by_part()[2].second, 0.0) << "context K/V time without drafts";
  DraftSlot slot{.seq_id = 7, .tokens = tokens, .prompt_len = 40, .max_tokens = 3, .kv_blocks = blocks};
  p.propose(std::span(&slot, 1));
  EXPECT_EQ(slot.draft.size(), 3u);
  EXPECT_EQ(p.pending_rows(7), 0);
  EXPECT_GT(p.time_by_part()[2].second, 0.0);
}

}  // namespace
}  // namespace zen::spec::dflash

namespace zen::spec::dflash {
namespace {

// Benchmarking mode: a random drafter (never right) accepted at chosen rates. Acceptance by
// position follows the rates; the config refuses rates that rise or come without the method.
TEST_F(DFlashEngine, SyntheticAcceptanceFollowsTheRates) {
  EngineOptions o = test::pool_of(*target_, 512, 256);
  o.speculative = SpeculativeConfig::parse(
      R"({"method": "dflash", "model": ")" + (kDir / "v1").string() +
      R"(", "adaptive": false, "rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [0.8, 0.64, 0.512]})");
  Engine engine(*target_, o);
  EXPECT_NE(engine.describe().find("SYNTHETIC acceptance"), std::string::npos);
  const auto got = test::run_all(engine, test::random_prompts(16, 8, 20, vocab() - 1, 3), test::greedy(64));
  for (const Outcome& out : got) EXPECT_EQ(out.tokens.size(), 64u);
  const EngineStats s = engine.stats();
  ASSERT_GT(s.spec_drafts, 200);
  const double rates[] = {0.8, 0.64, 0.512};
  for (size_t i = 0; i < 3; ++i)
    EXPECT_NEAR(static_cast<double>(s.spec_accepted_per_pos[i]) / static_cast<double>(s.spec_drafts), rates[i], 0.08)
        << "position " << i;
  for (const char* bad : {R"({"method": "ngram", "rejection_sample_method": "synthetic"})",
                          R"({"method": "ngram", "synthetic_acceptance_rates": [0.5]})",
                          R"({"method": "ngram", "rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [0.5, 0.6]})",
                          R"({"method": "ngram", "rejection_sample_method": "lenient"})"})
    EXPECT_THROW(SpeculativeConfig::parse(bad), Error) << bad;
}

}  // namespace
}  // namespace zen::spec::dflash

namespace zen::spec::dflash {
namespace {

// A drafter trained on the target's own greedy outputs (tools/make_dflash_trained_fixture.py):
// its drafts are mostly right, so acceptance is what is checked: zen's accepted length per
// verification (--spec-trace) equals the reference dflash_generate's acceptance_lengths step
// for step, and its drafts are the reference's.
TEST_F(DFlashEngine, ATrainedDrafterIsAcceptedStepForStepAsInTheReference) {
  const SafetensorsFile ref((kDir / "trained.reference.safetensors").string());
  int64_t accepted_total = 0, steps_total = 0;
  for (int p = 0; p < 3; ++p) {
    SCOPED_TRACE("prompt " + std::to_string(p));
    const std::string pre = "p" + std::to_string(p) + ".";
    const auto prompt = ints(ref, pre + "prompt");
    const auto output = ints(ref, pre + "output");
    const auto acceptance = ints(ref, pre + "acceptance_lengths");
    const fs::path trace = fs::path(::testing::TempDir()) / "dflash_trained_trace.jsonl";
    EngineOptions o = test::pool_of(*target_, 64, 64);
    o.spec_trace_path = trace.string();
    o.speculative.method = "dflash";
    o.speculative.model = (kDir / "trained").string();
    o.speculative.adaptive = false;
    std::vector<Outcome> got;
    {
      Engine engine(*target_, o);
      got = test::run_all(engine, {prompt}, test::greedy(static_cast<int64_t>(output.size() - prompt.size())));
    }
    EXPECT_EQ(got[0].tokens, std::vector<int32_t>(output.begin() + static_cast<ptrdiff_t>(prompt.size()), output.end()));
    std::ifstream in(trace);
    std::string line;
    size_t s = 0;
    while (std::getline(in, line)) {
      const auto j = nlohmann::json::parse(line);
      if (j["kind"] == "step") continue;  // the step's own line
      const int drafted = j["drafted"].get<int>();
      if (drafted == 0) continue;  // the prompt's own token
      ASSERT_LT(s, acceptance.size());
      const std::string step = pre + "step" + std::to_string(s) + ".";
      EXPECT_EQ(j["pos"].get<int64_t>(), ints(ref, step + "start")[0] + 1) << "step " << s;
      // max_tokens leaves the engine fewer drafts at the end than the reference's block.
      EXPECT_EQ(j["accepted"].get<int32_t>() + 1, std::min(acceptance[s], drafted + 1)) << "step " << s;
      const auto want = ints(ref, step + "drafts");
      const auto drafts = j["draft"].get<std::vector<int32_t>>();
      EXPECT_EQ(drafts, std::vector<int32_t>(want.begin(), want.begin() + std::min(want.size(), drafts.size()))) << "step " << s;
      accepted_total += j["accepted"].get<int32_t>();
      ++s;
    }
    // A reference step anchored at the last position but one has room for no draft in the
    // engine (max_tokens): that token comes from a plain decode.
    const auto last_start = static_cast<size_t>(ints(ref, pre + "step" + std::to_string(acceptance.size() - 1) + ".start")[0]);
    EXPECT_EQ(s, acceptance.size() - (last_start + 2 == output.size() ? 1 : 0));
    steps_total += static_cast<int64_t>(s);
    fs::remove(trace);
  }
  EXPECT_GT(accepted_total, steps_total);  // more than one accepted draft per step on average
}

}  // namespace
}  // namespace zen::spec::dflash
