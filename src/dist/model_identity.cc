#include "dist/model_identity.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/error.h"

namespace zen::dist {
namespace {

uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}
constexpr uint64_t kFnvBasis = 14695981039346656037ull;

// 64 bytes at the start, middle and end of a tensor's data.
uint64_t sample_hash(const TensorView& t) {
  uint64_t h = kFnvBasis;
  const size_t n = std::min<size_t>(64, t.nbytes);
  for (size_t at : {size_t{0}, t.nbytes / 2 - std::min(t.nbytes / 2, n / 2), t.nbytes - n})
    h = fnv1a(h, t.data + at, n);
  return h;
}

struct Summary {
  uint64_t tensors = 0, bytes = 0, table = 0, weights = 0;
  char path[480] = {};
};

}  // namespace

void check_same_model(Communicator& comm, const Checkpoint& ckpt) {
  if (comm.size() <= 1) return;
  const std::vector<std::string> names = ckpt.tensor_names();
  std::vector<uint64_t> per_tensor;
  Summary mine;
  mine.tensors = names.size();
  mine.bytes = ckpt.total_bytes();
  mine.table = kFnvBasis;
  mine.weights = kFnvBasis;
  for (const std::string& name : names) {
    const TensorView* t = ckpt.peek(name);
    mine.table = fnv1a(mine.table, name.data(), name.size() + 1);
    mine.table = fnv1a(mine.table, &t->dtype, sizeof(t->dtype));
    mine.table = fnv1a(mine.table, t->shape.data(), t->shape.size() * sizeof(int64_t));
    per_tensor.push_back(sample_hash(*t));
    mine.weights = fnv1a(mine.weights, &per_tensor.back(), sizeof(uint64_t));
  }
  std::strncpy(mine.path, ckpt.path().c_str(), sizeof(mine.path) - 1);

  std::vector<Summary> all(static_cast<size_t>(comm.size()));
  comm.all_gather(&mine, sizeof(Summary), all.data());
  const Summary& root = all[0];
  for (size_t r = 1; r < all.size(); ++r) {
    const Summary& s = all[r];
    const std::string who = detail::concat("rank ", r, " loads ", s.path, " but rank 0 loads ", root.path, ": ");
    if (s.tensors != root.tensors)
      fail(who, s.tensors, " tensors against ", root.tensors, "; every rank must map the same checkpoint");
    if (s.table != root.table)
      fail(who, "their tensor tables (names, dtypes, shapes) differ; every rank must map the same checkpoint");
  }
  if (std::all_of(all.begin(), all.end(), [&](const Summary& s) { return s.weights == root.weights; })) {
    comm.reset_stats();  // the statistics are the forwards'
    return;
  }
  // Same tables, different bytes: name the first tensor that differs from rank 0's.
  std::vector<uint64_t> root_tensors = per_tensor;
  comm.broadcast(root_tensors.data(), root_tensors.size() * sizeof(uint64_t), 0);
  int64_t first = -1;
  for (size_t i = 0; i < per_tensor.size() && first < 0; ++i)
    if (per_tensor[i] != root_tensors[i]) first = static_cast<int64_t>(i);
  std::vector<int64_t> firsts(all.size());
  comm.all_gather(&first, sizeof(first), firsts.data());
  for (size_t r = 1; r < all.size(); ++r)
    if (firsts[r] >= 0)
      fail("rank ", r, " loads ", all[r].path, " but rank 0 loads ", root.path, ": the weights differ, first in ",
           names[static_cast<size_t>(firsts[r])], "; every rank must map the same checkpoint");
}

}  // namespace zen::dist
