#include "cli/flags.h"

#include <cctype>
#include <cstdio>
#include <cmath>
#include <sstream>

#include "base/error.h"

namespace zen::cli {

bool wants_help(const Flags& f) {
  if (!f.flag("help")) return false;
  std::fputs(f.usage().c_str(), stdout);
  return true;
}

const FlagSpec* Flags::find(const std::string& name) const {
  for (const auto& s : specs_)
    if (s.name == name) return &s;
  return nullptr;
}

std::string Flags::usage() const {
  std::ostringstream os;
  os << "usage: zen " << command_ << " [flags]\n";
  for (const auto& s : specs_) {
    os << "  --" << s.name;
    if (s.kind == FlagKind::Choice) {
      os << " {";
      for (size_t i = 0; i < s.choices.size(); ++i) os << (i ? "," : "") << s.choices[i];
      os << "}";
    } else if (s.kind != FlagKind::Bool) {
      os << (s.kind == FlagKind::Int ? " N" : s.kind == FlagKind::Float ? " X" : s.kind == FlagKind::OptionalString ? " [VALUE]" : " VALUE");
    }
    os << "\n      " << s.help << "\n";
  }
  return os.str();
}

void Flags::parse(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0 || arg == "--") {
      positional_.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2), value;
    bool inline_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    const FlagSpec* spec = find(name);
    if (spec == nullptr) fail("unknown flag --", name, " for 'zen ", command_, "'\n", usage());
    if (spec->kind == FlagKind::Bool) {
      if (inline_value) fail("--", name, " takes no value");
      values_[name] = "1";
      continue;
    }
    if (spec->kind == FlagKind::OptionalString && !inline_value) {
      values_[name] = i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0 ? argv[++i] : "";
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= argc) fail("--", name, " needs a value (", spec->help, ")");
      value = argv[++i];
    }
    if (spec->kind == FlagKind::Choice) {
      bool ok = false;
      for (const auto& c : spec->choices) ok = ok || c == value;
      if (!ok) {
        std::string list;
        for (const auto& c : spec->choices) list += (list.empty() ? "" : ", ") + c;
        fail("--", name, " must be one of {", list, "}, got '", value, "'");
      }
    }
    values_[name] = value;
    if (spec->kind == FlagKind::Int) (void)integer(name, 0);  // validate now
    if (spec->kind == FlagKind::Float) (void)number(name, 0);
  }
}

std::string Flags::str(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

int64_t Flags::integer(const std::string& name, int64_t fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(it->second, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != it->second.size()) fail("--", name, " expects an integer, got '", it->second, "'");
  return v;
}

double Flags::number(const std::string& name, double fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(it->second, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != it->second.size() || !std::isfinite(v))
    fail("--", name, " expects a number, got '", it->second, "'");
  return v;
}

int64_t parse_byte_size(const std::string& flag, const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = used == 0 ? "?" : text.substr(used);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "K" || unit == "KB" || unit == "KIB") scale = 1024.0;
  else if (unit == "M" || unit == "MB" || unit == "MIB") scale = 1024.0 * 1024;
  else if (unit == "G" || unit == "GB" || unit == "GIB") scale = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "TB" || unit == "TIB") scale = 1024.0 * 1024 * 1024 * 1024;
  if (scale == 0 || !(value > 0) || value * scale > 9e18)
    fail("--", flag, " expects a size such as 4G, 512M, 1.5T or a byte count, got '", text, "'");
  return static_cast<int64_t>(value * scale);
}

}  // namespace zen::cli
