// --verify-weights ROOT|MANIFEST|ATTESTATION and --verify-weights-key PUB.pem for zen run and
// zen serve: the weights are checked before the model loads, and a mismatch refuses to start.
#pragma once
#include <string>
#include <vector>

#include "cli/flags.h"

namespace zen::cli {

std::vector<FlagSpec> with_weights_flags(std::vector<FlagSpec> specs);
// Without --verify-weights: returns "". Otherwise checks, prints the summary and the time it
// took on stderr, and returns the weights root; throws zen::Error listing what differs.
std::string verify_weights_flag(const Flags& f, const std::string& model_path, int threads);

// hash, verify, attest (attest.cc).
int hash_command(int argc, char** argv);
int verify_command(int argc, char** argv);
int attest_command(int argc, char** argv);

}  // namespace zen::cli
