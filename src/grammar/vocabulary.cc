#include "grammar/vocabulary.h"

#include <algorithm>

#include "base/error.h"
#include "tokenizer/tokenizer.h"

namespace zen::grammar {

Vocabulary::Vocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> stop_ids)
    : bytes_(std::move(token_bytes)), stop_ids_(std::move(stop_ids)) {
  for (int32_t id : stop_ids_) ZEN_CHECK(id >= 0 && id < size(), id);
  for (int32_t id : stop_ids_) bytes_[static_cast<size_t>(id)].clear();
  for (auto& b : bytes_)
    if (b.size() > 255) b.clear();
  for (int32_t i = 0; i < size(); ++i)
    if (!bytes_[static_cast<size_t>(i)].empty()) sorted_.push_back(i);
  std::sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) {
    return bytes_[static_cast<size_t>(a)] < bytes_[static_cast<size_t>(b)];
  });
  // Depth-first trie: one node per distinct prefix, in sorted order. open[d] is the node at
  // depth d+1 on the current path.
  std::vector<int32_t> open;
  const std::string* prev = nullptr;
  for (size_t i = 0; i < sorted_.size(); ++i) {
    const std::string& cur = bytes_[static_cast<size_t>(sorted_[i])];
    size_t lcp = 0;
    if (prev)
      while (lcp < prev->size() && lcp < cur.size() && (*prev)[lcp] == cur[lcp]) ++lcp;
    while (open.size() > lcp) {  // close nodes off the shared prefix
      Node& n = nodes_[static_cast<size_t>(open.back())];
      n.end = static_cast<int32_t>(nodes_.size());
      n.tok_end = static_cast<int32_t>(i);
      open.pop_back();
    }
    for (size_t d = lcp; d < cur.size(); ++d) {
      open.push_back(static_cast<int32_t>(nodes_.size()));
      nodes_.push_back(Node{0, static_cast<int32_t>(i), 0, 0, static_cast<uint8_t>(cur[d]), static_cast<uint8_t>(d + 1)});
    }
    ++nodes_[static_cast<size_t>(open.back())].own_count;  // equal strings share a node
    prev = &cur;
  }
  while (!open.empty()) {
    Node& n = nodes_[static_cast<size_t>(open.back())];
    n.end = static_cast<int32_t>(nodes_.size());
    n.tok_end = static_cast<int32_t>(sorted_.size());
    open.pop_back();
  }
}

std::shared_ptr<const TokenClasses> Vocabulary::shared_classes(const std::string& key) const {
  std::lock_guard lock(mu_);
  auto it = shared_.find(key);
  return it == shared_.end() ? nullptr : it->second;
}

void Vocabulary::share_classes(const std::string& key, std::shared_ptr<const TokenClasses> classes) const {
  std::lock_guard lock(mu_);
  const size_t bytes = classes->bytes() + key.size();
  if (shared_bytes_ + bytes > kMaxSharedBytes) {  // full: start over (grammars keep their own)
    shared_.clear();
    shared_bytes_ = 0;
  }
  if (shared_.emplace(key, std::move(classes)).second) shared_bytes_ += bytes;
}

std::shared_ptr<const Vocabulary> Vocabulary::from_tokenizer(const Tokenizer& tok, int32_t vocab_size) {
  const int32_t n = std::max(vocab_size, tok.vocab_size());
  std::vector<std::string> bytes(static_cast<size_t>(n));
  for (int32_t i = 0; i < tok.vocab_size(); ++i)
    if (!tok.is_special(i)) bytes[static_cast<size_t>(i)] = tok.token_bytes(i);
  std::vector<int32_t> stops;
  for (int32_t id : tok.stop_ids())
    if (id >= 0 && id < n) stops.push_back(id);
  if (tok.eos_id() >= 0 && tok.eos_id() < n && std::find(stops.begin(), stops.end(), tok.eos_id()) == stops.end())
    stops.push_back(tok.eos_id());
  return std::make_shared<const Vocabulary>(std::move(bytes), std::move(stops));
}

}  // namespace zen::grammar
