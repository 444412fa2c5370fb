// JSON Schema numbers: exact decimal bounds (past 64 bits, fractional ones included) turned
// into digit-by-digit ranges (the converter is json_schema_converter.h).
#include <algorithm>
#include <string>
#include <vector>
#include <optional>

#include "base/error.h"
#include "grammar/json_schema_converter.h"

namespace zen::grammar::json_schema_internal {

int compare_magnitude(const Decimal& a, const Decimal& b) {
  if (a.whole.size() != b.whole.size()) return a.whole.size() < b.whole.size() ? -1 : 1;
  if (int c = a.whole.compare(b.whole)) return c < 0 ? -1 : 1;
  // Without trailing zeros, fraction digit strings order like their values.
  if (int c = a.frac.compare(b.frac)) return c < 0 ? -1 : 1;
  return 0;
}

int compare(const Decimal& a, const Decimal& b) {
  if (a.neg != b.neg) return a.neg ? -1 : 1;
  const int m = compare_magnitude(a, b);
  return a.neg ? -m : m;
}

// Parses JSON number text ("-1.25e-3").
std::optional<Decimal> parse_decimal(std::string_view t) {
  Decimal d;
  size_t i = 0;
  if (i < t.size() && t[i] == '-') d.neg = true, ++i;
  std::string digits;
  int64_t point = 0;
  for (; i < t.size() && std::isdigit(static_cast<unsigned char>(t[i])); ++i) digits += t[i], ++point;
  if (i < t.size() && t[i] == '.')
    for (++i; i < t.size() && std::isdigit(static_cast<unsigned char>(t[i])); ++i) digits += t[i];
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    const int64_t exp = std::strtoll(std::string(t.substr(i + 1)).c_str(), nullptr, 10);
    if (exp > static_cast<int64_t>(kMaxDigits) || exp < -static_cast<int64_t>(kMaxDigits)) return std::nullopt;
    point += exp;
  }
  if (digits.empty()) return std::nullopt;
  const auto n = static_cast<int64_t>(digits.size());
  if (point <= 0) {
    d.whole = "0";
    d.frac = std::string(static_cast<size_t>(-point), '0') + digits;
  } else if (point >= n) {
    d.whole = digits + std::string(static_cast<size_t>(point - n), '0');
  } else {
    d.whole = digits.substr(0, static_cast<size_t>(point));
    d.frac = digits.substr(static_cast<size_t>(point));
  }
  d.whole.erase(0, std::min(d.whole.find_first_not_of('0'), d.whole.size() - 1));
  while (!d.frac.empty() && d.frac.back() == '0') d.frac.pop_back();
  if (d.whole == "0" && d.frac.empty()) d.neg = false;
  if (d.whole.size() > kMaxDigits || d.frac.size() > kMaxDigits) return std::nullopt;
  return d;
}

std::string number_text(const Json& v) {
  if (v.is_number_unsigned()) return std::to_string(v.get<uint64_t>());
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  const double x = v.get<double>();
  return std::isfinite(x) ? v.dump() : std::string();  // nlohmann writes the shortest round trip
}

namespace {

std::string add_one(std::string m) {  // magnitude + 1
  for (size_t i = m.size(); i-- > 0;) {
    if (m[i] != '9') {
      ++m[i];
      return m;
    }
    m[i] = '0';
  }
  return "1" + m;
}

std::string sub_one(std::string m) {  // magnitude - 1, m > 0
  for (size_t i = m.size(); i-- > 0;) {
    if (m[i] != '0') {
      --m[i];
      break;
    }
    m[i] = '9';
  }
  m.erase(0, std::min(m.find_first_not_of('0'), m.size() - 1));
  return m;
}

}  // namespace

Decimal integer(bool neg, std::string mag) {
  Decimal d;
  d.neg = neg && mag != "0";
  d.whole = std::move(mag);
  return d;
}

// The next integer up / down from an integer.
Decimal succ(const Decimal& d) { return d.neg ? integer(true, sub_one(d.whole)) : integer(false, add_one(d.whole)); }
Decimal pred(const Decimal& d) {
  if (d.neg) return integer(true, add_one(d.whole));
  return d.whole == "0" ? integer(true, "1") : integer(false, sub_one(d.whole));
}

// The least integer >= d (> d when exclusive), and the greatest <= d (< d).
Decimal int_at_least(const Decimal& d, bool exclusive) {
  if (d.frac.empty()) return exclusive ? succ(d) : d;
  return d.neg ? integer(true, d.whole) : integer(false, add_one(d.whole));
}
Decimal int_at_most(const Decimal& d, bool exclusive) {
  if (d.frac.empty()) return exclusive ? pred(d) : d;
  return d.neg ? integer(true, add_one(d.whole)) : integer(false, d.whole);
}

// ---- numbers ---------------------------------------------------------------------------------

Decimal Converter::decimal_of(const Json& v, const std::string& kw, const std::string& path) const {
  const auto d = parse_decimal(number_text(v));
  if (!d) throw SchemaError(kw, child(path, kw), "'" + kw + "' must be a finite number of at most 400 digits");
  return *d;
}

// The tighter of minimum and exclusiveMinimum.
std::optional<Bound> Converter::lower_bound(const Json& s, const std::string& path) const {
  std::optional<Bound> out;
  if (s.contains("minimum")) out = Bound{decimal_of(s["minimum"], "minimum", path), false};
  if (s.contains("exclusiveMinimum")) {
    const Bound x{decimal_of(s["exclusiveMinimum"], "exclusiveMinimum", path), true};
    if (!out || compare(x.value, out->value) >= 0) out = x;
  }
  return out;
}

std::optional<Bound> Converter::upper_bound(const Json& s, const std::string& path) const {
  std::optional<Bound> out;
  if (s.contains("maximum")) out = Bound{decimal_of(s["maximum"], "maximum", path), false};
  if (s.contains("exclusiveMaximum")) {
    const Bound x{decimal_of(s["exclusiveMaximum"], "exclusiveMaximum", path), true};
    if (!out || compare(x.value, out->value) <= 0) out = x;
  }
  return out;
}

ExprId Converter::integer_expr(const Flat& f) {
  const auto lo = lower_bound(f.s, f.path);
  const auto hi = upper_bound(f.s, f.path);
  if (!lo && !hi) return b_.ref(integer_rule());
  std::optional<Decimal> a, z;
  if (lo) a = int_at_least(lo->value, lo->exclusive);
  if (hi) z = int_at_most(hi->value, hi->exclusive);
  return int_range(a, z);
}

ExprId Converter::number_expr(const Flat& f) {
  const auto lo = lower_bound(f.s, f.path);
  const auto hi = upper_bound(f.s, f.path);
  if (!lo && !hi) return b_.ref(number_rule());
  return num_range(lo, hi);
}

// Integers in [lo, hi] in canonical spelling: negatives as "-" and a magnitude range.
ExprId Converter::int_range(const std::optional<Decimal>& lo, const std::optional<Decimal>& hi) {
  if (lo && hi && compare(*lo, *hi) > 0) return nothing();
  std::vector<ExprId> alts;
  if (!lo || lo->neg) {  // negative part: magnitudes in [max(1, -hi), -lo]
    std::string from = hi && hi->neg ? hi->whole : "1";
    std::optional<std::string> to;
    if (lo) to = lo->whole;
    alts.push_back(b_.seq({lit("-"), uint_range(from, to)}));
  }
  if (!hi || !hi->neg) {
    std::optional<std::string> to;
    if (hi) to = hi->whole;
    alts.push_back(uint_range(lo && !lo->neg ? lo->whole : "0", to));
  }
  return b_.alt(std::move(alts));
}

// Canonical non-negative integers from lo to hi (none: unbounded), by digit count: the
// lengths strictly between the bounds' lengths are free, the two edge lengths are compared
// digit by digit.
ExprId Converter::uint_range(const std::string& lo, const std::optional<std::string>& hi) {
  const size_t la = lo.size();
  if (hi && (hi->size() < la || (hi->size() == la && *hi < lo))) return nothing();
  if (hi && hi->size() == la) return same_length(lo, *hi, 0, true, true);
  std::vector<ExprId> alts{same_length(lo, std::string(la, '9'), 0, true, true)};
  const ExprId lead = range('1', '9');
  if (!hi) {
    alts.push_back(b_.seq({lead, b_.repeat(digit(), static_cast<int32_t>(la), -1)}));
    return b_.alt(std::move(alts));
  }
  const size_t lb = hi->size();
  if (lb - la >= 2)
    alts.push_back(b_.seq({lead, b_.repeat(digit(), static_cast<int32_t>(la), static_cast<int32_t>(lb - 2))}));
  alts.push_back(same_length("1" + std::string(lb - 1, '0'), *hi, 0, true, true));
  return b_.alt(std::move(alts));
}

// Digit strings of lo's length between lo and hi, from position i; tlo / thi: the digits so
// far equal lo's / hi's. Each step leaves at most one tight branch per side: linear size.
ExprId Converter::same_length(const std::string& lo, const std::string& hi, size_t i, bool tlo, bool thi) {
  const size_t n = lo.size();
  if (i == n) return b_.empty();
  const auto rest = static_cast<int32_t>(n - i - 1);
  if (!tlo && !thi) return digits(static_cast<int>(n - i));
  const char l = tlo ? lo[i] : '0', h = thi ? hi[i] : '9';
  if (tlo && thi && l == h) return b_.seq({lit(std::string(1, l)), same_length(lo, hi, i + 1, true, true)});
  std::vector<ExprId> alts;
  if (tlo) alts.push_back(b_.seq({lit(std::string(1, l)), same_length(lo, hi, i + 1, true, false)}));
  const char from = static_cast<char>(tlo ? l + 1 : l), to = static_cast<char>(thi ? h - 1 : h);
  if (from <= to) alts.push_back(b_.seq({range(from, to), b_.repeat(digit(), rest, rest)}));
  if (thi) alts.push_back(b_.seq({lit(std::string(1, h)), same_length(lo, hi, i + 1, false, true)}));
  return b_.alt(std::move(alts));
}

// Numbers in the range written without an exponent: a negative part ("-" and a magnitude,
// zero excluded) and a non-negative part.
ExprId Converter::num_range(const std::optional<Bound>& lo, const std::optional<Bound>& hi) {
  if (lo && hi) {
    const int c = compare(lo->value, hi->value);
    if (c > 0 || (c == 0 && (lo->exclusive || hi->exclusive))) return nothing();
  }
  const Decimal zero;
  std::vector<ExprId> alts;
  if (!lo || lo->value.neg) {
    Bound from{zero, true};  // magnitude > 0, or >= -hi for a negative hi ...
    if (hi && hi->value.neg) {
      from = *hi;
      from.value.neg = false;
    }
    std::optional<Bound> to;  // ... and <= -lo
    if (lo) {
      to = *lo;
      to->value.neg = false;
    }
    alts.push_back(b_.seq({lit("-"), magnitude_range(from, to)}));
  }
  const bool nonneg = !hi || (!hi->value.neg && !(compare(hi->value, zero) == 0 && hi->exclusive));
  if (nonneg) alts.push_back(magnitude_range(lo && !lo->value.neg ? *lo : Bound{zero, false}, hi));
  return b_.alt(std::move(alts));
}

// Non-negative decimals between lo and hi: split on the integer part.
ExprId Converter::magnitude_range(const Bound& lo, const std::optional<Bound>& hi) {
  if (hi) {
    const int c = compare(lo.value, hi->value);
    if (c > 0 || (c == 0 && (lo.exclusive || hi->exclusive))) return nothing();
  }
  const std::string& a = lo.value.whole;
  const Bound lo_frac{Decimal{false, "0", lo.value.frac}, lo.exclusive};
  if (hi && hi->value.whole == a) {
    const Bound hi_frac{Decimal{false, "0", hi->value.frac}, hi->exclusive};
    return b_.seq({lit(a), fraction(lo_frac, hi_frac)});
  }
  std::vector<ExprId> alts{b_.seq({lit(a), fraction(lo_frac, std::nullopt)})};
  const std::string from = add_one(a);
  std::optional<std::string> to;
  if (hi) to = sub_one(hi->value.whole);  // hi's whole part > a here, so > 0
  const ExprId any_fraction = b_.opt(b_.seq({lit("."), more_digits(0, true, digit())}));
  if (!to || !(to->size() < from.size() || (to->size() == from.size() && *to < from)))
    alts.push_back(b_.seq({uint_range(from, to), any_fraction}));
  if (hi) {
    const Bound hi_frac{Decimal{false, "0", hi->value.frac}, hi->exclusive};
    alts.push_back(b_.seq({lit(hi->value.whole), fraction(std::nullopt, hi_frac)}));
  }
  return b_.alt(std::move(alts));
}

// An optional ".digits" whose value 0.digits lies within the bounds (their fraction parts).
ExprId Converter::fraction(const std::optional<Bound>& lo, const std::optional<Bound>& hi) {
  const bool zero_ok =
      (!lo || (lo->value.frac.empty() && !lo->exclusive)) && (!hi || !hi->value.frac.empty() || !hi->exclusive);
  const std::string lf = lo ? lo->value.frac : "", hf = hi ? hi->value.frac : "";
  const ExprId digits_part = fraction_digits(lf, lo && lo->exclusive, hf, hi && hi->exclusive, 0, lo.has_value(),
                                             hi.has_value(), true);
  const ExprId dotted = b_.seq({lit("."), digits_part});
  return zero_ok ? b_.alt({b_.empty(), dotted}) : dotted;
}

// Fraction digit strings from position i; tlo / thi: the digits so far equal the bound's
// (missing bound digits count as 0). need_digit: the empty string is not allowed here.
ExprId Converter::fraction_digits(const std::string& lo, bool lo_excl, const std::string& hi, bool hi_excl, size_t i,
                                  bool tlo, bool thi, bool need_digit) {
  // At most 20 digits, or one past the longer bound's own.
  const size_t cap = std::max(kMaxFractionDigits, std::max(lo.size(), hi.size()) + 1);
  if (tlo && i >= lo.size() && !lo_excl) tlo = false;  // already >= lo whatever follows
  if (thi && i >= hi.size()) {                         // equal to hi: only zeros may follow
    if (hi_excl || tlo) return nothing();
    return more_digits(i, need_digit, lit("0"), cap);
  }
  if (tlo && i >= lo.size() && !thi) {  // equal to an exclusive lo: some nonzero digit must follow
    std::vector<ExprId> alts;
    for (size_t zeros = 0; i + zeros < cap; ++zeros)
      alts.push_back(b_.seq({b_.repeat(lit("0"), static_cast<int32_t>(zeros), static_cast<int32_t>(zeros)), range('1', '9'),
                             more_digits(i + zeros + 1, false, digit(), cap)}));
    return b_.alt(std::move(alts));
  }
  if (!tlo && !thi) return more_digits(i, need_digit, digit(), cap);
  std::vector<ExprId> alts;
  // Ending here is fine unless the digits so far equal lo's (then they are below lo, or
  // equal to an exclusive lo); equal to a prefix of hi is below hi (hi has more digits).
  if (!need_digit && !tlo) alts.push_back(b_.empty());
  const char l = tlo && i < lo.size() ? lo[i] : '0';
  const char h = thi ? hi[i] : '9';
  auto next = [&](bool still_lo, bool still_hi) {
    return fraction_digits(lo, lo_excl, hi, hi_excl, i + 1, still_lo, still_hi, false);
  };
  if (tlo && thi && l == h) {
    alts.push_back(b_.seq({lit(std::string(1, l)), next(true, true)}));
    return b_.alt(std::move(alts));
  }
  if (tlo) alts.push_back(b_.seq({lit(std::string(1, l)), next(true, false)}));
  const char from = static_cast<char>(tlo ? l + 1 : '0'), to = static_cast<char>(thi ? h - 1 : '9');
  if (from <= to) alts.push_back(b_.seq({range(from, to), more_digits(i + 1, false, digit(), cap)}));
  if (thi) alts.push_back(b_.seq({lit(std::string(1, h)), next(false, true)}));
  return b_.alt(std::move(alts));
}

}  // namespace zen::grammar::json_schema_internal
