#include "dist/step_message.h"

#include <cstring>
#include <type_traits>

#include "base/error.h"
#include "model/state_cache.h"

namespace zen::dist {
namespace {

// Every field 8-byte aligned, so decoded spans of int32 point into the body directly.
class Writer {
 public:
  template <typename T>
  void put(T v) {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8);
    uint8_t slot[8] = {};
    std::memcpy(slot, &v, sizeof(T));
    out_.insert(out_.end(), slot, slot + 8);
  }
  void put_ids(std::span<const int32_t> ids) {
    put<uint64_t>(ids.size());
    const size_t bytes = ids.size_bytes(), padded = (bytes + 7) / 8 * 8;
    const size_t at = out_.size();
    out_.resize(at + padded, 0);
    if (bytes > 0) std::memcpy(&out_[at], ids.data(), bytes);
  }
  std::vector<uint8_t> take() { return std::move(out_); }

 private:
  std::vector<uint8_t> out_;
};

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& in) : in_(in) {}
  template <typename T>
  T get() {
    need(8);
    T v;
    std::memcpy(&v, &in_[at_], sizeof(T));
    at_ += 8;
    return v;
  }
  std::span<const int32_t> get_ids() {
    const auto n = get<uint64_t>();
    if (n > in_.size()) fail("step message: a list of ", n, " ids in a ", in_.size(), "-byte message");
    const size_t padded = (n * sizeof(int32_t) + 7) / 8 * 8;
    need(padded);
    const auto* p = reinterpret_cast<const int32_t*>(in_.data() + at_);
    at_ += padded;
    return {p, static_cast<size_t>(n)};
  }
  bool done() const { return at_ == in_.size(); }

 private:
  void need(size_t n) const {
    if (at_ + n > in_.size()) fail("step message truncated at byte ", at_, " of ", in_.size());
  }
  const std::vector<uint8_t>& in_;
  size_t at_ = 0;
};

}  // namespace

std::vector<uint8_t> encode_step(const ForwardBatch& batch) {
  Writer w;
  w.put<uint64_t>(reinterpret_cast<uintptr_t>(batch.kv));
  w.put<int64_t>(batch.kv->num_blocks());
  w.put<int64_t>(batch.kv->block_size());
  w.put<int32_t>(static_cast<int32_t>(batch.kv->dtype()));
  w.put<uint64_t>(reinterpret_cast<uintptr_t>(batch.window_kv));
  w.put<int64_t>(batch.window_kv != nullptr ? batch.window_kv->num_blocks() : 0);
  w.put<uint64_t>(reinterpret_cast<uintptr_t>(batch.states));
  w.put<int64_t>(batch.states != nullptr ? batch.states->num_slots() : 0);
  w.put<uint8_t>(batch.argmax_only ? 1 : 0);
  w.put<uint64_t>(batch.seqs.size());
  for (const SeqSlice& s : batch.seqs) {
    w.put<int64_t>(s.pos);
    w.put<int32_t>(s.state_slot);
    w.put<uint8_t>(static_cast<uint8_t>((s.all_logits ? 1 : 0) | (s.recurrent_form ? 2 : 0)));
    w.put_ids(s.tokens);
    w.put_ids(s.blocks);
    w.put_ids(s.state_history);
    w.put_ids(batch.window_kv != nullptr ? s.window_blocks : std::span<const int32_t>{});
  }
  w.put_ids(batch.tap_layers);  // pipeline stages capture the taps of their own layers
  return w.take();
}

DecodedStep decode_step(std::vector<uint8_t> body) {
  DecodedStep d;
  d.body = std::move(body);
  Reader r(d.body);
  d.pool.id = r.get<uint64_t>();
  d.pool.num_blocks = r.get<int64_t>();
  d.pool.block_size = r.get<int64_t>();
  const auto dtype = r.get<int32_t>();
  if (dtype < 0 || dtype > static_cast<int32_t>(KvDType::F8_E5M2)) fail("step message: KV dtype ", dtype);
  d.pool.dtype = static_cast<KvDType>(dtype);
  d.window_pool = d.pool;  // the same block size and precision
  d.window_pool.id = r.get<uint64_t>();
  d.window_pool.num_blocks = r.get<int64_t>();
  if ((d.window_pool.id != 0) != (d.window_pool.num_blocks > 0))
    fail("step message: a window pool of ", d.window_pool.num_blocks, " blocks");
  d.states_id = r.get<uint64_t>();
  d.states_slots = r.get<int64_t>();
  if (d.states_slots < 0 || (d.states_id != 0) != (d.states_slots > 0))
    fail("step message: ", d.states_slots, " state slots");
  d.argmax_only = r.get<uint8_t>() != 0;
  const auto n = r.get<uint64_t>();
  if (n > d.body.size()) fail("step message: ", n, " sequences in a ", d.body.size(), "-byte message");
  d.seqs.resize(static_cast<size_t>(n));
  for (SeqSlice& s : d.seqs) {
    s.pos = r.get<int64_t>();
    s.state_slot = r.get<int32_t>();
    const auto flags = r.get<uint8_t>();
    s.all_logits = (flags & 1) != 0;
    s.recurrent_form = (flags & 2) != 0;
    s.tokens = r.get_ids();
    s.blocks = r.get_ids();
    s.state_history = r.get_ids();
    s.window_blocks = r.get_ids();
  }
  d.tap_layers = r.get_ids();
  if (!r.done()) fail("step message: trailing bytes");
  return d;
}

}  // namespace zen::dist
