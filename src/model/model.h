// A loaded causal LM of the family: config, weights (views into the mapped checkpoint),
// tokenizer, and a forward pass over a per-sequence KV cache.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dist/tensor_parallel.h"
#include "io/checkpoint.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "tokenizer/tokenizer.h"

namespace zen {

struct Linear;

class ThreadPool;

// One sequence's share of a batched forward.
struct SeqSlice {
  std::span<const int32_t> tokens;  // new tokens, at positions [pos, pos + tokens.size())
  int64_t pos = 0;                  // tokens of this sequence already in the cache
  std::span<const int32_t> blocks;  // KV block table covering pos + tokens.size() tokens
  int32_t state_slot = -1;          // recurrent-state slot (hybrid models), else -1
  bool all_logits = false;          // logits for every new token, else for the last only
  // Speculative decoding (hybrid models): when non-empty (tokens.size() entries), the state
  // after new token i is also copied to slot state_history[i], so a verifier can restore the
  // state after the last accepted token. KV needs no such help: rejected positions are simply
  // overwritten later.
  std::span<const int32_t> state_history;
  // Hybrid models: run the delta rule token by token (the form decoding uses) even for many
  // tokens. Set when recomputing tokens that were decoded (after preemption), so the state
  // comes out bit-identical to the one decoding built; the chunked prefill form may differ in
  // the last bits.
  bool recurrent_form = false;
  // With ForwardBatch::window_kv: the sliding layers' table in that pool, logical block i as
  // in blocks (-1 where no block is held: before the window of every new token).
  std::span<const int32_t> window_blocks;
};

// Sequences of any lengths and positions, mixing prefill chunks and decode tokens. Logits
// rows follow the order of seqs: tokens.size() rows for all_logits, else one. Every row is
// computed as if its sequence ran alone (kernels are batch-invariant).
struct ForwardBatch {
  KvPool* kv = nullptr;
  StatePool* states = nullptr;  // required when the model has recurrent layers
  std::span<const SeqSlice> seqs;
  // Optional, for drafters that read the target (DFlash): the residual stream after each of
  // these layers for every new token, in batch order: taps [tokens, tap_layers.size() * hidden].
  std::span<const int32_t> tap_layers;
  float* taps = nullptr;
  // Every logit row is read only for its argmax (greedy sampling of raw logits, no logprobs):
  // a model split by vocabulary may then exchange each row's (max, index) instead of the
  // logits, and write rows of -inf holding only the maximum, at its index.
  bool argmax_only = false;
  // Optional: the sliding-window layers' K/V (ModelConfig::is_window_layer), kept apart so that
  // they hold only each sequence's window (SeqSlice::window_blocks); kv then holds the other
  // layers. Null: kv holds every KV layer.
  KvPool* window_kv = nullptr;
};
int64_t logit_rows(const ForwardBatch& batch);
// New tokens of a batch's sequences (the rows of its activations and taps).
int64_t batch_tokens(std::span<const SeqSlice> seqs);
// Throws unless every tap layer is one of num_layers.
void check_tap_layers(const ForwardBatch& batch, int64_t num_layers);
// Rows of an embedding table [vocab, H] for ids (embed_rows of both model kinds); throws for
// ids outside the vocabulary.
void embedding_rows(const Linear& table, int64_t vocab, int64_t H, std::span<const int32_t> ids, float* out);
// After layer `layer`: copies the residual stream x [n, H] into batch.taps where tapped.
void capture_taps(const ForwardBatch& batch, int64_t layer, const float* x, int64_t n, int64_t H);

struct LoadOptions {
  int n_threads = 0;           // 0: all cores
  // Run on this pool instead of one of its own (it must outlive the model): a draft model
  // shares its target's, so two pools never spin against each other on the same cores.
  ThreadPool* shared_pool = nullptr;
  bool load_tokenizer = true;  // false for tokenizer-less fixtures
  // false: load despite missing/unexpected tensors so `zen inspect` can report them; such a
  // model refuses to run.
  bool strict = true;
  // NVFP4 matrices on AVX2: false (default) quantizes activations per block of 32 to int8 for
  // integer dot products (as llama.cpp does for its 4-bit formats), about 2x faster; true keeps
  // them f32, which matches transformers on the dequantized weights to f32 rounding.
  bool nvfp4_exact_activations = false;
  // Tensor parallelism over these ranks (src/dist): each binds its slice of every weight, and
  // rank 0's forward() runs on all of them. Checked against the config and the other ranks'
  // checkpoints at load.
  dist::TensorParallel tensor_parallel;
};

class Model {
 public:
  virtual ~Model() = default;
  // Opens any supported checkpoint (HF folder, .safetensors with config.json, .gguf).
  // Strict: throws zen::Error listing missing/mismatched/unexpected tensors.
  static std::unique_ptr<Model> load(const std::string& path, const LoadOptions& opts = {});

  virtual const ModelConfig& config() const = 0;
  virtual const Tokenizer* tokenizer() const = 0;  // null when not loaded
  virtual const Checkpoint& checkpoint() const = 0;
  virtual ThreadPool& pool() = 0;
  virtual void attach_tokenizer(std::unique_ptr<Tokenizer> tok) = 0;

  std::unique_ptr<KvCache> new_cache(int64_t capacity, KvDType dtype = KvDType::F32) const {
    return std::make_unique<KvCache>(config(), capacity, dtype);
  }
  // Appends tokens at positions cache.size() ... and writes logits: [tokens.size(), vocab]
  // when all_logits, else only the last token's row [vocab].
  void forward(KvCache& cache, std::span<const int32_t> tokens, float* logits, bool all_logits,
               bool argmax_only = false);
  // The batched forward; see ForwardBatch. logits: [logit_rows(batch), vocab].
  virtual void forward(const ForwardBatch& batch, float* logits) = 0;

  // The whole model's layers: a drafter's tap indices count these (under pipeline parallelism
  // rank 0's config() holds only its stage's layers).
  virtual int64_t layer_count() const { return config().num_layers; }
  // What a drafter borrows from its target: the input embedding rows of ids (out: [n, hidden])
  // and the output head alone, without the final norm (hidden: [rows, hidden], logits:
  // [rows, vocab]). Models that cannot lend them throw zen::Error. A model split over MPI
  // ranks lends them on rank 0, each borrowing a message the other ranks answer with their
  // shares (model/tp_runtime.h).
  virtual void embed_rows(std::span<const int32_t> ids, float* out) const;
  virtual void output_head(const float* hidden, int64_t rows, float* logits);

  // Tensor parallelism, on ranks other than 0: runs the forwards that rank 0's forward()
  // broadcasts, until rank 0's model is destroyed. Models without a sharded form throw.
  virtual void serve_steps();

};

}  // namespace zen
