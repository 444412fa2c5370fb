#include "model/model.h"

#include <algorithm>
#include <filesystem>

#include "base/error.h"
#include "base/mmap.h"
#include "dist/model_identity.h"
#include "model/dense.h"
#include "model/hybrid.h"
#include "model/linear.h"

namespace zen {

namespace {

// generation_config.json's eos_token_id (int or list) overrides config.json's.
void read_generation_config(const std::string& folder, ModelConfig& cfg) {
  const std::string path = folder + "/generation_config.json";
  if (!file_exists(path)) return;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": invalid JSON: ", e.what());
  }
  if (!j.is_object() || !j.contains("eos_token_id")) return;
  std::vector<int32_t> ids;
  const auto& e = j["eos_token_id"];
  if (e.is_number_integer()) ids.push_back(e.get<int32_t>());
  if (e.is_array())
    for (const auto& v : e)
      if (v.is_number_integer()) ids.push_back(v.get<int32_t>());
  if (!ids.empty()) cfg.eos_token_ids = ids;
}

}  // namespace

std::unique_ptr<Model> Model::load(const std::string& path, const LoadOptions& opts) {
  auto ckpt = Checkpoint::open(path);
  ModelConfig cfg;
  if (ckpt->format() == CheckpointFormat::Gguf) {
    cfg = ModelConfig::from_gguf(*ckpt->gguf());
  } else {
    cfg = ModelConfig::from_hf(ckpt->hf_config());
    read_generation_config(ckpt->folder(), cfg);
  }
  if (const dist::TensorParallel& tp = opts.tensor_parallel; tp.active()) {
    if (const std::string problem = dist::tensor_parallel_problem(cfg, tp.size(), tp.expert_parallel); !problem.empty())
      fail(path, ": cannot run with --tensor-parallel-size ", tp.size(), ": ", problem);
    if (const std::string problem = dist::pipeline_problem(cfg, tp.pipeline_stages); !problem.empty())
      fail(path, ": cannot run with --pipeline-parallel-size ", tp.pipeline_stages, ": ", problem);
    dist::check_same_model(*tp.comm, *ckpt);
  }
  // Weights first, so a broken checkpoint is reported by tensor name before anything else.
  const GgufFile* gguf = ckpt->gguf();
  const std::string folder = ckpt->folder();
  const bool hybrid =
      cfg.architecture == "qwen3_5" || cfg.architecture == "qwen3_5_moe" || cfg.architecture == "qwen3_next";
  std::unique_ptr<Model> model;
  if (hybrid)
    model = std::make_unique<HybridModel>(std::move(ckpt), std::move(cfg), nullptr, opts);
  else
    model = std::make_unique<DenseModel>(std::move(ckpt), std::move(cfg), nullptr, opts);
  // Before the tokenizer's tables are built and again after (it reads the GGUF metadata), so
  // neither peak holds pages the packed copies have replaced.
  model->checkpoint().release_loader_pages();
  if (opts.load_tokenizer) {
    if (gguf != nullptr) {
      model->attach_tokenizer(Tokenizer::from_gguf(*gguf));
    } else {
      if (!file_exists(folder + "/tokenizer.json"))
        fail(folder, ": no tokenizer.json beside the weights (needed to run text)");
      model->attach_tokenizer(Tokenizer::load(folder));
    }
  }
  model->checkpoint().release_loader_pages();
  return model;
}

void Model::serve_steps() { fail(config().architecture, ": this model has no tensor-parallel form"); }

void check_tap_layers(const ForwardBatch& batch, int64_t num_layers) {
  if (batch.taps != nullptr)
    for (int32_t l : batch.tap_layers)
      if (l < 0 || l >= num_layers) fail("forward: tap layer ", l, " of ", num_layers);
}

void embedding_rows(const Linear& table, int64_t vocab, int64_t H, std::span<const int32_t> ids, float* out) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) fail("embed_rows: token id ", ids[i], " outside the vocabulary");
    table.dequantize_row(ids[i], out + static_cast<int64_t>(i) * H);
  }
}

void capture_taps(const ForwardBatch& batch, int64_t layer, const float* x, int64_t n, int64_t H) {
  if (batch.taps == nullptr) return;
  const auto n_taps = static_cast<int64_t>(batch.tap_layers.size());
  for (int64_t j = 0; j < n_taps; ++j)
    if (batch.tap_layers[static_cast<size_t>(j)] == layer)
      for (int64_t t = 0; t < n; ++t) std::copy_n(x + t * H, H, batch.taps + (t * n_taps + j) * H);
}

void Model::embed_rows(std::span<const int32_t>, float*) const {
  fail(config().architecture, ": this model cannot lend its embedding to a drafter");
}

void Model::output_head(const float*, int64_t, float*) {
  fail(config().architecture, ": this model cannot lend its output head to a drafter");
}

int64_t batch_tokens(std::span<const SeqSlice> seqs) {
  int64_t n = 0;
  for (const SeqSlice& s : seqs) n += static_cast<int64_t>(s.tokens.size());
  return n;
}

int64_t logit_rows(const ForwardBatch& batch) {
  int64_t rows = 0;
  for (const SeqSlice& s : batch.seqs) rows += s.all_logits ? static_cast<int64_t>(s.tokens.size()) : 1;
  return rows;
}

void Model::forward(KvCache& cache, std::span<const int32_t> tokens, float* logits, bool all_logits, bool argmax_only) {
  if (tokens.empty()) return;
  const int64_t p0 = cache.size(), n = static_cast<int64_t>(tokens.size());
  if (p0 + n > cache.capacity())
    fail("context full: ", p0, " cached + ", n, " new tokens exceed the cache capacity of ", cache.capacity());
  SeqSlice slice;
  slice.tokens = tokens;
  slice.pos = p0;
  slice.blocks = cache.blocks();
  slice.state_slot = cache.state_slot();
  slice.all_logits = all_logits;
  ForwardBatch batch;
  batch.kv = &cache.pool();
  batch.states = cache.states();
  batch.seqs = std::span<const SeqSlice>(&slice, 1);
  batch.argmax_only = argmax_only;
  forward(batch, logits);
  cache.advance(n);
}

}  // namespace zen
