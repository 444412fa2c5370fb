#include "tokenizer/unicode.h"

#include <algorithm>
#include <unordered_map>
#include <vector>

#include "tokenizer/unicode_tables.h"

namespace zen::unicode {
namespace {

using unicode_tables::CodepointRange;

struct RawDecode {
  uint32_t cp;
  uint32_t len;
  bool valid;
  bool truncated;  // ill-formed only because the input ended early
};

// Decodes per the Unicode well-formed byte sequence table (Table 3-7).
RawDecode raw_decode(std::string_view s, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const uint8_t b0 = byte(pos);
  if (b0 < 0x80) return {b0, 1, true, false};
  uint32_t need;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  uint32_t cp;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1, cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2, cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3, cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {kInvalidBase + b0, 1, false, false};
  }
  for (uint32_t k = 1; k <= need; ++k) {
    if (pos + k >= s.size()) return {kInvalidBase + b0, k, false, true};
    const uint8_t b = byte(pos + k);
    const uint8_t min = k == 1 ? lo : 0x80, max = k == 1 ? hi : 0xBF;
    if (b < min || b > max) return {kInvalidBase + b0, k, false, false};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, need + 1, true, false};
}

bool in_ranges(const CodepointRange* ranges, size_t n, uint32_t cp) {
  const CodepointRange* end = ranges + n;
  const CodepointRange* it = std::upper_bound(
      ranges, end, cp, [](uint32_t v, const CodepointRange& r) { return v < r.first; });
  return it != ranges && cp <= (it - 1)->last;
}

bool is_white_space(uint32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

uint8_t compute_flags(uint32_t cp) {
  namespace t = unicode_tables;
  uint8_t f = 0;
  if (in_ranges(t::kLetterRanges, t::kLetterRanges_size, cp)) f |= kLetter;
  if (in_ranges(t::kNumberRanges, t::kNumberRanges_size, cp)) f |= kNumber;
  if (in_ranges(t::kMarkRanges, t::kMarkRanges_size, cp)) f |= kMark;
  if (is_white_space(cp)) f |= kWhitespace;
  if (in_ranges(t::kNfcQuickCheckRanges, t::kNfcQuickCheckRanges_size, cp)) f |= kNfcCheck;
  return f;
}

// Flags of the Basic Multilingual Plane, built once (64 KiB); other planes search the ranges.
const std::vector<uint8_t>& bmp_flags() {
  static const std::vector<uint8_t> table = [] {
    std::vector<uint8_t> t(0x10000);
    for (uint32_t cp = 0; cp < 0x10000; ++cp) t[cp] = compute_flags(cp);
    return t;
  }();
  return table;
}

// Hangul syllable composition constants (Unicode chapter 3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr uint32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

const unicode_tables::Decomposition* find_decomposition(uint32_t cp) {
  namespace t = unicode_tables;
  const auto* end = t::kDecompositions + t::kDecompositions_size;
  const auto* it = std::lower_bound(
      t::kDecompositions, end, cp,
      [](const unicode_tables::Decomposition& d, uint32_t v) { return d.cp < v; });
  return it != end && it->cp == cp ? it : nullptr;
}

void decompose(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const auto* d = is_invalid(cp) ? nullptr : find_decomposition(cp);
  if (d == nullptr) {
    out.push_back(cp);
    return;
  }
  decompose(d->first, out);
  if (d->second != 0) decompose(d->second, out);
}

uint64_t pair_key(uint32_t a, uint32_t b) { return (static_cast<uint64_t>(a) << 32) | b; }

const std::unordered_map<uint64_t, uint32_t>& composition_map() {
  static const std::unordered_map<uint64_t, uint32_t> map = [] {
    namespace t = unicode_tables;
    std::unordered_map<uint64_t, uint32_t> m;
    m.reserve(t::kDecompositions_size);
    for (size_t i = 0; i < t::kDecompositions_size; ++i) {
      const auto& d = t::kDecompositions[i];
      if (d.primary_composite) m.emplace(pair_key(d.first, d.second), d.cp);
    }
    return m;
  }();
  return map;
}

// The primary composite of a starter and a following character, or 0.
uint32_t compose_pair(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  if (is_invalid(a) || is_invalid(b)) return 0;
  const auto& map = composition_map();
  const auto it = map.find(pair_key(a, b));
  return it == map.end() ? 0 : it->second;
}

uint32_t ccc_of(uint32_t cp) { return is_invalid(cp) ? 0 : combining_class(cp); }

}  // namespace

Decoded decode_utf8(std::string_view s, size_t pos) {
  const RawDecode d = raw_decode(s, pos);
  return {d.cp, d.len};
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

uint8_t char_flags(uint32_t cp) {
  if (cp < 0x10000) return bmp_flags()[cp];
  if (is_invalid(cp)) return 0;
  return compute_flags(cp);
}

uint32_t combining_class(uint32_t cp) {
  namespace t = unicode_tables;
  if (cp < 0x300) return 0;
  const auto* end = t::kCombiningClassRanges + t::kCombiningClassRanges_size;
  const auto* it = std::upper_bound(
      t::kCombiningClassRanges, end, cp,
      [](uint32_t v, const unicode_tables::CombiningClassRange& r) { return v < r.first; });
  if (it == t::kCombiningClassRanges || cp > (it - 1)->last) return 0;
  return (it - 1)->combining_class;
}

bool is_nfc_quick(std::string_view s) {
  for (size_t pos = 0; pos < s.size();) {
    if (static_cast<uint8_t>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const RawDecode d = raw_decode(s, pos);
    if (d.valid && (char_flags(d.cp) & kNfcCheck)) return false;
    pos += d.len;
  }
  return true;
}

std::string nfc(std::string_view s) {
  if (is_nfc_quick(s)) return std::string(s);
  // Canonical decomposition; ill-formed bytes become kInvalidBase + byte (one per byte).
  std::vector<uint32_t> cps;
  cps.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    const RawDecode d = raw_decode(s, pos);
    if (d.valid) {
      decompose(d.cp, cps);
    } else {
      for (uint32_t k = 0; k < d.len; ++k) cps.push_back(kInvalidBase + static_cast<uint8_t>(s[pos + k]));
    }
    pos += d.len;
  }
  // Canonical ordering: stable sort of each run of non-starters by combining class.
  for (size_t i = 1; i < cps.size(); ++i) {
    const uint32_t cc = ccc_of(cps[i]);
    if (cc == 0) continue;
    size_t j = i;
    while (j > 0 && ccc_of(cps[j - 1]) > cc) {
      std::swap(cps[j - 1], cps[j]);
      --j;
    }
  }
  // Canonical composition: a character joins the last starter unless blocked.
  std::vector<uint32_t> out;
  out.reserve(cps.size());
  long starter = -1;
  uint32_t last_cc = 0;
  for (uint32_t cp : cps) {
    const uint32_t cc = ccc_of(cp);
    if (starter >= 0) {
      const bool adjacent = out.size() == static_cast<size_t>(starter) + 1;
      if (adjacent || (last_cc != 0 && last_cc < cc)) {
        if (const uint32_t composed = compose_pair(out[starter], cp)) {
          out[starter] = composed;
          continue;
        }
      }
    }
    if (cc == 0) starter = static_cast<long>(out.size());
    out.push_back(cp);
    last_cc = cc;
  }
  std::string result;
  result.reserve(s.size());
  for (uint32_t cp : out) {
    if (is_invalid(cp)) {
      result.push_back(static_cast<char>(cp - kInvalidBase));
    } else {
      append_utf8(result, cp);
    }
  }
  return result;
}

size_t complete_utf8_prefix(std::string_view s) {
  // Only the last three bytes can begin an unfinished sequence.
  const size_t start = s.size() > 3 ? s.size() - 3 : 0;
  for (size_t pos = start; pos < s.size(); ++pos) {
    const uint8_t b = static_cast<uint8_t>(s[pos]);
    if (b < 0xC2 || b > 0xF4) continue;  // not a multi-byte lead
    const RawDecode d = raw_decode(s, pos);
    if (d.truncated) return pos;
  }
  return s.size();
}

std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    const RawDecode d = raw_decode(s, pos);
    if (d.valid) {
      out.append(s.substr(pos, d.len));
    } else {
      out.append("\xEF\xBF\xBD");
    }
    pos += d.len;
  }
  return out;
}

}  // namespace zen::unicode
