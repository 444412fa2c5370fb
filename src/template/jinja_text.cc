#include "template/jinja_text.h"

#include "tokenizer/unicode.h"

namespace zen::jinja {
namespace {

constexpr char32_t kEscapeBase = 0xDC00;  // invalid byte b decodes to U+DC00 + b

bool is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// Length of the valid UTF-8 sequence at bytes[i], or 0 if it is not valid.
size_t valid_sequence_length(std::string_view bytes, size_t i) {
  const auto b0 = static_cast<unsigned char>(bytes[i]);
  if (b0 < 0x80) return 1;
  size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no UTF-16 surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + len > bytes.size()) return 0;
  const auto b1 = static_cast<unsigned char>(bytes[i + 1]);
  if (b1 < lo || b1 > hi) return 0;
  for (size_t k = 2; k < len; ++k)
    if (!is_continuation(static_cast<unsigned char>(bytes[i + k]))) return 0;
  return len;
}

// Decodes one code point at bytes[i] and advances i.
char32_t next_code_point(std::string_view bytes, size_t& i) {
  const size_t len = valid_sequence_length(bytes, i);
  const auto b0 = static_cast<unsigned char>(bytes[i]);
  if (len == 0) {
    ++i;
    return kEscapeBase + b0;
  }
  char32_t cp = 0;
  if (len == 1) {
    cp = b0;
  } else {
    cp = b0 & (0x7F >> len);
    for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(bytes[i + k]) & 0x3F);
  }
  i += len;
  return cp;
}

// Letters with simple case pairs: returns the other case or the input.
char32_t latin_ext_a_other(char32_t cp) {
  // U+0100..U+0137 and U+014A..U+0177: even = upper; U+0139..U+0148, U+0179..U+017E: odd = upper.
  if ((cp >= 0x100 && cp <= 0x137) || (cp >= 0x14A && cp <= 0x177)) return cp ^ 1;
  if ((cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E)) return (cp & 1) ? cp + 1 : cp - 1;
  return cp;
}

}  // namespace

std::u32string decode_utf8(std::string_view bytes) {
  std::u32string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) out.push_back(next_code_point(bytes, i));
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  // Escaped raw bytes (invalid UTF-8 kept verbatim) go back out as the byte itself.
  if (cp >= kEscapeBase + 0x80 && cp <= kEscapeBase + 0xFF) {
    out.push_back(static_cast<char>(cp - kEscapeBase));
  } else {
    unicode::append_utf8(out, static_cast<uint32_t>(cp));
  }
}

std::string encode_utf8(std::u32string_view code_points) {
  std::string out;
  out.reserve(code_points.size());
  for (char32_t cp : code_points) append_utf8(out, cp);
  return out;
}

size_t code_point_count(std::string_view bytes) {
  size_t n = 0;
  for (size_t i = 0; i < bytes.size(); ++n) next_code_point(bytes, i);
  return n;
}

bool is_ascii(std::string_view bytes) {
  for (char c : bytes)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

bool is_space(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool is_printable(char32_t cp) {
  if (cp == ' ') return true;
  if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) return false;
  if (is_space(cp)) return false;
  if ((cp >= 0x200B && cp <= 0x200F) || (cp >= 0x202A && cp <= 0x202E) ||
      (cp >= 0x2060 && cp <= 0x206F) || cp == 0xFEFF || (cp >= 0xFFF9 && cp <= 0xFFFB))
    return false;
  if (cp >= 0xD800 && cp <= 0xDFFF) return false;  // surrogates (and escaped bytes)
  if (cp >= 0xE000 && cp <= 0xF8FF) return false;  // private use
  if (cp > 0x10FFFF || (cp & 0xFFFE) == 0xFFFE) return false;
  return true;
}

bool is_upper(char32_t cp) { return to_lower(cp) != cp; }
bool is_lower(char32_t cp) { return to_upper(cp) != cp || cp == 0xDF; }
bool is_alpha(char32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return is_upper(cp) || is_lower(cp) || (cp >= 0x4E00 && cp <= 0x9FFF) ||  // CJK
         (cp >= 0x3040 && cp <= 0x30FF) || (cp >= 0xAC00 && cp <= 0xD7A3);  // kana, hangul
}
bool is_digit(char32_t cp) { return cp >= '0' && cp <= '9'; }

char32_t to_upper(char32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') ? cp - 32 : cp;
  if (cp >= 0xE0 && cp <= 0xFE && cp != 0xF7) return cp - 32;
  if (cp == 0xFF) return 0x178;
  if (cp == 0xB5) return 0x39C;
  if (cp >= 0x100 && cp <= 0x17F) {
    const char32_t other = latin_ext_a_other(cp);
    const bool cp_is_upper = (cp <= 0x137 || (cp >= 0x14A && cp <= 0x177)) ? (cp % 2 == 0) : (cp % 2 == 1);
    return (other != cp && !cp_is_upper) ? other : cp;
  }
  if (cp >= 0x3B1 && cp <= 0x3C9) return cp == 0x3C2 ? 0x3A3 : cp - 32;
  if (cp >= 0x430 && cp <= 0x44F) return cp - 32;
  if (cp >= 0x450 && cp <= 0x45F) return cp - 80;
  return cp;
}

char32_t to_lower(char32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  if (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7) return cp + 32;
  if (cp == 0x178) return 0xFF;
  if (cp >= 0x100 && cp <= 0x17F) {
    const char32_t other = latin_ext_a_other(cp);
    const bool cp_is_upper = (cp <= 0x137 || (cp >= 0x14A && cp <= 0x177)) ? (cp % 2 == 0) : (cp % 2 == 1);
    return (other != cp && cp_is_upper) ? other : cp;
  }
  if (cp >= 0x391 && cp <= 0x3A9 && cp != 0x3A2) return cp + 32;
  if (cp >= 0x410 && cp <= 0x42F) return cp + 32;
  if (cp >= 0x400 && cp <= 0x40F) return cp + 80;
  return cp;
}

std::string str_upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const char32_t cp = next_code_point(s, i);
    if (cp == 0xDF) {
      out += "SS";
    } else {
      append_utf8(out, to_upper(cp));
    }
  }
  return out;
}

std::string str_lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) append_utf8(out, to_lower(next_code_point(s, i)));
  return out;
}

std::string str_capitalize(std::string_view s) {
  std::string out;
  bool first = true;
  for (size_t i = 0; i < s.size();) {
    const char32_t cp = next_code_point(s, i);
    append_utf8(out, first ? to_upper(cp) : to_lower(cp));
    first = false;
  }
  return out;
}

std::string str_title(std::string_view s) {
  std::string out;
  bool previous_cased = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t cp = next_code_point(s, i);
    append_utf8(out, previous_cased ? to_lower(cp) : to_upper(cp));
    previous_cased = is_upper(cp) || is_lower(cp);
  }
  return out;
}

std::string str_strip(std::string_view s, const std::string* chars, StripSide side) {
  const std::u32string cps = decode_utf8(s);
  const std::u32string set = chars ? decode_utf8(*chars) : std::u32string();
  auto strippable = [&](char32_t cp) {
    return chars ? set.find(cp) != std::u32string::npos : is_space(cp);
  };
  size_t begin = 0, end = cps.size();
  if (side != StripSide::kRight)
    while (begin < end && strippable(cps[begin])) ++begin;
  if (side != StripSide::kLeft)
    while (end > begin && strippable(cps[end - 1])) --end;
  return encode_utf8(std::u32string_view(cps).substr(begin, end - begin));
}

}  // namespace zen::jinja
