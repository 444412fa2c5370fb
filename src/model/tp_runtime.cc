#include "model/tp_runtime.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>

#include "base/error.h"
#include "dist/step_message.h"
#include "kernels/cpu/ops.h"

namespace zen {

TpRuntime::~TpRuntime() { watch_->runtime = nullptr; }

void TpRuntime::init(const dist::TensorParallel& tp, int64_t vocab) {
  tp_ = tp;
  vocab_rows_ = dist::split(vocab, tp_.size(), tp_.rank());
  watch_->runtime = this;
}

void TpRuntime::forward(const ForwardBatch& batch, const std::function<void()>& local) {
  watch(batch.states);
  send(dist::StepKind::Forward, dist::encode_step(batch), local);
}

void TpRuntime::send(dist::StepKind kind, const std::vector<uint8_t>& body, const std::function<void()>& local) {
  dist::StepHeader header;
  header.kind = kind;
  header.body_bytes = body.size();
  tp_.comm->broadcast_idle(&header, sizeof(header), 0);
  tp_.comm->broadcast(const_cast<uint8_t*>(body.data()), body.size(), 0);
  watch_->in_forward = true;
  try {
    local();
  } catch (const std::exception& e) {
    tp_.comm->abort(std::string("a tensor-parallel forward failed on rank 0 after the step went out: ") + e.what());
  }
  watch_->in_forward = false;
}

namespace {

// Appends n trivially copyable values' bytes.
template <typename T>
void append(std::vector<uint8_t>& out, const T* data, size_t n) {
  const auto* p = reinterpret_cast<const uint8_t*>(data);
  out.insert(out.end(), p, p + n * sizeof(T));
}

// Copies n values of T from body at `at` (checked), advancing it.
template <typename T>
std::vector<T> take(const std::vector<uint8_t>& body, size_t& at, size_t n) {
  if (n > body.size() / sizeof(T) || at + n * sizeof(T) > body.size())
    fail("drafter message truncated: ", n, " values at byte ", at, " of ", body.size());
  std::vector<T> out(n);
  if (n > 0) std::memcpy(out.data(), body.data() + at, n * sizeof(T));
  at += n * sizeof(T);
  return out;
}

}  // namespace

void TpRuntime::check_lend(std::span<const int32_t> ids, int64_t vocab) const {
  if (world_rank() != 0) fail("only rank 0 of a split model runs a drafter");
  for (const int32_t id : ids)
    if (id < 0 || id >= vocab) fail("embed_rows: token id ", id, " outside the vocabulary");
}

void TpRuntime::lend_embedding_rows(const Linear& embed_rows, std::span<const int32_t> ids, int64_t H, int64_t V,
                                    float* out) {
  check_lend(ids, V);
  std::vector<uint8_t> body;
  append(body, ids.data(), ids.size());
  send(dist::StepKind::Embed, body, [&] { embed(embed_rows, ids, H, out); });
}

void TpRuntime::lend_output_head(const Linear& lm_head, const float* hidden, int64_t rows, int64_t H, int64_t V,
                                 float* out, ThreadPool& pool) {
  check_lend({}, V);
  std::vector<uint8_t> body;
  append(body, hidden, static_cast<size_t>(rows * H));
  send(dist::StepKind::OutputHead, body, [&] { head_logits(lm_head, hidden, rows, V, out, pool); });
}

TpRuntime::Worker TpRuntime::lending_worker(const Linear& embed_rows, const Linear& lm_head, int64_t H, int64_t V,
                                            ThreadPool& pool) {
  Worker w;
  w.hidden = H;
  w.embed = [this, &embed_rows, H](std::span<const int32_t> ids) {
    if (!first_stage()) return;  // the first stage holds the embedding
    std::vector<float> rows(ids.size() * static_cast<size_t>(H));
    embed(embed_rows, ids, H, rows.data());
  };
  w.output_head = [this, &lm_head, V, &pool](const float* hidden, int64_t rows) {
    head_logits(lm_head, hidden, rows, V, nullptr, pool);
  };
  return w;
}

// Body: [u64 step bytes][the step][u64 with_logits][u64 embedded given][hidden f32 of every
// batch token][embedding rows f32 of every batch token, when given].
void TpRuntime::lend_mtp(const ForwardBatch& batch, const float* hidden, const float* embedded, int64_t H,
                         bool with_logits, const std::function<void()>& local) {
  const std::vector<uint8_t> step = dist::encode_step(batch);
  const int64_t tokens = batch_tokens(batch.seqs);
  std::vector<uint8_t> body;
  const uint64_t step_bytes = step.size(), logits_flag = with_logits ? 1 : 0, embedded_flag = embedded ? 1 : 0;
  append(body, &step_bytes, 1);
  body.insert(body.end(), step.begin(), step.end());
  append(body, &logits_flag, 1);
  append(body, &embedded_flag, 1);
  append(body, hidden, static_cast<size_t>(tokens * H));
  if (embedded != nullptr) append(body, embedded, static_cast<size_t>(tokens * H));
  send(dist::StepKind::Mtp, body, local);
}

void TpRuntime::send_stop() {
  if (!tp_.active() || tp_.world_rank() != 0) return;
  dist::StepHeader stop;
  tp_.comm->broadcast_idle(&stop, sizeof(stop), 0);
}

// Rank 0's pool reports copies and zeroings made outside its forwards (the forward's own
// zeroing of new sequences happens on every rank).
void TpRuntime::watch(StatePool* states) {
  if (states == nullptr || states->observer_owner == this) return;
  std::shared_ptr<Watch> w = watch_;
  const auto id = reinterpret_cast<uintptr_t>(states);
  const int64_t slots = states->num_slots();
  states->observer = [w, id, slots](int32_t src, int32_t dst) {
    if (w->runtime == nullptr || w->in_forward) return;
    w->runtime->send_state_op({id, slots, src, dst});
  };
  states->observer_owner = this;
}

void TpRuntime::send_state_op(const dist::StateOp& op) {
  dist::StepHeader header;
  header.kind = dist::StepKind::StateOp;
  header.body_bytes = sizeof(op);
  tp_.comm->broadcast_idle(&header, sizeof(header), 0);
  dist::StateOp copy = op;
  tp_.comm->broadcast(&copy, sizeof(copy), 0);
}

StatePool& TpRuntime::worker_states(const ModelConfig& local_cfg, uint64_t id, int64_t slots) {
  if (!worker_states_ || worker_states_id_ != id || worker_states_->num_slots() != slots) {
    worker_states_.reset();
    worker_states_ = std::make_unique<StatePool>(recurrent_state_floats(local_cfg), slots);
    worker_states_id_ = id;
  }
  return *worker_states_;
}

void TpRuntime::apply_state_op(const ModelConfig& local_cfg, const dist::StateOp& op) {
  StatePool& states = worker_states(local_cfg, op.pool_id, op.num_slots);
  if (op.src < 0) states.zero(op.dst);
  else states.copy(op.src, op.dst);
}

KvPool& TpRuntime::worker_pool(int slot, const ModelConfig& cfg, const dist::PoolShape& shape,
                               std::optional<bool> windowed) {
  std::unique_ptr<KvPool>& pool = worker_kv_[slot];
  if (!pool || worker_kv_id_[slot] != shape.id || pool->num_blocks() != shape.num_blocks ||
      pool->block_size() != shape.block_size || pool->dtype() != shape.dtype) {
    pool.reset();
    pool = std::make_unique<KvPool>(windowed ? cfg.kv_group_config(*windowed) : cfg, shape.num_blocks, shape.dtype,
                                    shape.block_size);
    worker_kv_id_[slot] = shape.id;
  }
  return *pool;
}

// A step of the model: the same blocks as rank 0's pool, holding this rank's KV heads; a
// drafter's taps captured here for the layers of this stage.
void TpRuntime::serve_forward(const ModelConfig& local_cfg, const Worker& worker, std::vector<uint8_t> body) {
  const dist::DecodedStep step = dist::decode_step(std::move(body));
  ForwardBatch batch;
  const bool apart = step.window_pool.id != 0;  // the sliding layers kept apart, as on rank 0
  batch.kv = &worker_pool(0, local_cfg, step.pool, apart ? std::optional<bool>(false) : std::nullopt);
  if (apart) batch.window_kv = &worker_pool(2, local_cfg, step.window_pool, true);
  if (step.states_id != 0) batch.states = &worker_states(local_cfg, step.states_id, step.states_slots);
  batch.seqs = step.seqs;
  batch.argmax_only = step.argmax_only;
  if (!step.tap_layers.empty()) {
    const int64_t tokens = batch_tokens(step.seqs);
    worker_taps_.assign(static_cast<size_t>(tokens) * step.tap_layers.size() * static_cast<size_t>(worker.hidden), 0.0f);
    batch.tap_layers = step.tap_layers;
    batch.taps = worker_taps_.data();
  }
  worker.forward(batch);
}

// The MTP head over a batch of its own pool (lend_mtp's body).
void TpRuntime::serve_mtp(const Worker::MtpPart& run, const Worker& worker, const std::vector<uint8_t>& body) {
  size_t at = 0;
  const uint64_t step_bytes = take<uint64_t>(body, at, 1)[0];
  const std::vector<uint8_t> step_body = take<uint8_t>(body, at, step_bytes);
  const bool with_logits = take<uint64_t>(body, at, 1)[0] != 0;
  const bool with_embedded = take<uint64_t>(body, at, 1)[0] != 0;
  const dist::DecodedStep step = dist::decode_step(step_body);
  const int64_t tokens = batch_tokens(step.seqs);
  const auto rows = static_cast<size_t>(tokens * worker.hidden);
  const std::vector<float> hidden = take<float>(body, at, rows);
  const std::vector<float> embedded = take<float>(body, at, with_embedded ? rows : 0);
  if (at != body.size()) fail("MTP message of ", body.size(), " bytes holds ", at);
  ForwardBatch batch;
  batch.kv = &worker_pool(1, worker.mtp_kv, step.pool);
  batch.seqs = step.seqs;
  run(batch, hidden.data(), with_embedded ? embedded.data() : nullptr, with_logits);
}

void TpRuntime::serve(const ModelConfig& local_cfg, const Worker& worker) {
  if (!tp_.active() || tp_.world_rank() == 0) fail("serve_steps: only ranks other than 0 of a parallel model serve steps");
  auto lent = [](const auto& part, const char* what) -> const auto& {
    if (!part) fail("rank 0 asked for the ", what, ", which this model does not lend");
    return part;
  };
  for (;;) {
    dist::StepHeader header;
    tp_.comm->broadcast_idle(&header, sizeof(header), 0);
    if (header.kind == dist::StepKind::Stop) return;
    std::vector<uint8_t> body(header.body_bytes);
    tp_.comm->broadcast(body.data(), body.size(), 0);
    try {
      switch (header.kind) {
        case dist::StepKind::StateOp: {
          if (body.size() != sizeof(dist::StateOp)) fail("state operation message of ", body.size(), " bytes");
          dist::StateOp op;
          std::copy_n(body.data(), sizeof(op), reinterpret_cast<uint8_t*>(&op));
          apply_state_op(local_cfg, op);
          break;
        }
        case dist::StepKind::Forward:
          serve_forward(local_cfg, worker, std::move(body));
          break;
        case dist::StepKind::Embed: {
          if (body.size() % sizeof(int32_t) != 0) fail("embedding message of ", body.size(), " bytes");
          size_t at = 0;
          const std::vector<int32_t> ids = take<int32_t>(body, at, body.size() / sizeof(int32_t));
          lent(worker.embed, "embedding")(ids);
          break;
        }
        case dist::StepKind::OutputHead: {
          const auto H = static_cast<size_t>(worker.hidden);
          if (H == 0 || body.size() % (H * sizeof(float)) != 0) fail("output head message of ", body.size(), " bytes");
          size_t at = 0;
          const std::vector<float> hidden = take<float>(body, at, body.size() / sizeof(float));
          lent(worker.output_head, "output head")(hidden.data(), static_cast<int64_t>(hidden.size() / H));
          break;
        }
        case dist::StepKind::Mtp:
          serve_mtp(lent(worker.mtp, "MTP head"), worker, body);
          break;
        default: fail("unknown step kind ", static_cast<uint32_t>(header.kind));
      }
    } catch (const std::exception& e) {
      tp_.comm->abort(std::string("a tensor-parallel step failed: ") + e.what());
    }
  }
}

void TpRuntime::all_reduce(float* data, int64_t n) {
  if (tp_.size() > 1) tp_.tp_comm().all_reduce_sum(data, static_cast<size_t>(n));
}

void TpRuntime::run_stages(const ForwardBatch& batch, float* logits, int64_t V, int64_t H,
                           const std::function<void(const ForwardBatch&, float*)>& part) {
  if (stages() == 1) return part(batch, logits);
  run_micro_batches(batch, logits, V, H, part);
  if (batch.taps != nullptr && !batch.tap_layers.empty()) exchange_taps(batch, H);
}

void TpRuntime::run_micro_batches(const ForwardBatch& batch, float* logits, int64_t V, int64_t H,
                                  const std::function<void(const ForwardBatch&, float*)>& part) {
  const int64_t rows = logit_rows(batch);
  const bool rank0 = world_rank() == 0;
  float* out = nullptr;
  if (last_stage() || rank0) {
    if (logits == nullptr || !rank0) {
      pipeline_logits_.resize(static_cast<size_t>(rows * V));
      out = pipeline_logits_.data();
    } else {
      out = logits;
    }
  }
  const size_t seqs = batch.seqs.size(), parts = std::min(seqs, static_cast<size_t>(stages()));
  int64_t row = 0, token = 0;
  const auto tap_row = static_cast<int64_t>(batch.tap_layers.size()) * H;
  for (size_t m = 0; m < parts; ++m) {
    ForwardBatch micro = batch;
    const size_t b = m * seqs / parts, e = (m + 1) * seqs / parts;
    micro.seqs = batch.seqs.subspan(b, e - b);
    if (batch.taps != nullptr) micro.taps = batch.taps + token * tap_row;  // the micro-batch's rows
    part(micro, last_stage() ? out + row * V : nullptr);
    row += logit_rows(micro);
    token += batch_tokens(micro.seqs);
  }
  // Argmax-only rows travel as (max, index): 8 bytes a row instead of 4 V.
  if (batch.argmax_only) pipeline_maxima_.resize(static_cast<size_t>(rows));
  if (last_stage() && !rank0) {
    if (world_rank() != last_stage_speaker()) return;
    if (!batch.argmax_only) return send_to_first(out, rows * V);
    row_maxima(out, rows, V, 0, pipeline_maxima_.data());
    send_maxima_to_first(pipeline_maxima_.data(), rows);
  } else if (rank0 && !last_stage()) {
    if (!batch.argmax_only) return recv_from_last(out, rows * V);
    recv_maxima_from_last(pipeline_maxima_.data(), rows);
    write_argmax_rows(pipeline_maxima_.data(), rows, V, out);
  }
}

// Stage s > 0's first rank sends rank 0 the taps of its layers, [tokens, its taps, H] in
// tap order; rank 0 puts them in place. The other ranks of a stage hold the same rows.
void TpRuntime::exchange_taps(const ForwardBatch& batch, int64_t H) {
  const int64_t tokens = batch_tokens(batch.seqs);
  const auto n_taps = static_cast<int64_t>(batch.tap_layers.size());
  for (int s = 1; s < stages(); ++s) {
    const dist::Range layers = stage_ranges_.at(static_cast<size_t>(s));
    std::vector<int64_t> cols;
    for (int64_t j = 0; j < n_taps; ++j)
      if (batch.tap_layers[static_cast<size_t>(j)] >= layers.begin && batch.tap_layers[static_cast<size_t>(j)] < layers.end)
        cols.push_back(j);
    const int speaker = s * size();
    if (cols.empty() || (world_rank() != speaker && world_rank() != 0)) continue;
    const auto width = static_cast<int64_t>(cols.size());
    tap_rows_.resize(static_cast<size_t>(tokens * width * H));
    auto each = [&](auto&& copy) {
      for (int64_t t = 0; t < tokens; ++t)
        for (int64_t c = 0; c < width; ++c)
          copy(batch.taps + (t * n_taps + cols[static_cast<size_t>(c)]) * H, &tap_rows_[static_cast<size_t>((t * width + c) * H)]);
    };
    const size_t bytes = tap_rows_.size() * sizeof(float);
    if (world_rank() == speaker) {
      each([&](const float* from, float* to) { std::copy_n(from, H, to); });
      tp_.comm->send(tap_rows_.data(), bytes, 0);
    } else {
      tp_.comm->recv(tap_rows_.data(), bytes, speaker);
      each([&](float* to, const float* from) { std::copy_n(from, H, to); });
    }
  }
}

void TpRuntime::head_logits(const Linear& lm_head, const float* xn, int64_t rows, int64_t V, float* out,
                            ThreadPool& pool) {
  if (stages() == 1) return logits(lm_head, xn, rows, V, out, pool);
  if (last_stage()) {
    float* mine = nullptr;  // rank 0 is on the first stage, so the speaker sends what it gathers
    if (sends_last_stage()) {
      pipeline_logits_.resize(static_cast<size_t>(rows * V));
      mine = pipeline_logits_.data();
    }
    logits(lm_head, xn, rows, V, mine, pool);
    send_to_first(mine, rows * V);
  } else if (world_rank() == 0) {
    recv_from_last(out, rows * V);
  }
}

dist::Range TpRuntime::stage_layers(Checkpoint& c, const ModelConfig& cfg,
                                    const std::vector<std::string>& layer_prefixes,
                                    const std::string& head_name) {
  const auto L = static_cast<int64_t>(layer_prefixes.size());
  stage_ranges_.assign(1, {0, L});
  if (stages() == 1) return {0, L};
  std::vector<double> cost(static_cast<size_t>(L), 0.0);
  const double expert_share =
      cfg.num_experts > 0 ? static_cast<double>(cfg.num_experts_per_tok) / static_cast<double>(cfg.num_experts) : 1;
  for (const std::string& name : c.tensor_names())
    for (int64_t i = 0; i < L; ++i)
      if (name.starts_with(layer_prefixes[static_cast<size_t>(i)])) {
        const bool routed = name.find("experts.") != std::string::npos || name.find("_exps.") != std::string::npos;
        cost[static_cast<size_t>(i)] += static_cast<double>(c.peek(name)->nbytes) * (routed ? expert_share : 1.0);
        break;
      }
  const TensorView* head = c.peek(head_name);
  const double head_cost = head != nullptr ? static_cast<double>(head->nbytes) : 0.0;
  stage_ranges_.clear();
  for (int st = 0; st < stages(); ++st) stage_ranges_.push_back(dist::pipeline_layers(cost, head_cost, stages(), st));
  const dist::Range own = stage_ranges_[static_cast<size_t>(stage())];
  for (int64_t i = 0; i < L; ++i)
    if (i < own.begin || i >= own.end)
      c.ignore(regex_quote(layer_prefixes[static_cast<size_t>(i)]) + ".*", "a layer of another pipeline stage");
  return own;
}

int64_t TpRuntime::max_over_ranks(int64_t v) {
  if (!tp_.active()) return v;
  std::vector<int64_t> all(static_cast<size_t>(tp_.comm->size()));
  tp_.comm->all_gather(&v, sizeof(v), all.data());
  tp_.comm->reset_stats();  // the statistics are the forwards'
  return *std::max_element(all.begin(), all.end());
}

std::string TpRuntime::regex_quote(const std::string& name) {
  std::string out;
  for (char ch : name) {
    if (std::string_view(".[]{}()\\*+?^$|").find(ch) != std::string_view::npos) out += '\\';
    out += ch;
  }
  return out;
}

void TpRuntime::send_to_next_stage(const float* data, int64_t n) {
  tp_.comm->send(data, static_cast<size_t>(n) * sizeof(float), tp_.world_rank() + tp_.size());
}

void TpRuntime::recv_from_previous_stage(float* data, int64_t n) {
  tp_.comm->recv(data, static_cast<size_t>(n) * sizeof(float), tp_.world_rank() - tp_.size());
}

// The last stage's first tensor-parallel rank speaks for it (its ranks hold the same logits).
int TpRuntime::last_stage_speaker() const { return (stages() - 1) * size(); }

void TpRuntime::send_to_first(const float* data, int64_t n) {
  if (sends_last_stage()) tp_.comm->send(data, static_cast<size_t>(n) * sizeof(float), 0);
}

void TpRuntime::recv_from_last(float* data, int64_t n) {
  if (const int last = last_stage_speaker(); last != 0)
    tp_.comm->recv(data, static_cast<size_t>(n) * sizeof(float), last);
}

void TpRuntime::embed(const Linear& embed, std::span<const int32_t> ids, int64_t H, float* x) {
  for (size_t t = 0; t < ids.size(); ++t) {
    const int32_t id = ids[t];
    float* row = x + static_cast<int64_t>(t) * H;
    if (id >= vocab_rows_.begin && id < vocab_rows_.end) embed.dequantize_row(id - vocab_rows_.begin, row);
    else std::fill_n(row, H, 0.0f);
  }
  all_reduce(x, static_cast<int64_t>(ids.size()) * H);
}

void TpRuntime::row_maxima(const float* logits, int64_t rows, int64_t width, int64_t first, RowMax* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits + r * width;
    const int64_t at = kernels::argmax_f32(row, width);
    out[r] = {row[at], static_cast<int32_t>(first + at)};
  }
}

void TpRuntime::write_argmax_rows(const RowMax* maxima, int64_t rows, int64_t V, float* logits) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = logits + r * V;
    std::fill_n(row, V, -std::numeric_limits<float>::infinity());
    row[maxima[r].index] = maxima[r].value;
  }
}

void TpRuntime::send_maxima_to_first(const RowMax* maxima, int64_t rows) {
  if (tp_.world_rank() == last_stage_speaker() && tp_.world_rank() != 0)
    tp_.comm->send(maxima, static_cast<size_t>(rows) * sizeof(RowMax), 0);
}

void TpRuntime::recv_maxima_from_last(RowMax* maxima, int64_t rows) {
  if (const int last = last_stage_speaker(); last != 0)
    tp_.comm->recv(maxima, static_cast<size_t>(rows) * sizeof(RowMax), last);
}

void TpRuntime::logits(const Linear& lm_head, const float* xn, int64_t rows, int64_t V, float* logits,
                       ThreadPool& pool, bool argmax_only) {
  if (tp_.size() == 1) return lm_head.matmul(xn, rows, logits, pool);
  const int t = tp_.size();
  const int64_t width = dist::split(V, t, 0).size(), mine = vocab_rows_.size();
  if (argmax_only) {
    // Each rank's maximum of each row over its vocabulary slice; the first maximum over the
    // ranks in rank order is the first maximum of the whole row (slices ascend).
    local_maxima_.assign(static_cast<size_t>(rows), {-std::numeric_limits<float>::infinity(), 0});
    if (mine > 0) {
      local_logits_.resize(static_cast<size_t>(rows * mine));
      lm_head.matmul(xn, rows, local_logits_.data(), pool);
      row_maxima(local_logits_.data(), rows, mine, vocab_rows_.begin, local_maxima_.data());
    }
    gathered_maxima_.resize(static_cast<size_t>(rows) * static_cast<size_t>(t));
    tp_.tp_comm().all_gather(local_maxima_.data(), static_cast<size_t>(rows) * sizeof(RowMax),
                             gathered_maxima_.data());
    if (logits == nullptr) return;
    for (int64_t r = 0; r < rows; ++r) {
      RowMax best = gathered_maxima_[static_cast<size_t>(r)];
      for (int rank = 1; rank < t; ++rank) {
        const RowMax& m = gathered_maxima_[static_cast<size_t>(rank * rows + r)];
        if (m.value > best.value) best = m;
      }
      local_maxima_[static_cast<size_t>(r)] = best;
    }
    return write_argmax_rows(local_maxima_.data(), rows, V, logits);
  }
  const auto slice = static_cast<size_t>(rows * width);
  local_logits_.assign(slice, 0.0f);
  gathered_logits_.resize(slice * static_cast<size_t>(t));
  if (mine > 0) {
    std::vector<float>& tmp = gathered_logits_;  // scratch until the gather overwrites it
    lm_head.matmul(xn, rows, tmp.data(), pool);
    for (int64_t r = 0; r < rows; ++r)
      std::copy_n(&tmp[static_cast<size_t>(r * mine)], mine, &local_logits_[static_cast<size_t>(r * width)]);
  }
  tp_.tp_comm().all_gather(local_logits_.data(), slice * sizeof(float), gathered_logits_.data());
  if (logits == nullptr) return;
  for (int rank = 0; rank < t; ++rank) {
    const dist::Range cols = dist::split(V, t, rank);
    for (int64_t r = 0; r < rows; ++r)
      std::copy_n(&gathered_logits_[static_cast<size_t>(rank) * slice + static_cast<size_t>(r * width)], cols.size(),
                  logits + r * V + cols.begin);
  }
}

}  // namespace zen
