// Golden tests: our forward pass against reference implementations.
//  1. Tiny random-weight HF checkpoints (tools/make_model_fixtures.py) whose f32 logits and
//     greedy tokens were computed by HF transformers: logits within 1e-4 of the largest
//     reference logit, greedy tokens identical, chunked prefill equal to one-shot prefill.
//  2. The default model (a quantized GGUF) against llama.cpp
//     (tools/make_llamacpp_reference.py): greedy tokens and perplexity on a fixed text.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/test_compare.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace zen {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const fs::path kModelFixtures = fs::path(ZEN_SOURCE_DIR) / "tests/fixtures/models";
const fs::path kLlamaCppFixture = fs::path(ZEN_SOURCE_DIR) / "tests/fixtures/llamacpp/default_model.json";
constexpr const char* kReferenceSuffix = ".reference.safetensors";

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// ---------------------------------------------------------------------------------------------
// Reference files: "prompt" I32 [T], "logits" F32 [T, V], "greedy" I32 [G], optionally
// "long_prompt" I32 [L] and "long_logits" F32 [L, V].

struct Reference {
  std::vector<int32_t> prompt;
  std::vector<float> logits;  // [prompt.size(), vocab]
  std::vector<int32_t> greedy;
  std::vector<int32_t> long_prompt;
  std::vector<float> long_logits;  // [long_prompt.size(), vocab]
  int64_t vocab = 0;
};

const TensorView* find_tensor(const SafetensorsFile& file, const std::string& name) {
  for (const TensorView& t : file.tensors())
    if (t.name == name) return &t;
  return nullptr;
}

template <typename T>
std::vector<T> copy_tensor(const TensorView& t, DType expected) {
  ZEN_CHECK(t.dtype == expected, t.name, " has dtype ", dtype_name(t.dtype));
  ZEN_CHECK(t.nbytes == static_cast<size_t>(t.numel()) * sizeof(T), t.name);
  std::vector<T> out(static_cast<size_t>(t.numel()));
  std::memcpy(out.data(), t.data, t.nbytes);
  return out;
}

Reference read_reference(const fs::path& path) {
  SafetensorsFile file(path.string());
  auto require = [&](const std::string& name) {
    const TensorView* t = find_tensor(file, name);
    ZEN_CHECK(t != nullptr, path.string(), " lacks tensor ", name);
    return t;
  };
  Reference ref;
  ref.prompt = copy_tensor<int32_t>(*require("prompt"), DType::I32);
  const TensorView* logits = require("logits");
  ZEN_CHECK(logits->shape.size() == 2 &&
            logits->shape[0] == static_cast<int64_t>(ref.prompt.size()));
  ref.vocab = logits->shape[1];
  ref.logits = copy_tensor<float>(*logits, DType::F32);
  ref.greedy = copy_tensor<int32_t>(*require("greedy"), DType::I32);
  if (const TensorView* long_prompt = find_tensor(file, "long_prompt")) {
    ref.long_prompt = copy_tensor<int32_t>(*long_prompt, DType::I32);
    const TensorView* long_logits = require("long_logits");
    ZEN_CHECK(long_logits->shape.size() == 2 &&
              long_logits->shape[0] == static_cast<int64_t>(ref.long_prompt.size()) &&
              long_logits->shape[1] == ref.vocab);
    ref.long_logits = copy_tensor<float>(*long_logits, DType::F32);
  }
  return ref;
}

// Names of the fixture models: every <name>.reference.safetensors with a <name>/ folder. A
// reference whose checkpoint is <name>.gguf alone (hybrid_test runs those) is not one of them.
std::vector<std::string> list_fixture_models() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(kModelFixtures, ec)) {
    const std::string file = entry.path().filename().string();
    const size_t suffix = std::strlen(kReferenceSuffix);
    if (file.size() <= suffix || !file.ends_with(kReferenceSuffix)) continue;
    const std::string name = file.substr(0, file.size() - suffix);
    if (!fs::is_directory(kModelFixtures / name) && fs::exists(kModelFixtures / (name + ".gguf"))) continue;
    names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

int32_t argmax(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

// ---------------------------------------------------------------------------------------------
// Tiny HF models vs transformers.

class GoldenTinyModel : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string name = GetParam();
    reference_ = read_reference(kModelFixtures / (name + kReferenceSuffix));
    model_ = Model::load((kModelFixtures / name).string(), {.load_tokenizer = false});
    ASSERT_EQ(model_->config().vocab_size, reference_.vocab);
  }

  // Forwards `prompt` into a fresh cache and checks every row of logits against `expected`.
  void expect_prompt_logits(const std::vector<int32_t>& prompt, const std::vector<float>& expected,
                            const char* label) {
    const int64_t vocab = reference_.vocab;
    auto cache = model_->new_cache(static_cast<int64_t>(prompt.size()));
    std::vector<float> logits(prompt.size() * vocab);
    model_->forward(*cache, prompt, logits.data(), /*all_logits=*/true);
    const float scale = max_abs(expected);
    const float err = max_diff(logits, expected);
    std::printf("[ golden   ] %-28s %-6s T=%-4zu max|ref|=%.4f max_err=%.3e (rel %.2e)\n",
                GetParam().c_str(), label, prompt.size(), scale, err, err / scale);
    EXPECT_LE(err, 1e-4f * scale) << label << " logits differ from transformers";
    // Row by row, to name the first position that breaks when the bound fails.
    for (size_t t = 0; t < prompt.size(); ++t) {
      const auto n = static_cast<size_t>(vocab);
      const float row_err = max_diff({logits.data() + t * vocab, n}, {expected.data() + t * vocab, n});
      if (row_err > 1e-4f * scale) {
        ADD_FAILURE() << label << ": first bad position " << t << " (error " << row_err << ")";
        break;
      }
    }
  }

  Reference reference_;
  std::unique_ptr<Model> model_;
};

TEST_P(GoldenTinyModel, PromptLogitsMatchTransformers) {
  expect_prompt_logits(reference_.prompt, reference_.logits, "prompt");
}

// Long prompts (the fixtures with rope scaling) cross YaRN's original_max_position_embeddings.
class GoldenTinyModelLong : public GoldenTinyModel {};

TEST_P(GoldenTinyModelLong, LongPromptLogitsMatchTransformers) {
  ASSERT_FALSE(reference_.long_prompt.empty());
  expect_prompt_logits(reference_.long_prompt, reference_.long_logits, "long");
}

// Prefill, then one token at a time through the KV cache; argmax each step.
TEST_P(GoldenTinyModel, GreedyDecodeMatchesTransformers) {
  const std::vector<int32_t>& prompt = reference_.prompt;
  const int64_t vocab = reference_.vocab;
  const size_t steps = reference_.greedy.size();
  auto cache = model_->new_cache(static_cast<int64_t>(prompt.size() + steps));
  std::vector<float> logits(vocab);
  model_->forward(*cache, prompt, logits.data(), /*all_logits=*/false);
  std::vector<int32_t> generated;
  for (size_t i = 0; i < steps; ++i) {
    const int32_t next = argmax(logits.data(), vocab);
    generated.push_back(next);
    if (i + 1 < steps) {
      const int32_t token[1] = {next};
      model_->forward(*cache, token, logits.data(), /*all_logits=*/false);
    }
  }
  EXPECT_EQ(generated, reference_.greedy);
  EXPECT_EQ(cache->size(), static_cast<int64_t>(prompt.size() + steps - 1));
}

// Prefill in two chunks: the second chunk's rows equal the reference rows at the same
// positions, and the last row equals that of a one-chunk prefill.
TEST_P(GoldenTinyModel, ChunkedPrefillMatchesOneChunk) {
  const std::vector<int32_t>& prompt = reference_.prompt;
  const int64_t vocab = reference_.vocab;
  const size_t n = prompt.size();
  const size_t split = n / 3 + 1;
  const std::span<const int32_t> all(prompt);

  auto one_cache = model_->new_cache(static_cast<int64_t>(n));
  std::vector<float> one_last(vocab);
  model_->forward(*one_cache, all, one_last.data(), /*all_logits=*/false);

  auto chunked_cache = model_->new_cache(static_cast<int64_t>(n));
  std::vector<float> first_last(vocab);
  model_->forward(*chunked_cache, all.first(split), first_last.data(), /*all_logits=*/false);
  EXPECT_EQ(chunked_cache->size(), static_cast<int64_t>(split));
  std::vector<float> second((n - split) * vocab);
  model_->forward(*chunked_cache, all.subspan(split), second.data(), /*all_logits=*/true);
  EXPECT_EQ(chunked_cache->size(), static_cast<int64_t>(n));

  const float scale = max_abs(reference_.logits);
  const auto n_vocab = static_cast<size_t>(vocab);
  EXPECT_LE(max_diff({first_last.data(), n_vocab}, {&reference_.logits[(split - 1) * vocab], n_vocab}),
            1e-4f * scale);
  EXPECT_LE(max_diff(second, {&reference_.logits[split * vocab], second.size()}),
            1e-4f * scale);
  const float* chunked_last = second.data() + (n - split - 1) * vocab;
  const float err = max_diff({chunked_last, n_vocab}, {one_last.data(), n_vocab});
  EXPECT_LE(err, 1e-5f * scale) << "chunked prefill differs from one-chunk prefill";
}

TEST(GoldenTinyModels, FixturesPresent) {
  const std::vector<std::string> names = list_fixture_models();
  EXPECT_GE(names.size(), 3u) << "expected tiny model fixtures in " << kModelFixtures;
  for (const std::string& name : names)
    EXPECT_TRUE(fs::is_directory(kModelFixtures / name)) << name << " has no checkpoint folder";
}

std::string test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string s = info.param;
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

// Fixture models whose reference also holds a long prompt.
std::vector<std::string> list_long_prompt_models() {
  std::vector<std::string> names;
  for (const std::string& name : list_fixture_models()) {
    try {
      SafetensorsFile file((kModelFixtures / (name + kReferenceSuffix)).string());
      if (find_tensor(file, "long_prompt") != nullptr) names.push_back(name);
    } catch (const Error&) {
      names.push_back(name);  // unreadable: let the test itself report it
    }
  }
  return names;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenTinyModel, ::testing::ValuesIn(list_fixture_models()),
                         test_name);
INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenTinyModelLong,
                         ::testing::ValuesIn(list_long_prompt_models()), test_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GoldenTinyModel);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GoldenTinyModelLong);

// ---------------------------------------------------------------------------------------------
// The default model vs llama.cpp.

std::string default_model_path() {
  if (const char* env = std::getenv("ZEN_DEFAULT_MODEL"); env != nullptr && *env != '\0')
    return env;
  return (fs::path(ZEN_SOURCE_DIR) / "models/default/model.gguf").string();
}

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  ZEN_CHECK(in.good(), "cannot open ", path.string());
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str());
}

// Why the default-model tests cannot run here, or "" when they can.
std::string default_model_skip_reason(const std::string& path) {
  if (!fs::exists(path)) return "default model absent: set ZEN_DEFAULT_MODEL or place " + path;
  if (!fs::exists(kLlamaCppFixture)) return "llama.cpp fixture absent: " + kLlamaCppFixture.string();
  // A <model>.sha256 beside the model (written by tools/install_default_model.sh) must name
  // the GGUF the fixture was recorded on; comparing another model's output is meaningless.
  const std::string recorded = read_json(kLlamaCppFixture)["model"]["sha256"].get<std::string>();
  if (std::ifstream sha_file(path + ".sha256"); sha_file.good()) {
    std::string sha;
    sha_file >> sha;
    if (sha != recorded)
      return path + " is not the GGUF the llama.cpp fixture was recorded on (sha256 " + sha +
             ", fixture " + recorded + ")";
  }
  return "";
}

class GoldenDefaultModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = default_model_path();
    skip_reason_ = default_model_skip_reason(path);
    if (!skip_reason_.empty()) return;
    fixture_ = new nlohmann::json(read_json(kLlamaCppFixture));
    const auto start = Clock::now();
    model_ = Model::load(path, {.load_tokenizer = false}).release();
    std::printf("[ golden   ] loaded %s in %.2f s\n", path.c_str(), seconds_since(start));
  }
  static void TearDownTestSuite() {
    delete model_;
    delete fixture_;
    model_ = nullptr;
    fixture_ = nullptr;
  }
  void SetUp() override {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
  }

  static inline std::string skip_reason_;
  static inline Model* model_ = nullptr;
  static inline nlohmann::json* fixture_ = nullptr;
};

// Greedy decoding against llama.cpp's, teacher-forced: every step feeds llama.cpp's token, so
// one pass gives both the free-running greedy prefix that agrees (up to the first differing
// argmax) and the agreement at every later step. Required: over the first 32 generated tokens
// (or through llama.cpp's EOS), our argmax is exactly llama.cpp's token. Later steps only
// report disagreements, flagging near-ties (our logit gap within kNearTie).
TEST_F(GoldenDefaultModel, GreedyMatchesLlamaCpp) {
  const int64_t vocab = model_->config().vocab_size;
  constexpr size_t kRequired = 32;
  constexpr float kNearTie = 0.1f;
  for (const auto& case_json : (*fixture_)["prompts"]) {
    const std::string label = case_json["name"].get<std::string>();
    const auto prompt = case_json["prompt_ids"].get<std::vector<int32_t>>();
    const auto expected = case_json["generated_ids"].get<std::vector<int32_t>>();
    const int64_t eos_position = case_json.value("eos_position", int64_t{-1});
    // Tokens to compare: through llama.cpp's EOS inclusive, else all it generated.
    const size_t compare =
        eos_position >= 0 ? static_cast<size_t>(eos_position) + 1 : expected.size();
    const size_t required = std::min(kRequired, compare);

    auto cache = model_->new_cache(static_cast<int64_t>(prompt.size() + compare));
    std::vector<float> logits(vocab);
    auto start = Clock::now();
    model_->forward(*cache, prompt, logits.data(), /*all_logits=*/false);
    const double prefill_s = seconds_since(start);
    start = Clock::now();
    size_t exact_prefix = compare;  // free-running greedy agrees this far
    size_t agreed = 0, near_ties = 0;
    for (size_t i = 0; i < compare; ++i) {
      const int32_t ours = argmax(logits.data(), vocab);
      const int32_t theirs = expected[i];
      if (ours == theirs) {
        ++agreed;
      } else {
        exact_prefix = std::min(exact_prefix, i);
        const float gap = logits[ours] - logits[theirs];
        if (i < required) {
          ADD_FAILURE() << label << ": generated token " << i << " is " << ours
                        << ", llama.cpp's is " << theirs << " (our logit gap " << gap << ")";
        } else {
          near_ties += gap <= kNearTie ? 1 : 0;
          std::printf("[ golden   ] %-10s token %zu differs: ours %d, llama.cpp %d, gap %.4f\n",
                      label.c_str(), i, ours, theirs, gap);
        }
      }
      if (i + 1 < compare) {
        const int32_t token[1] = {theirs};
        model_->forward(*cache, token, logits.data(), /*all_logits=*/false);
      }
    }
    const double decode_s = seconds_since(start);
    std::printf("[ golden   ] %-10s prompt %3zu tok (%.1f tok/s), decode %zu tok (%.1f tok/s): "
                "greedy equal for %zu, argmax equal at %zu/%zu, near-ties %zu\n",
                label.c_str(), prompt.size(), prompt.size() / prefill_s, compare,
                compare / decode_s, exact_prefix, agreed, compare, near_ties);
  }
}

// log-softmax of one row at `target`, in double.
double log_prob(const float* row, int64_t vocab, int32_t target) {
  const double max = *std::max_element(row, row + vocab);
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(row[i]) - max);
  return static_cast<double>(row[target]) - max - std::log(sum);
}

// Perplexity over the same tokens in one context, fed in chunks; within 1% of llama.cpp's.
TEST_F(GoldenDefaultModel, PerplexityMatchesLlamaCpp) {
  const auto& ppl_json = (*fixture_)["perplexity"];
  const auto tokens = ppl_json["token_ids"].get<std::vector<int32_t>>();
  const double expected_ppl = ppl_json["ppl"].get<double>();
  const int64_t vocab = model_->config().vocab_size;
  const size_t n = tokens.size();
  constexpr size_t kChunk = 256;

  auto cache = model_->new_cache(static_cast<int64_t>(n));
  std::vector<float> logits(kChunk * vocab);
  const std::span<const int32_t> all(tokens);
  double nll_sum = 0.0;
  size_t predicted = 0;
  const auto start = Clock::now();
  for (size_t begin = 0; begin < n; begin += kChunk) {
    const size_t len = std::min(kChunk, n - begin);
    model_->forward(*cache, all.subspan(begin, len), logits.data(), /*all_logits=*/true);
    for (size_t r = 0; r < len; ++r) {
      const size_t pos = begin + r;
      if (pos + 1 >= n) break;
      nll_sum -= log_prob(logits.data() + r * vocab, vocab, tokens[pos + 1]);
      ++predicted;
    }
  }
  const double elapsed = seconds_since(start);
  const double ppl = std::exp(nll_sum / static_cast<double>(predicted));
  std::printf("[ golden   ] perplexity over %zu tokens: ours %.4f, llama.cpp %.4f (%.3f%%); "
              "%.1f tok/s (llama.cpp prefill %.1f tok/s)\n",
              n, ppl, expected_ppl, 100.0 * (ppl / expected_ppl - 1.0), n / elapsed,
              (*fixture_)["speed"].value("prefill_tok_s", 0.0));
  EXPECT_EQ(predicted, n - 1);
  EXPECT_NEAR(ppl, expected_ppl, 0.01 * expected_ppl);
}

// Our tokenizer reproduces llama.cpp's prompt ids (cheap, and pins the fixture's meaning).
TEST(GoldenDefaultModelTokenizer, PromptIdsMatchLlamaCpp) {
  const std::string path = default_model_path();
  if (const std::string reason = default_model_skip_reason(path); !reason.empty())
    GTEST_SKIP() << reason;
  const nlohmann::json fixture = read_json(kLlamaCppFixture);
  const auto tokenizer = Tokenizer::load(path);
  for (const auto& case_json : fixture["prompts"]) {
    const auto text = case_json["prompt_text"].get<std::string>();
    EXPECT_EQ(tokenizer->encode(text), case_json["prompt_ids"].get<std::vector<int32_t>>())
        << case_json["name"].get<std::string>();
  }
}

}  // namespace
}  // namespace zen
