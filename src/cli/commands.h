// The `zen` subcommands. Each returns the process exit code; errors are thrown as zen::Error.
#pragma once
#include <string>

namespace zen::cli {

int run_command(int argc, char** argv);
int tokenize_command(int argc, char** argv);
int perplexity_command(int argc, char** argv);
int inspect_command(int argc, char** argv);
int bench_command(int argc, char** argv);
int serve_command(int argc, char** argv);
int plan_command(int argc, char** argv);
int grammar_command(int argc, char** argv);  // grammar.cc: compile, time and check constrained decoding  // plan.cc: TP / EP / PP layouts over N nodes

// --model, or the installed default model (ZEN_MODEL, then models/default/ beside the
// binary's tree). Throws with setup instructions when none is found.
std::string resolve_model_path(const std::string& flag_value);

class Flags;
// --threads: 0 (all cores) when absent; else 1 .. 4 x the cores, refused outside that (a
// thread pool of thousands only slows the machine down).
int threads_flag(const Flags& f);

}  // namespace zen::cli
