// Command-line flags of one subcommand: declared with their kind, parsed strictly. Errors
// name the flag and what it accepts.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace zen::cli {

// OptionalString: "--name", "--name=VALUE" or "--name VALUE" (the next argument, unless it is
// a flag); bare, its value is "".
enum class FlagKind { String, Int, Float, Bool, Choice, OptionalString };

struct FlagSpec {
  std::string name;  // without dashes
  FlagKind kind;
  std::string help;
  std::vector<std::string> choices;  // for Choice
};

class Flags {
 public:
  Flags(std::string command, std::vector<FlagSpec> specs) : command_(std::move(command)), specs_(std::move(specs)) {}
  // Parses argv[first..argc); positional arguments are collected. Throws zen::Error.
  void parse(int argc, char** argv, int first);
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  std::string str(const std::string& name, const std::string& fallback = "") const;
  int64_t integer(const std::string& name, int64_t fallback) const;
  double number(const std::string& name, double fallback) const;
  bool flag(const std::string& name) const { return has(name); }
  const std::vector<std::string>& positional() const { return positional_; }
  std::string usage() const;

 private:
  const FlagSpec* find(const std::string& name) const;
  std::string command_;
  std::vector<FlagSpec> specs_;
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
};

inline const FlagSpec kHelpFlag{"help", FlagKind::Bool, "show this help", {}};
// With --help: prints the usage and returns true (the command then exits 0).
bool wants_help(const Flags& f);

// "8589934592", "8G", "512MiB", "1.5GB", "1.5T" (binary units) -> bytes; `flag` names the
// flag in the error.
int64_t parse_byte_size(const std::string& flag, const std::string& text);

}  // namespace zen::cli
