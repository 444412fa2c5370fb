#include "server/stop_strings.h"

#include <algorithm>

namespace zen::server {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopStringMatcher::push(std::string_view text) {
  if (stopped_) return "";
  held_.append(text);
  // The stop that completes first wins, as it would token by token (ties: the earlier start).
  size_t best = std::string::npos, best_end = std::string::npos;
  for (const auto& s : stops_) {
    const size_t at = held_.find(s);
    if (at == std::string::npos) continue;
    const size_t end = at + s.size();
    if (best == std::string::npos || end < best_end || (end == best_end && at < best)) {
      best = at;
      best_end = end;
      matched_ = s;
    }
  }
  if (best != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, best);
    held_.clear();
    return out;
  }
  const size_t keep = partial_suffix_length();
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopStringMatcher::flush() {
  std::string out;
  out.swap(held_);
  return stopped_ ? "" : out;
}

size_t StopStringMatcher::partial_suffix_length() const {
  size_t longest = 0;
  for (const auto& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, held_.size());
    for (size_t len = max_len; len > longest; --len) {
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        longest = len;
        break;
      }
    }
  }
  return longest;
}

}  // namespace zen::server
