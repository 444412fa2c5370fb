// Python `str` semantics over UTF-8 bytes, for the chat-template interpreter. Python strings
// are sequences of code points, so lengths, indices, slices and strip sets count code points.
// Bytes that are not valid UTF-8 decode to U+DC80..U+DCFF (Python's "surrogateescape") and
// encode back to the same byte, so no input is ever lost or rejected.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace zen::jinja {

std::u32string decode_utf8(std::string_view bytes);
std::string encode_utf8(std::u32string_view code_points);
void append_utf8(std::string& out, char32_t cp);
size_t code_point_count(std::string_view bytes);
bool is_ascii(std::string_view bytes);

bool is_space(char32_t cp);      // str.isspace(): also what Python's regex \s matches
bool is_printable(char32_t cp);  // str.isprintable() (approximate outside common blocks)
bool is_alpha(char32_t cp);      // approximate outside ASCII / Latin / Greek / Cyrillic
bool is_digit(char32_t cp);      // ASCII digits only
bool is_upper(char32_t cp);
bool is_lower(char32_t cp);
// Case mapping for ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic; others unchanged.
char32_t to_upper(char32_t cp);
char32_t to_lower(char32_t cp);

std::string str_upper(std::string_view s);  // str.upper() ("ß" becomes "SS" as in Python)
std::string str_lower(std::string_view s);
std::string str_capitalize(std::string_view s);  // first upper, rest lower
std::string str_title(std::string_view s);       // Python str.title()

// Strip: with no chars (nullptr) strips Python whitespace; else any code point of *chars.
enum class StripSide { kBoth, kLeft, kRight };
std::string str_strip(std::string_view s, const std::string* chars, StripSide side);

}  // namespace zen::jinja
