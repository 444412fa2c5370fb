// Small helpers for the streaming parsers: finding a tag in text that may end mid-tag.
#pragma once
#include <algorithm>
#include <string>
#include <string_view>

namespace zen::server {

// Length of the longest suffix of text that is a proper prefix of tag: those bytes must be
// held back, since the next piece of text may complete the tag.
inline size_t partial_tag_suffix(std::string_view text, std::string_view tag) {
  const size_t max_len = std::min(tag.size() - 1, text.size());
  for (size_t len = max_len; len > 0; --len)
    if (text.substr(text.size() - len) == tag.substr(0, len)) return len;
  return 0;
}

// True when text could still grow into something starting with tag (text is a prefix of tag
// or tag a prefix of text).
inline bool may_start_with(std::string_view text, std::string_view tag) {
  const size_t n = std::min(text.size(), tag.size());
  return text.substr(0, n) == tag.substr(0, n);
}

}  // namespace zen::server
