#include "tokenizer/string_table.h"

#include <limits>

#include "base/error.h"

namespace zen {

void StringTable::set(size_t i, std::string_view text) {
  ZEN_CHECK(i < spans_.size(), "string table index ", i, " out of range ", spans_.size());
  constexpr size_t kMax = std::numeric_limits<uint32_t>::max();
  if (text.size() > kMax - arena_.size())
    fail("tokenizer: the vocabulary's texts exceed ", kMax, " bytes");
  const auto offset = static_cast<uint32_t>(arena_.size());
  // append() copies before it frees the old buffer, so a view of our own bytes stays valid.
  arena_.append(text.data(), text.size());
  spans_[i] = {offset, static_cast<uint32_t>(text.size())};
}

}  // namespace zen
