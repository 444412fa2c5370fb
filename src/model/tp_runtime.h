// What a tensor-parallel model does besides running its sliced layers (dist/tensor_parallel.h),
// shared by the dense and hybrid models:
//   rank 0   validates a batch, sends it to the other ranks (send_forward), runs its own share;
//            its engine's copies and zeroings of recurrent-state slots between forwards are
//            sent too, so every rank's states stay those of the same tokens;
//   rank > 0 serves the steps (serve) on KV and state pools of its own heads, with the same
//            blocks and slots as rank 0's;
//   all      sum row-parallel outputs (all_reduce), look up vocabulary-parallel embedding rows
//            (embed) and gather vocabulary-parallel logits (logits);
//   drafters on rank 0 borrow the split model's embedding, output head and MTP head through
//            lend_* messages that the other ranks serve with their shares.
// A failure after a step went out ends the job (the other ranks would wait in a collective).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "base/thread_pool.h"
#include "dist/step_message.h"
#include "dist/tensor_parallel.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/linear.h"
#include "model/model.h"
#include "model/state_cache.h"

namespace zen {

class TpRuntime {
 public:
  TpRuntime() = default;
  ~TpRuntime();
  TpRuntime(const TpRuntime&) = delete;
  TpRuntime& operator=(const TpRuntime&) = delete;

  void init(const dist::TensorParallel& tp, int64_t vocab);
  const dist::TensorParallel& config() const { return tp_; }
  bool active() const { return tp_.active(); }  // several ranks (tensor or pipeline parallel)
  int rank() const { return tp_.rank(); }       // within the stage: the tensor-parallel rank
  int size() const { return tp_.size(); }       // tensor-parallel size
  int world_rank() const { return tp_.world_rank(); }
  dist::Range vocab_rows() const { return vocab_rows_; }

  // Pipeline stages (of size() tensor-parallel ranks each; rank r of stage s talks to rank r of
  // s - 1 and s + 1): stage s receives the hidden states of every micro-batch from s - 1 and
  // sends its own to s + 1; the last stage sends the logits to rank 0.
  int stage() const { return tp_.stage(); }
  int stages() const { return tp_.pipeline_stages; }
  bool first_stage() const { return stage() == 0; }
  bool last_stage() const { return stage() == stages() - 1; }
  // Runs part(micro-batch, its logits) over the batch: the whole batch without pipeline
  // stages; else in micro-batches of whole sequences (as many as stages), so stage s works on
  // micro-batch m while s + 1 works on m - 1, the last stage's logits (argmax-only: their
  // (max, index)) going to rank 0 at the end. Every message flows forward until then, so
  // blocking sends cannot deadlock. part's logits are null where this rank computes none.
  // A drafter's taps of layers on other stages are captured there and sent to rank 0 after
  // the forward (H: the hidden size).
  void run_stages(const ForwardBatch& batch, float* logits, int64_t V, int64_t H,
                  const std::function<void(const ForwardBatch&, float*)>& part);
  // This stage's layers (all without pipeline stages), balanced by the bytes a decoded token
  // reads: each layer's tensors (under layer_prefixes[i]; routed experts at k / E), the
  // lm_head (head_name) on the last stage; the embedding reads a row a token, nothing. With a
  // small model the lm_head is a large share (Qwen2.5-0.5B's weighs half its layers), so
  // layer counts alone would make the last stage the slow one. The other stages' layers are
  // marked in the ledger as theirs (never read here).
  dist::Range stage_layers(Checkpoint& c, const ModelConfig& cfg, const std::vector<std::string>& layer_prefixes,
                           const std::string& head_name);
  // After stage_layers: the first of this stage's layers in the whole model, and the whole
  // model's layer count (tap layers are whole-model indices).
  int64_t first_layer() const { return stage_ranges_.empty() ? 0 : stage_ranges_[static_cast<size_t>(stage())].begin; }
  int64_t total_layers() const { return stage_ranges_.empty() ? 0 : stage_ranges_.back().end; }
  // The largest v over the job's ranks (a collective: every rank calls it at load).
  int64_t max_over_ranks(int64_t v);
  // name as a regular expression matching itself (Checkpoint::ignore patterns).
  static std::string regex_quote(const std::string& name);
  void send_to_next_stage(const float* data, int64_t n);
  void recv_from_previous_stage(float* data, int64_t n);
  // The last stage's results (logits, a drafter's rows) to rank 0: called by the last stage
  // and by rank 0 (nothing when they are the same rank); of the last stage's tensor-parallel
  // ranks only the first sends.
  void send_to_first(const float* data, int64_t n);
  void recv_from_last(float* data, int64_t n);

  // Rank 0: sends the (validated) batch to the other ranks, then runs local(batch); an
  // exception from local ends the job.
  void forward(const ForwardBatch& batch, const std::function<void()>& local);
  // Rank 0, when the model goes: the other ranks leave serve().
  void send_stop();
  // What ranks > 0 run for rank 0's messages. forward: a step of the model. The rest serve a
  // drafter on rank 0 that borrows the target's parts (null: the model lends no such part):
  // embed, its share of the embedding rows of ids (embed()); output_head, its share of the
  // output head over hidden rows [rows, H] (head_logits()); mtp, its share of the MTP head over
  // a batch of the pool sized by mtp_kv, with hidden [batch tokens, H], the tokens' embedding
  // rows (pipeline stages: rank 0 looks them up; else null), and with_logits whether rank 0
  // wants the head's logits.
  struct Worker {
    std::function<void(const ForwardBatch&)> forward;
    std::function<void(std::span<const int32_t> ids)> embed;
    std::function<void(const float* hidden, int64_t rows)> output_head;
    using MtpPart = std::function<void(const ForwardBatch&, const float* hidden, const float* embedded, bool with_logits)>;
    MtpPart mtp;
    ModelConfig mtp_kv;
    int64_t hidden = 0;  // H
  };
  // Ranks > 0: runs rank 0's steps until it stops. local_cfg sizes this rank's pools.
  void serve(const ModelConfig& local_cfg, const Worker& worker);

  // Rank 0: a drafter's borrowing, run with the other ranks: sends what they need, then runs
  // local() (its collectives and receives meet theirs). An exception from local ends the job,
  // as in forward().
  // What must hold before rank 0 tells the other ranks to lend (past that point a failure
  // ends the job): this is rank 0, and ids are in the vocabulary.
  void check_lend(std::span<const int32_t> ids, int64_t vocab) const;
  // The embedding rows of ids (out [ids, H]) and the output head over hidden rows (logits
  // [rows, V]) of a split model, for a drafter; lending_worker gives ranks > 0 the parts that
  // answer them.
  void lend_embedding_rows(const Linear& embed, std::span<const int32_t> ids, int64_t H, int64_t V, float* out);
  void lend_output_head(const Linear& lm_head, const float* hidden, int64_t rows, int64_t H, int64_t V,
                        float* logits, ThreadPool& pool);
  Worker lending_worker(const Linear& embed, const Linear& lm_head, int64_t H, int64_t V, ThreadPool& pool);
  void lend_mtp(const ForwardBatch& batch, const float* hidden, const float* embedded, int64_t H, bool with_logits,
                const std::function<void()>& local);
  // logits[rows, V] <- lm_head(xn) of the last stage, on rank 0 (the last stage computes them,
  // vocabulary-parallel, and sends them); logits() without pipeline stages.
  void head_logits(const Linear& lm_head, const float* xn, int64_t rows, int64_t V, float* logits, ThreadPool& pool);
  // Whether this rank sends the last stage's results to rank 0 (the last stage's first rank,
  // not rank 0 itself).
  bool sends_last_stage() const { return world_rank() == last_stage_speaker() && world_rank() != 0; }

  // data[n] <- the sum over ranks (nothing without tensor parallelism).
  void all_reduce(float* data, int64_t n);
  // x[ids.size(), H] <- rows of the vocabulary-parallel embedding (this rank's rows, zeros
  // elsewhere, then the all-reduce: exact, the others add zeros).
  void embed(const Linear& embed, std::span<const int32_t> ids, int64_t H, float* x);
  // logits[rows, V] <- lm_head(xn): every rank its vocabulary slice, one all-gather (slices
  // padded to the widest). logits may be null on ranks > 0.
  // argmax_only: each rank's (max, index) of each row instead of its logits (8 bytes a row);
  // rank 0's rows are then -inf but at the argmax (ForwardBatch::argmax_only).
  void logits(const Linear& lm_head, const float* xn, int64_t rows, int64_t V, float* logits, ThreadPool& pool,
              bool argmax_only = false);

  // A row's maximum and its index (the first maximum), as the argmax exchanges carry them.
  struct RowMax {
    float value;
    int32_t index;
  };
  // logits [rows, width] (indices offset by first) -> their maxima.
  static void row_maxima(const float* logits, int64_t rows, int64_t width, int64_t first, RowMax* out);
  // Rows [rows, V] of -inf holding only each row's maximum, at its index.
  static void write_argmax_rows(const RowMax* maxima, int64_t rows, int64_t V, float* logits);
  // Pipeline: the last stage sends only the maxima of argmax-only rows.
  void send_maxima_to_first(const RowMax* maxima, int64_t rows);
  void recv_maxima_from_last(RowMax* maxima, int64_t rows);

 private:
  int last_stage_speaker() const;  // the world rank that sends the last stage's logits
  void watch(StatePool* states);
  void exchange_taps(const ForwardBatch& batch, int64_t H);
  void serve_forward(const ModelConfig& local_cfg, const Worker& worker, std::vector<uint8_t> body);
  void serve_mtp(const Worker::MtpPart& run, const Worker& worker, const std::vector<uint8_t>& body);
  void run_micro_batches(const ForwardBatch& batch, float* logits, int64_t V, int64_t H,
                         const std::function<void(const ForwardBatch&, float*)>& part);
  void send(dist::StepKind kind, const std::vector<uint8_t>& body, const std::function<void()>& local);
  // The pool mirroring rank 0's in `slot`, (re)built when its shape changes: of cfg's KV
  // layers, or of one group of them (kv_group_config(*windowed)).
  KvPool& worker_pool(int slot, const ModelConfig& cfg, const dist::PoolShape& shape,
                      std::optional<bool> windowed = std::nullopt);
  void send_state_op(const dist::StateOp& op);
  void apply_state_op(const ModelConfig& local_cfg, const dist::StateOp& op);
  StatePool& worker_states(const ModelConfig& local_cfg, uint64_t id, int64_t slots);

  dist::TensorParallel tp_;
  dist::Range vocab_rows_;
  std::vector<float> local_logits_, gathered_logits_;  // [rows, padded vocab slice], [ranks, ...]
  std::vector<RowMax> local_maxima_, gathered_maxima_;  // [rows], [ranks, rows]
  std::vector<float> pipeline_logits_;  // [rows, V]: the last stage's, or rank 0's without a buffer
  std::vector<RowMax> pipeline_maxima_;  // [rows] of argmax-only steps
  std::vector<dist::Range> stage_ranges_;  // every stage's layers (stage_layers)
  std::vector<float> worker_taps_, tap_rows_;  // a rank's taps of a step; packed rows sent
  // Rank 0: whether its own forward runs (its state operations then are the forward's own).
  // Shared with the observers it installs, which may outlive it.
  struct Watch {
    TpRuntime* runtime = nullptr;
    bool in_forward = false;
  };
  std::shared_ptr<Watch> watch_ = std::make_shared<Watch>();
  // Ranks > 0: pools of this rank's heads mirroring rank 0's (by rank 0's pool identity):
  // [0] the model's, [1] the MTP head's.
  std::unique_ptr<KvPool> worker_kv_[3];  // the target's main pool, the MTP head's, the target's window pool
  uint64_t worker_kv_id_[3] = {0, 0, 0};
  std::unique_ptr<StatePool> worker_states_;
  uint64_t worker_states_id_ = 0;
};

}  // namespace zen
