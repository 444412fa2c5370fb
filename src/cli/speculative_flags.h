// Speculative-decoding flags shared by zen run, serve and bench: vLLM's --speculative-config
// JSON, and the shortcuts --draft-model PATH, --dflash [PATH] and --mtp; --spec-trace FILE for
// debugging.
#pragma once
#include <string>
#include <vector>

#include "cli/flags.h"
#include "engine/engine.h"

namespace zen::cli {

// `specs` followed by the speculative flags.
std::vector<FlagSpec> with_speculative_flags(std::vector<FlagSpec> specs);
// Fills o.speculative and o.spec_trace_path; throws zen::Error naming the flag.
void apply_speculative_flags(const Flags& f, EngineOptions& o);
// zen run's summary: drafts, draft tokens, accepted, acceptance per position, mean accepted
// length. Empty without speculation.
std::string speculation_summary(const EngineStats& s);

}  // namespace zen::cli
